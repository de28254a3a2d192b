"""BSP-A2A: gradients leave only after backward, fused (the study's threshold of 536,870,912).

The study's threshold counts elements, not bytes (its `--threshold 536870912` goes to
`_generate_groups_with_threshold`, which sums `numel()`), so every model it ran, BERT-Large's
336 million parameters included, is one message per iteration.
"""
from .grouped import GroupedSync, fuse_by_threshold


class BSP(GroupedSync):
    eager = False

    def choose_groups(self, model):
        return fuse_by_threshold([p.numel() for _, p in self.named], int(self.cfg.fusion_elems))
