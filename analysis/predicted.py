"""The report's views of the performance model, always labelled as predictions.

- `table`: the predicted records (`make predict`, `"kind": "predicted"`), as the predictor printed
  them, never merged with a measured table.
- `versus_measured`: every setup that has both a prediction and a measurement: the published
  100 Gb/s IB cells against predictions on `100gbib`, and each `METHOD=auto` run's measurement
  against the prediction recorded beside it. A table and a scatter plot (y = x is perfect).
- `whatif_figure`: predicted speedup at 32 workers against the inter-node link's bandwidth,
  1-200 Gb/s (alpha kept at the study's 100 Gb/s IB value; PCIe nodes of 4 GPUs), each method
  per model, with the bandwidths where the fastest method changes (crossovers) marked.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .tables import markdown, method_key

WHATIF_GBPS = [1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200]
WHATIF_WORKERS = 32
LABEL = "PREDICTED (performance model, not measured)"


def table(predicted: list[dict]) -> tuple[list, list]:
    header = ["model", "local batch", "network", "method", "workers", "predicted samples/s", "dominant"]
    rows = [[r["model"], r["local_batch"], r["network"], r["method"], r["workers"],
             f"{r['samples_per_sec']:.1f}" + (" (upper bound)" if r.get("upper_bound") else ""), r.get("dominant", "-")]
            for r in sorted(predicted, key=lambda r: (r["model"], r["network"], method_key(r["method"]), r["workers"]))]
    return header, rows


def versus_measured(records: list[dict], predicted: list[dict], published: dict) -> list[tuple]:
    """(label, model, method, workers, predicted, measured) for every pair that exists."""
    pairs = []
    latest = {}
    for r in predicted:  # the newest prediction of each cell
        latest[(r["model"], r["local_batch"], r["network"], r["method"], r["workers"])] = r
    for setup, cells in published.items():
        for (method, w), cell in cells.items():
            r = latest.get((setup.model, setup.local_batch, "100gbib", method, w))
            if r and w > 1:
                pairs.append(("published 100gbib", setup.model, method, w, r["samples_per_sec"], cell.mean))
    for r in records:
        p = r.get("prediction")
        if r.get("status") == "ok" and p and r.get("samples_per_sec"):
            pairs.append((f"auto run ({p.get('network')})", r["model"], r["method"], r["workers"],
                          p["samples_per_sec"], r["samples_per_sec"]))
    return pairs


def fastest_hits(predicted: dict, cells: dict, methods) -> list[dict]:
    """Per worker count of one setup: did the predictor pick the fastest method? `predicted`
    {(method, workers): cli.Prediction}; `cells` {(method, workers): tables.Cell} measured
    (published cells count n = 5 with their std). The pick is `cli.fastest_tied`'s, among the
    `methods` both have. Strict: the pick is the measured fastest. Within noise: the measured
    throughput of the pick does not differ from the measured fastest's beyond noise
    (analysis.noise.compare: Welch's 95% interval, or the setup's largest spread where a cell has
    too few repeats), so a pick among a tie counts as right. Among predicted ties: the measured
    fastest is the pick or one the model does not rank apart from it (`predicted_ties`, the pick
    first)."""
    from ddlbench.predict.cli import fastest_tied

    from . import noise

    spread = noise.setup_spread(cells)
    out = []
    for w in sorted({w for _, w in cells}):
        here = [m for m in methods if (m, w) in cells and (m, w) in predicted]
        if not here:
            continue
        best_meas = max(here, key=lambda m: cells[(m, w)].mean)
        ties = fastest_tied({(m, w): predicted[(m, w)] for m in here}, w)
        best_pred = ties[0]
        d = noise.compare(cells[(best_pred, w)], cells[(best_meas, w)], spread)
        out.append({"workers": w, "predicted": best_pred, "measured": best_meas, "strict": best_pred == best_meas,
                    "within_noise": best_pred == best_meas or d.sign == noise.WITHIN, "test": d.text,
                    "predicted_ties": ties, "among_ties": best_meas in ties})
    return out


def versus_table(pairs) -> tuple[list, list]:
    header = ["measured by", "model", "method", "workers", "predicted", "measured", "error"]
    rows = [[lab, mo, me, w, f"{p:.1f}", f"{m:.1f}", f"{(p - m) / m:+.1%}"] for lab, mo, me, w, p, m in pairs]
    return header, rows


def versus_figure(pairs, out: Path) -> Path | None:
    if not pairs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for lab in sorted({p[0] for p in pairs}):
        xs = [p[5] for p in pairs if p[0] == lab]
        ys = [p[4] for p in pairs if p[0] == lab]
        ax.scatter(xs, ys, s=14, label=lab)
    lo = min(min(p[4], p[5]) for p in pairs) * 0.8
    hi = max(max(p[4], p[5]) for p in pairs) * 1.2
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="predicted = measured")
    ax.set(xscale="log", yscale="log", xlabel="measured samples/s", ylabel="PREDICTED samples/s",
           title="Predicted against measured")
    ax.legend(fontsize=8)
    path = out / "predicted-vs-measured.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def crossings(xs, curves: dict) -> list[tuple]:
    """[(x, from, to)] where the largest of `curves` {name: [y at each x]} changes; a curve that
    stays tied with the largest (`cli.tied`) keeps its place."""
    from ddlbench.predict.cli import tied

    best = []
    for i in range(len(xs)):
        ties = tied({m: ys[i] for m, ys in curves.items()})
        best.append(best[-1] if best and best[-1] in ties else ties[0])
    return [(xs[i], best[i - 1], best[i]) for i in range(1, len(xs)) if best[i] != best[i - 1]]


def whatif(models=("resnet50", "bert-base", "bert-large"), gbps=WHATIF_GBPS, workers=WHATIF_WORKERS) -> dict:
    """{model: {method: [speedup at each bandwidth]}} and the crossovers {model: [(gbps, from, to)]}:
    where the predicted fastest estimate changes, not where it only swaps with a method tied with
    it (`cli.tied`); `upper_bounds`: the methods whose curve is a bound, not an estimate."""
    from ddlbench.predict import cli, network, simulate

    base, opts = network.load("100gbib"), cli.study_opts()
    curves, crossovers = {}, {}
    for model in models:
        batch = cli.model_batch(model)
        prof = cli.load_profile(model, batch, None)
        per = {m: [] for m in simulate.METHODS}
        for g in gbps:
            c = replace(base, inter=network.Link(base.inter.alpha_s, 8 / (g * 1e9)), name=f"{g} Gb/s")
            for m in simulate.METHODS:
                r = simulate.simulate(m, prof, c, workers, opts)
                per[m].append(r.samples_per_sec(batch) / prof.samples_per_sec_1)
        curves[model] = per
        # an upper bound (simulate.upper_bound) says how fast a method could be, not that it is the
        # fastest: drawn dashed, and no crossover to or from it, as the pick leaves it out
        crossovers[model] = crossings(gbps, {m: ys for m, ys in per.items() if not simulate.upper_bound(m, opts)})
    bounds = [m for m in simulate.METHODS if simulate.upper_bound(m, opts)]
    return {"curves": curves, "crossovers": crossovers, "gbps": list(gbps), "workers": workers, "upper_bounds": bounds}


def whatif_figure(data: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(data["curves"])
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        for m, ys in data["curves"][model].items():
            bound = m in data.get("upper_bounds", ())
            ax.plot(data["gbps"], ys, marker=".", ls="--" if bound else "-", label=f"{m} (upper bound)" if bound else m)
        for g, a, b in data["crossovers"][model]:
            ax.axvline(g, color="grey", ls=":", lw=1)
            ax.text(g, ax.get_ylim()[1] * 0.98, f"{a}\u2192{b}", rotation=90, va="top", fontsize=6)
        ax.set(xscale="log", xlabel="inter-node bandwidth (Gb/s)", ylabel=f"PREDICTED speedup, {data['workers']} GPUs",
               title=f"{model}: predicted")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{LABEL}: speedup against link bandwidth (alpha of 100 Gb/s IB; 4 GPUs per node on PCIe)", fontsize=9)
    path = out / "predicted-whatif-bandwidth.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def section(loaded, published: dict, out: Path, whatif_models=("resnet50", "bert-base", "bert-large")) -> list[str]:
    """The report's markdown for the predictions, with its figures written into `out`."""
    md = [f"## {LABEL}", "",
          "Everything in this section comes from the performance model (`make predict`, `ddlbench.predict`), "
          "calibrated only from specifications, microbenchmarks and one-worker throughput; none of it is a "
          "measurement, and none of it enters the tables above.", ""]
    if loaded.predicted:
        header, rows = table(loaded.predicted)
        md += [f"### Predicted records ({len(rows)})", "", markdown(header, rows), ""]
    pairs = versus_measured(loaded.records, loaded.predicted, published)
    fig = versus_figure(pairs, out)
    md += ["### Predicted against measured", ""]
    if pairs:
        errs = sorted(abs(p - m) / m for *_, p, m in pairs)
        md += [f"Median absolute error {errs[len(errs) // 2]:.1%} over {len(pairs)} cells.", "",
               f"![predicted vs measured]({fig.name})", "", markdown(*versus_table(pairs)), ""]
    else:
        md += ["No setup has both a prediction and a measurement yet (run `make predict NETWORK=100gbib` for the "
               "published cells, or `METHOD=auto`).", ""]
    try:
        data = whatif(whatif_models)
        fig = whatif_figure(data, out)
        md += ["### What if the network were faster or slower", "",
               f"![what-if]({fig.name})", "", "Crossovers (bandwidth where the predicted fastest method changes):", ""]
        for model, xs in data["crossovers"].items():
            md.append(f"- {model}: " + ("; ".join(f"{a} -> {b} at {g} Gb/s" for g, a, b in xs) or "none in 1-200 Gb/s"))
        md.append("")
    except (OSError, ValueError, RuntimeError) as exc:  # a model that cannot be profiled here
        md += [f"What-if plot not drawn: {exc}", ""]
    return md
