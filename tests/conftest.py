"""Test tiers, by what a test needs: tests/unit (pure, in-process), tests/multiproc (several
worker processes on this host, CPU and Gloo), tests/gpu (CUDA workers and NCCL) and
tests/cluster (a real Slurm). GPU and cluster tests carry the `gpu` and `cluster` markers and
skip, with the reason, where those are absent.

`make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`): most of its time is
start-ups and timeouts, not CPU. Each test module is one group, so a module's shared runs
(module- and session-scoped fixtures) are made once; modules that need a machine-wide resource
(one emulated cluster per machine) share a group named for it and so run one after another."""
import pytest


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    import torch

    no_gpu = pytest.mark.skip(reason="needs CUDA GPUs; none visible here")
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            # the emulated cluster is one per machine: every test that builds or uses it, one worker
            group = "netns" if "netns" in item.keywords else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)
