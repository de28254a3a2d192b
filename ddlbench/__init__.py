"""ddlbench: measure data-parallel communication methods the way Shi et al. (IEEE Network 2020)
compared them, on your own cluster. `python -m ddlbench --help` and README.md say how."""

__version__ = "0.1.0"
