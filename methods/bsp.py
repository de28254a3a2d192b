"""BSP-A2A: gradients leave only after backward, fused (the study's 512 MiB fusion threshold).

With every gradient in one buffer this is a single all-reduce per iteration for all but the
largest models (BERT-Large's 1.3 GB of gradients makes three 512 MiB messages, as in Horovod).
"""
from .grouped import GroupedSync, fuse_by_threshold


class BSP(GroupedSync):
    eager = False

    def choose_groups(self, model):
        sizes = [p.numel() * p.element_size() for _, p in self.named]
        return fuse_by_threshold(sizes, int(self.cfg.fusion_bytes))
