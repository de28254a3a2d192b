"""Helpers shared by the multi-process tests: run the CLI, read its records."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def ddlbench(*args: str, results: Path, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess:
    """Run `python -m ddlbench ARGS results_dir=RESULTS` and return the finished process."""
    cmd = [sys.executable, "-m", "ddlbench", *args, f"results_dir={results}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=_env())
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _env() -> dict:
    return dict(os.environ, PYTHONUNBUFFERED="1")


def records(results: Path) -> list[dict]:
    path = Path(results) / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
