"""commbench: how the communication backends compare on this machine, and how their cost grows.

Collectives (all_reduce, broadcast, all_gather, reduce_scatter, reduce) over every available
backend (torch.distributed Gloo, NCCL on GPUs, torch's MPI and UCC where built, MPI through
mpi4py), for sizes from 4 B to 256 MiB, fp32/fp16/bf16, CPU and GPU tensors, 2..N workers;
plus seed 002's process-group experiment and seed 003's per-tensor / fused / bucketed
all-reduce of a model's gradients. `python -m ddlbench.commbench --help`.
"""
