"""`make figures`: every run record under a results directory, as the study's figure and tables,
side by side with the published numbers.

    python -m ddlbench.analysis.report [RESULTS_DIR] [--out DIR] [--reference CSV]

Writes to RESULTS_DIR/report/: index.md (figures and tables together), results.csv,
speedup.csv, side_by_side.csv, findings.csv, intensity.csv, and fig4-*.png/svg per setup.
Works with no records at all: the published numbers still render. Predictions (`make predict`)
appear only in their own labelled section (`predicted`), with the what-if plot
(predicted-whatif-bandwidth.png) and predicted against measured (predicted-vs-measured.png).
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from . import findings, intensity, noise, predicted, reference, tables
from .figures import figure4
from .records import load


def build(results: Path, out: Path, reference_csv: Path = reference.DEFAULT_CSV,
          whatif_models=("resnet50", "bert-base", "bert-large")) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    loaded = load([results])
    published = reference.load(reference_csv)
    setups = {**tables.ours(loaded.records), **published}
    facts = _intensities({s.model for s in setups})

    md = ["# ddlbench report", "",
          f"Run records: `{results}/records/` and `{results}/*.jsonl` ({len(loaded.records)} records, "
          f"{sum(r.get('status') == 'ok' for r in loaded.records)} ok). Published: Shi et al., IEEE Network 2020, "
          "Figure 4 (`results/reference/`).", ""]
    if loaded.problems:
        md += ["## Data problems", ""] + [f"- {p}" for p in loaded.problems] + [""]

    md += ["## Figure 4: throughput per method and worker count", "",
           "Bars: samples/s, mean over repeats, error bars one standard deviation; above each group, "
           "the best speedup over one worker (where a one-worker run exists): the method, how many others "
           "are within noise of it, and the 95% t-interval of its mean over the one-worker mean (or, with "
           "fewer than 3 repeats, its repeats and the setup's run-to-run spread).", ""]
    for s in sorted(setups, key=lambda s: (s.model, s.source != "ours", s.local_batch, s.network)):
        i = (reference.STUDY_MODELS.get(s.model, {}).get("intensity") if s.source == "published"
             else facts.get(s.model, {}).get("intensity"))
        png, _svg = figure4(s, setups[s], out, i)
        md += [f"![{s.model} {s.source}]({png.name})", ""]

    header, rows = tables.results_table(setups)
    tables.write_csv(out / "results.csv", header, rows)
    md += ["## Results: samples/s (mean ± std)", "", tables.LEGEND, "", tables.markdown(header, rows), ""]

    header, rows = tables.speedup_table(setups)
    tables.write_csv(out / "speedup.csv", header, rows)
    md += ["## Speedup over one worker (scaling efficiency)", "", tables.LEGEND, "", tables.markdown(header, rows), ""]

    header, rows = side_by_side(setups)
    tables.write_csv(out / "side_by_side.csv", header, rows)
    md += ["## Ours beside the published numbers", "",
           "Where model, local batch, method and worker count match." if rows else
           "No run of ours matches a published configuration (model, local batch, method, workers) yet.", ""]
    if rows:
        md += [tables.markdown(header, rows), ""]

    header, rows = findings_table(setups)
    tables.write_csv(out / "findings.csv", header, rows)
    md += ["## The study's Table 2 findings on this data", "",
           f"Verdicts: holds, does not hold, or within noise. The test: {noise.TEST} A finding over several "
           "cells counts only the decided ones and says how many were within noise. Evidence: the two means, "
           "then a - b with its interval, or how far apart they are against the spread.", "",
           tables.markdown(header, rows), ""]

    header, rows = intensity_table(facts, setups)
    tables.write_csv(out / "intensity.csv", header, rows)
    md += ["## Model intensity and C2C ratio", "",
           "I = C / D: C = multiply-adds of one sample's forward and backward pass (counted with "
           "torch.utils.flop_counter), D = parameters. C2C = f(N) / (M I) with ring all-reduce "
           "f(N) = 2(N-1)/N and M the global batch. The study's BERT intensities (249, 248) are "
           "higher than ours; it does not state how it counted them.", "",
           tables.markdown(header, rows), ""]
    if whatif_models or loaded.predicted:
        md += predicted.section(loaded, published, out, whatif_models)
    index = out / "index.md"
    index.write_text("\n".join(md))
    for p in loaded.problems:
        print(p, file=sys.stderr)
    return index


def side_by_side(setups) -> tuple[list, list]:
    published = {(s.model, s.local_batch): cells for s, cells in setups.items() if s.source == "published"}
    header = ["model", "local batch", "our network", "method", "workers", "ours", "published", "ours / published"]
    rows = []
    for s, cells in sorted(setups.items()):
        ref = published.get((s.model, s.local_batch)) if s.source == "ours" else None
        for (m, w), c in sorted(cells.items(), key=lambda kv: (tables.method_key(kv[0][0]), kv[0][1])):
            if ref and (m, w) in ref:
                rows.append([s.model, s.local_batch, s.network, m, w, tables.fmt_cell(c), tables.fmt_cell(ref[(m, w)]),
                             f"{c.mean / ref[(m, w)].mean:.2f}"])
    return header, rows


def findings_table(setups) -> tuple[list, list]:
    by_source = defaultdict(dict)  # (source, network) -> {model: cells}; one batch per model
    for s in sorted(setups, key=lambda s: -len(setups[s])):
        by_source[(s.source, s.network)].setdefault(s.model, setups[s])
    header = ["finding", "data", "verdict", "evidence"]
    rows = []
    for (source, network), models in sorted(by_source.items()):
        for v in findings.check(models):
            rows.append([v.finding, f"{source}: {network}", v.verdict, v.evidence])
    return header, rows


def _intensities(models: set[str]) -> dict:
    out = {}
    for m in sorted(models):
        try:
            out[m] = intensity.count(m)
        except (OSError, ValueError, RuntimeError) as exc:  # a model without a config of its own
            print(f"intensity of {m}: not counted ({exc})", file=sys.stderr)
    return out


def intensity_table(facts: dict, setups) -> tuple[list, list]:
    batches = defaultdict(set)
    for s in setups:
        batches[s.model].add(s.local_batch)
    header = ["model", "parameters D", "C (multiply-adds / sample)", "I ours", "I study", "local batch", "C2C at 32 workers"]
    rows = []
    for m, f in sorted(facts.items()):
        study = reference.STUDY_MODELS.get(m, {}).get("intensity", "-")
        for b in sorted(batches[m]):
            rows.append([m, f"{f['params'] / 1e6:.1f} M", f"{f['ops_per_sample'] / 1e9:.2f} G", f"{f['intensity']:.0f}",
                         study, b, f"{intensity.c2c(m, b, 32):.2e}"])
    return header, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Regenerate the study's figure and tables from run records.")
    ap.add_argument("results", nargs="?", default="results")
    ap.add_argument("--out", default=None, help="default: RESULTS/report")
    ap.add_argument("--reference", default=str(reference.DEFAULT_CSV))
    args = ap.parse_args(argv)
    results = Path(args.results)
    out = Path(args.out) if args.out else results / "report"
    bad = paths_problem(results, args.out, out, Path(args.reference))
    if bad:  # said before anything is read or written
        print(f"report: error: {bad}", file=sys.stderr)
        return 2
    try:
        index = build(results, out, Path(args.reference))
    except OSError as exc:  # checked above; what is left (a full disk, a read-only mount) is one line too
        print(f"report: error: {out} could not be written ({exc}); accepted: a directory you can write",
              file=sys.stderr)
        return 2
    print(f"report: {index}")
    return 0


def paths_problem(results: Path, given_out: str | None, out: Path, reference_csv: Path) -> str | None:
    """Why the report cannot read RESULTS or the reference CSV, or write its folder: said in one
    line before any work (nothing is created here)."""
    from ddlbench.record import unusable_dir

    if not results.exists():
        return f"results directory {results} does not exist; accepted: a results directory"
    if not results.is_dir() and given_out is None:
        return (f"{results} is not a directory; accepted: a results directory "
                f"(or a .jsonl file of records with --out DIR)")
    if not reference_csv.is_file():
        return f"--reference {reference_csv} is not a file; accepted: a CSV of published numbers"
    what = f"--out {given_out}" if given_out is not None else f"report folder {out}"
    bad = unusable_dir(out)  # the deepest that exists must take new entries
    if bad is None:
        return None
    d, why = bad
    if why == "not a directory":
        why = "is not a directory" if d == out else f"is unusable: {d} exists and is not a directory"
        return f"{what} {why}; accepted: a directory you can write (or create)"
    return f"{what} is unusable: {d} is not writable by this user; accepted: a directory you can write (or create)"

if __name__ == "__main__":
    sys.exit(main())
