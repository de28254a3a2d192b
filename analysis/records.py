"""Read run records: every `*.jsonl` given, line by line, and every record file of a results
directory (`<results>/records/*.json`, one run each, and `*.jsonl`, one commbench step each;
ddlbench.record), keeping what parses.

A results directory reads as the merge of its `*.jsonl` files (runs.jsonl and commbench.jsonl
from earlier versions, predictions.jsonl) and its `records/` folder, records in the order they were written
(record files sort by the time of writing). A line or file that cannot be parsed is
reported with its file (and line number) and skipped; the rest are still used (a run that died
mid-way must not hide the runs before it). So is a record that parses but has a field the tables
cannot use (`problem`: an ok run's model, method, workers, local batch, throughput, host load,
network or config; a prediction's own fields): one bad record must not hide every result.

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


def load(paths, check: bool = True) -> Loaded:
    """Every record under `paths`; with `check`, records the analysis cannot use (`problem`) are
    reported in `problems` and left out (`export` copies them as they are)."""
    out = Loaded()
    for path in paths:
        path = Path(path)
        if path.is_dir():
            folder = path / RECORDS_DIR  # runs' .json and commbench's .jsonl, by time of writing
            files = sorted(path.glob("*.jsonl")) + sorted([*folder.glob("*.json"), *folder.glob("*.jsonl")])
        else:
            files = [path]
        for f in files:
            for rec in _read(f, out.problems, check):
                (out.predicted if rec.get("kind") == PREDICTED else out.records).append(rec)
    return out


def _read(path: Path, problems: list[str], check: bool = True):
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
        bad = problem(rec) if check else None
        if bad:
            problems.append(f"{where}: record skipped: {bad}")
            continue
        yield rec


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _numbers(v) -> bool:
    return isinstance(v, list) and all(map(_number, v))


def _name(v) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _text(v) -> bool:
    return v is None or isinstance(v, str)


def _optional(test):
    return lambda v: v is None or test(v)


NAME, COUNT, NUMBER = (_name, "a name (a non-empty string)"), (_count, "an integer >= 1"), (_number, "a number")
# The fields the tables, figures and findings read of an ok run's record, and what each must be
# (None: absent or null is fine). A failed run's record or a commbench row is not held to them.
RUN_FIELDS = {
    "model": NAME, "method": NAME, "workers": COUNT, "local_batch": COUNT, "samples_per_sec": NUMBER,
    "samples_per_sec_per_repeat": (_optional(_numbers), "a list of numbers or null"),
    "host_busy_cores": (_optional(_numbers), "a list of numbers or null"),
    "host_steal_cores": (_optional(_numbers), "a list of numbers or null"),
    "host_cores": (_optional(_number), "a number or null"),
    "device": (_text, "a string or null"), "backend": (_text, "a string or null"), "engine": (_text, "a string or null"),
    "workers_per_node": (_optional(_count), "an integer >= 1 or null"),
    "network": (_optional(lambda v: isinstance(v, dict)), "a JSON object or null"),
    "network.measured_gbps": (_optional(_numbers), "a list of numbers or null"),
    "config": (_optional(lambda v: isinstance(v, dict)), "a JSON object or null"),
    "config.launcher": (_optional(lambda v: isinstance(v, dict)), "a JSON object or null"),
    "config.launcher.workers_per_node": (_optional(_count), "an integer >= 1 or null"),
    "prediction": (_optional(lambda v: isinstance(v, dict) and _number(v.get("samples_per_sec"))),
                   "null or a JSON object with samples_per_sec (a number)"),
}
# ... and of a prediction's (`make predict`; analysis.predicted).
PREDICTED_FIELDS = {"model": NAME, "method": NAME, "workers": COUNT, "local_batch": COUNT,
                    "network": NAME, "samples_per_sec": NUMBER}
_ABSENT = object()


def problem(rec: dict) -> str | None:
    """What makes `rec` unusable to the analysis, in one line naming the field, its value and what
    is accepted (None: nothing). Only ok runs' records and predictions are checked: the others
    (failed runs, commbench rows) reach no table."""
    if rec.get("kind") == PREDICTED:
        fields = PREDICTED_FIELDS
    elif rec.get("status") == "ok":
        fields = RUN_FIELDS
    else:
        return None
    for dotted, (test, accepted) in fields.items():
        value = rec
        for key in dotted.split("."):
            value = value.get(key, _ABSENT) if isinstance(value, dict) else _ABSENT
        if value is _ABSENT and "." in dotted:
            continue  # its parent is absent or null, or itself reported
        if value is _ABSENT:
            if test(None):
                continue
            return f"{dotted} is missing; accepted: {accepted}"
        if not test(value):
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return f"{dotted}={shown} is invalid; accepted: {accepted}"
    return None


def export(paths, out_path) -> int:
    """Write every record `load(paths)` finds (as written: a record with a field the tables
    cannot use is still a result) into one `runs.jsonl`-style file (through a temporary file and a
    rename); returns how many. With none, `out_path` is left as it was (never replaced by nothing)."""
    out_path = Path(out_path)
    records = load(paths, check=False).records
    if not records:
        return 0
    tmp = out_path.with_name(f".{out_path.name}.export.tmp")
    try:
        with open(tmp, "w") as f:
            f.writelines(json.dumps(r, default=str) + "\n" for r in records)
        tmp.replace(out_path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return len(records)
