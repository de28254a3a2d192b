"""`python -m ddlbench [--multirun] key=value ...`: validate, then launch one run per config.

Overrides are checked before Hydra sees them so a bad value is one line, not a traceback.
"""
from __future__ import annotations

import sys

import hydra

from ddlbench.config import ConfigError, preflight, resolve

_failures: list[str] = []


@hydra.main(config_path="pkg://ddlbench.conf", config_name="config", version_base="1.3")
def _job(cfg) -> None:
    from ddlbench import launch

    resolve(cfg)  # already checked by preflight; fills derived values
    rec = launch.run(cfg)
    if rec["status"] == "failed":
        _failures.append(rec["error"])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not any(a in ("-h", "--help", "--hydra-help", "--info", "--cfg", "-c") or a.startswith("--cfg") for a in argv):
        try:
            argv = preflight(argv)
        except ConfigError as exc:
            print(f"ddlbench: error: {exc}", file=sys.stderr)
            sys.exit(2)
    sys.argv = [sys.argv[0]] + argv
    try:
        _job()
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: the run is recorded; the sweep stops
        sys.exit(getattr(exc, "signum", 2) + 128)
    sys.exit(1 if _failures else 0)
