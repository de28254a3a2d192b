"""Read run records: every `*.jsonl` given, line by line, keeping what parses.

A line that cannot be parsed is reported with its file and line number and skipped; the rest
are still used (a run that died mid-way must not hide the runs before it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Loaded:
    records: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load(paths) -> Loaded:
    out = Loaded()
    for path in paths:
        path = Path(path)
        if path.is_dir():
            out_dir = load(sorted(path.glob("*.jsonl")))
            out.records += out_dir.records
            out.problems += out_dir.problems
            continue
        if not path.exists():
            continue
        with open(path, errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    out.problems.append(f"{path}:{lineno}: unparsable record skipped ({exc})")
                    continue
                out.records.append(rec)
    return out
