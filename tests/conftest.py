"""Test tiers, by what a test needs: tests/unit (pure, in-process), tests/multiproc (several
worker processes on this host, CPU and Gloo), tests/gpu (CUDA workers and NCCL) and
tests/cluster (a real Slurm). GPU and cluster tests carry the `gpu` and `cluster` markers and
skip, with the reason, where those are absent."""
import pytest


def pytest_collection_modifyitems(config, items):
    import torch

    no_gpu = pytest.mark.skip(reason="needs CUDA GPUs; none visible here")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)
