"""Predicted throughput of every method on a cluster you do not have (a separate, labelled tool:
its records say `"kind": "predicted"` and are never read as measurements). See `cli`."""
