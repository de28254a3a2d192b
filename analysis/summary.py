"""The table printed at the end of `make reproduce`: samples/s ± std per method and worker
count, with speedup over one worker where a one-worker run of the same setup is recorded.

    python -m ddlbench.analysis.summary [results_dir_or_jsonl ...] [--export runs.jsonl]

`--export PATH` also writes every record read (a results directory's `records/` merged with its
`*.jsonl`) into one `runs.jsonl`-style file, for tools that read that (`make summary EXPORT=PATH`).

Cells never mix models, batches, engines, backends or devices: each setup is its own table
(see `tables`); several ok records of one configuration combine over all their repeats. Cells
carry the tables' noise marks (tables.LEGEND).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ddlbench import metrics

from . import tables
from .records import export, load


def render(records: list[dict]) -> str:
    setups = tables.ours(records)
    out = []
    for s in sorted(setups):
        cells = setups[s]
        base = tables.baseline(cells)
        workers = tables.workers_of(cells)
        out.append(f"\n{s.model}, local batch {s.local_batch}, {s.network}: samples/s (mean ± std over repeats)"
                   + (f"; speedup over 1 worker ({base:.2f} samples/s) in brackets" if base else ""))
        rows = []
        for m in tables.methods_of(cells):
            row = [m]
            for w in workers:
                c = cells.get((m, w))
                if c is None:
                    row.append("-")
                    continue
                text = tables.mean_std_text(c)
                if base and w > 1:
                    text += f" [{metrics.speedup(c.mean, base):.2f}x]"
                row.append(tables.marked(text, cells, m, w))
            rows.append(row)
        out.append(tables.markdown(["method"] + [f"{w} worker{'s' if w > 1 else ''}" for w in workers], rows))
    return "\n".join(out + ["", tables.LEGEND]) if out else "no ok run records yet"


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ddlbench.analysis.summary")
    parser.add_argument("paths", nargs="*", default=["results"], help="results directories or .jsonl files")
    parser.add_argument("--export", metavar="PATH", help="also write the merged records to PATH (JSON lines)")
    a = parser.parse_args(sys.argv[1:] if argv is None else argv)
    paths = a.paths
    bad = input_problem(paths) or (a.export and export_problem(paths, a.export))
    if bad:  # said before anything is read or written
        print(f"summary: error: {bad}", file=sys.stderr)
        return 2
    loaded = load(paths)
    rc = 0
    if a.export:
        try:
            n = export(paths, Path(a.export).resolve())
        except OSError as exc:  # checked above; what is left (a full disk, a read-only mount) is one line too
            print(f"summary: error: --export {a.export} could not be written ({exc.strerror or exc}); "
                  f"accepted: a file in a directory you can write", file=sys.stderr)
            rc = 2
        else:
            if n:
                print(f"{n} records exported to {a.export}", file=sys.stderr)
            else:
                left = "left as it was" if Path(a.export).exists() else "not written"
                print(f"summary: nothing to export (no measured records read); {a.export} {left}", file=sys.stderr)
    for p in loaded.problems:
        print(p, file=sys.stderr)
    print(render(loaded.records))
    failed = [r for r in loaded.records if r.get("status") == "failed"]
    if failed:
        print(f"\n{len(failed)} failed run(s) recorded; their errors are in the records' `error` field.")
    return rc


def input_problem(paths) -> str | None:
    """Why a results path given cannot be read (a typo must not read as "no records yet")."""
    for p in paths:
        if not Path(p).exists():
            return f"{p} does not exist; accepted: a results directory or a .jsonl file of records"
    return None


def export_problem(paths, export_path: str) -> str | None:
    """Why `--export PATH` cannot be written, found before anything is."""
    out = Path(export_path).resolve()
    if any(Path(p).resolve() in (out, out.parent) for p in paths):
        # a .jsonl in a directory read would be read again next time, beside the records it copies
        return f"--export {export_path} is inside the results read; accepted: a path elsewhere"
    if out.is_dir():
        return f"--export {export_path} is a directory; accepted: a file path (JSON lines)"
    if not out.parent.is_dir():
        what = "does not exist" if not out.parent.exists() else "is not a directory"
        return f"--export {export_path}: its folder {out.parent} {what}; accepted: a file in an existing directory"
    if not os.access(out.parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        return f"--export {export_path} is not writable by this user; accepted: a file in a directory you can write"
    return None

if __name__ == "__main__":
    sys.exit(main())
