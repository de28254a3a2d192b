"""Read run records: every `*.jsonl` given, line by line, and every record file of a results
directory (`<results>/records/*.json`, one run each, and `*.jsonl`, one commbench step each;
ddlbench.record), keeping what parses.

A results directory reads as the merge of its `*.jsonl` files (runs.jsonl and commbench.jsonl
from earlier versions, predictions.jsonl) and its `records/` folder, records in the order they were written
(record files sort by the time of writing). A line or file that cannot be parsed is
reported with its file (and line number) and skipped; the rest are still used (a run that died
mid-way must not hide the runs before it).

Predictions (`"kind": "predicted"`, written by `make predict` to `predictions.jsonl`) are not
measurements: `load` keeps them apart in `Loaded.predicted`, so no table, figure, finding, summary
or export built from `Loaded.records` can ever show one as measured; only the report's own
labelled prediction views read them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ddlbench.record import RECORDS_DIR


PREDICTED = "predicted"  # a record's `kind` when the performance model wrote it


def workers_per_node(rec: dict) -> int | None:
    """A record's workers per node as its run was configured (`config.launcher.workers_per_node`;
    None: all on one machine, the local launchers' default), else as its PS layout recorded it
    (the top-level field, which only PS methods write)."""
    return ((rec.get("config") or {}).get("launcher") or {}).get("workers_per_node") or rec.get("workers_per_node")


@dataclass
class Loaded:
    records: list[dict] = field(default_factory=list)     # measurements only
    problems: list[str] = field(default_factory=list)
    predicted: list[dict] = field(default_factory=list)   # `make predict`'s records, kept apart


def load(paths) -> Loaded:
    out = Loaded()
    for path in paths:
        path = Path(path)
        if path.is_dir():
            folder = path / RECORDS_DIR  # runs' .json and commbench's .jsonl, by time of writing
            files = sorted(path.glob("*.jsonl")) + sorted([*folder.glob("*.json"), *folder.glob("*.jsonl")])
        else:
            files = [path]
        for f in files:
            for rec in _read(f, out.problems):
                (out.predicted if rec.get("kind") == PREDICTED else out.records).append(rec)
    return out


def _read(path: Path, problems: list[str]):
    """Each record of a `.jsonl` (one per line) or `.json` file (one)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except FileNotFoundError:  # not there (yet), or a record file renamed away while listing
        return
    lines = [text] if path.suffix == ".json" else text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}" if path.suffix == ".json" else f"{path}:{lineno}"
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            problems.append(f"{where}: unparsable record skipped ({exc})")
            continue
        yield rec


def export(paths, out_path) -> int:
    """Write every record `load(paths)` finds into one `runs.jsonl`-style file (through a
    temporary file and a rename); returns how many."""
    out_path = Path(out_path)
    records = load(paths).records
    tmp = out_path.with_name(f".{out_path.name}.export.tmp")
    try:
        with open(tmp, "w") as f:
            f.writelines(json.dumps(r, default=str) + "\n" for r in records)
        tmp.replace(out_path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return len(records)
