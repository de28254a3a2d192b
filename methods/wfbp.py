"""WFBP-A2A (wait-free backpropagation): one all-reduce per gradient tensor, launched from the
tensor's gradient hook as soon as backward produces it, so communication overlaps backward."""
from .grouped import GroupedSync


class WFBP(GroupedSync):
    eager = True

    def choose_groups(self, model):
        return [[i] for i in range(len(self.named))]

    def describe(self):
        # Not fused: one message per tensor, so no message groups to report (see the trace).
        return {"groups": None, "messages_per_iter": len(self.groups)}
