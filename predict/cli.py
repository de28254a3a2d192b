"""`python -m ddlbench.predict --model resnet50 --workers 4,8,16,32 --network 100gbib`
(`make predict`): predicted samples/s of the seven methods and DDP at each worker count, the
fastest marked, what dominates each, and one JSON line per (method, workers) appended to
`<results>/predictions.jsonl` with `"kind": "predicted"`.

Inputs and their sources, each recorded in every line:
- the per-layer profile (`profile.derived`): the model's operators priced by the roofline on
  the meta device, scaled to a one-worker throughput: `--one-worker` as stated by the user, or the
  study's published one-worker row for the model and batch (RTX 2080 Ti; only workers == 1 rows
  are read);
- the network (`conf/network/<name>.yaml`, `network.load`);
- the methods' settings (`conf/method/*.yaml`) and the profile's ByteScheduler-PS variant.
"""
from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ddlbench import hostcpu

from . import network, profile, simulate

DEFAULT_FILE = "predictions.jsonl"

# the make variable that sets each option (`make predict`, `make reproduce METHOD=auto`), named in errors
MAKE_VARS = {"--model": "MODEL", "--workers": "WORKERS", "--network": "NETWORK", "--methods": "METHOD",
             "--results": "RESULTS", "--profile-from": "PROFILE_FROM", "--intra": "INTRA", "--one-worker": "ONE_WORKER",
             "--device": "DEVICE", "--stack": "STACK", "--ps-topology": "PS_TOPOLOGY"}


def knob(option: str, value, make_vars: dict = MAKE_VARS) -> str:
    """`--stack='foo' (STACK with make)`: the option, its value, and the make variable that sets it."""
    var = make_vars.get(option)
    return f"{option}={value!r}" + (f" ({var} with make)" if var else "")


class ArgumentParser(argparse.ArgumentParser):
    """argparse with this project's one-line errors (`--stack='foo' (STACK with make) is unknown;
    accepted: study, ddlbench`), raised as ValueError for main to print with the rest (exit 2),
    never argparse's usage block."""
    TYPES = {"int": "an integer", "float": "a number"}

    def __init__(self, *args, make_vars: dict = MAKE_VARS, **kwargs):
        super().__init__(*args, **kwargs)
        self.make_vars = make_vars

    def error(self, message: str):
        message = " ".join(message.split())
        arg = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message)
        if not arg:  # unrecognized arguments, required ones missing
            raise ValueError(f"{message}; accepted: the options `{self.prog} --help` lists")
        option, what = arg.groups()
        choice = re.fullmatch(r"invalid choice: (.*) \(choose from (.*)\)", what)
        typed = re.fullmatch(r"invalid (\S+) value: (.*)", what)
        if choice:
            accepted = ", ".join(_literal(c) for c in re.split(r",\s*", choice.group(2)))
            raise ValueError(f"{knob(option, _literal(choice.group(1)), self.make_vars)} is unknown; accepted: {accepted}")
        if typed:
            raise ValueError(f"{knob(option, _literal(typed.group(2)), self.make_vars)} is invalid; accepted: "
                             f"{self.TYPES.get(typed.group(1), typed.group(1))}")
        var = self.make_vars.get(option)
        raise ValueError(f"{option}{f' ({var} with make)' if var else ''}: {what}; accepted: see `{self.prog} --help`")


def _literal(text: str) -> str:
    """'foo' (argparse quotes values with repr) -> foo."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, str) else text


def parse_workers(text: str) -> list[int]:
    """WORKERS: a comma list of positive integers (4,8,16,32)."""
    for w in text.split(","):
        if not w.strip().isdigit() or int(w) < 1:
            why = "an empty item" if not w.strip() else f"{w.strip()!r} is not a positive integer"
            raise ValueError(f"{knob('--workers', text)} is invalid ({why}); accepted: a comma list of positive "
                             f"integers (e.g. 4,8,16,32)")
    return [int(w) for w in text.split(",")]


def run_profile_names() -> list[str]:
    """The run profiles (conf/profile/*.yaml)."""
    from ddlbench.config import choices

    return choices("profile")


def check_results(results: str) -> Path:
    """RESULTS/predictions.jsonl can be appended to (the directory made if need be): checked
    before anything is computed, so a bad RESULTS never costs the predictions."""
    from ddlbench.record import unusable_dir

    path = Path(results)
    accepted = "accepted: a writable directory, or a path where one can be made"
    target, bad = path / DEFAULT_FILE, unusable_dir(path)
    if bad is not None and bad[1] == "not a directory":
        there = bad[0]
        what = "is a file, not a directory" if there == path else f"cannot be made: {there} is a file, not a directory"
        raise ValueError(f"{knob('--results', results)} {what}; {accepted}")
    if bad is not None:
        raise ValueError(f"{knob('--results', results)} is not writable ({bad[0]}); {accepted}")
    if target.exists() and (not target.is_file() or not os.access(target, os.W_OK)):
        raise ValueError(f"{knob('--results', results)} holds {target}, which is not a writable file; {accepted}")
    return target


@dataclass
class Prediction:
    method: str
    workers: int
    samples_per_sec: float
    iteration_s: float
    compute_s: float
    explanation: dict | None
    upper_bound: str | None = None  # why this is a bound, not an estimate (simulate.upper_bound)
    slower_comm_samples_per_sec: float | None = None  # with communication `comm_uncertainty` x the model's
    regret: float | None = None     # the largest share it falls short of the fastest estimate, at the
                                    # model's communication or `comm_uncertainty` x it (`rank`)
    comm_uncertainty: float = 0.0   # COMM_UNCERTAINTY, where the prediction was weighed (`predict`)

    def record(self, model: str, local_batch: int, cluster: network.Cluster, prof: profile.Profile,
               opts: simulate.Options) -> dict:
        from ddlbench.record import git_commit, now_iso

        rec = {"kind": "predicted", "method": self.method, "model": model, "workers": self.workers,
               "local_batch": local_batch, "network": cluster.name, "samples_per_sec": round(self.samples_per_sec, 3),
               "iteration_s": self.iteration_s, "compute_s": self.compute_s,
               "one_worker_samples_per_sec": prof.samples_per_sec_1, "profile_source": prof.source,
               "stack": opts.stack, "algorithm": opts.algorithm, "bytescheduler_ps": opts.bytescheduler_ps,
               "bytescheduler_unit_s": opts.bytescheduler_unit_s, "bytescheduler_cpu_s": opts.bytescheduler_cpu_s,
               "network_sources": cluster.sources, "git_commit": git_commit(), "predicted_at": now_iso()}
        cfg = simulate.method_config(self.method, opts.bytescheduler_ps)
        if cfg["architecture"] == "ps":
            rec["ps_topology"] = "per-gpu" if simulate.per_gpu(cfg, opts) else "per-machine"
        if self.upper_bound:
            rec["upper_bound"] = self.upper_bound
        if self.regret is not None:
            rec["slower_comm_samples_per_sec"] = round(self.slower_comm_samples_per_sec, 3)
            rec["comm_uncertainty"], rec["regret"] = self.comm_uncertainty, round(self.regret, 5)
        if self.explanation:
            rec["dominant"] = self.explanation["dominant"]
            rec["shares_s"] = self.explanation["shares_s"]
        return rec


@functools.lru_cache(maxsize=None)
def run_profile_settings(name: str) -> dict:
    """conf/profile/<name>.yaml (read once per process; {} where there is none)."""
    import yaml

    from ddlbench.config import conf_dir

    path = conf_dir() / "profile" / f"{name}.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def study_opts(profile_name: str = "study", stack: str = "study", algorithm: str | None = None,
               backend: str | None = None, ps_topology: str | None = None) -> simulate.Options:
    """Options as the named run profile would run: its ByteScheduler-PS variant; the all-reduce
    algorithm `algorithm`, by default the one of the stack and backend (`simulate.default_algorithm`);
    PS methods in `ps_topology` (None: their configs')."""
    variant = run_profile_settings(profile_name).get("bytescheduler_ps", "worker")
    return simulate.Options(stack=stack, algorithm=algorithm, backend=backend, bytescheduler_ps=variant,
                            ps_topology=ps_topology)


def check_model(model: str) -> None:
    """The predictor profiles the models of conf/model/ by name; `torchvision` there is any
    torchvision classifier, which runs (model=vgg16) but has no profile here: a one-line error
    saying which models can be predicted, and with what."""
    from ddlbench.config import choices

    known = [m for m in choices("model") if m != "torchvision"]
    if model in known:
        return
    published = sorted({r["model"].replace("_", "-") for r in profile.one_worker_rows()} & set(known))
    others = [m for m in known if m not in published]
    raise ValueError(f"{knob('--model', model)} cannot be predicted: the predictor profiles the models of conf/model/ "
                     f"only, not any torchvision classifier; accepted: {', '.join(known)} (the study published the "
                     f"one-worker throughput of {', '.join(published)}"
                     + (f"; {', '.join(others)} need ONE_WORKER=<samples/s> or PROFILE_FROM=measured)" if others else ")"))


def model_batch(model: str) -> int:
    import yaml

    from ddlbench.config import conf_dir

    check_model(model)
    return int(yaml.safe_load((conf_dir() / "model" / f"{model}.yaml").read_text())["local_batch"])


PROFILE_SOURCES = ("derived", "measured")


def load_profile(model: str, local_batch: int, one_worker: float | None, source: str = "derived",
                 device: str = "cpu", threads: int | None = None, sharers: int = 1) -> profile.Profile:
    """derived: the roofline scaled to `one_worker` (default: the study's published one-GPU row);
    measured: one worker's hooks on `device` (here; on the CPU at `threads` intra-op threads,
    beside `sharers - 1` others running the same step: profile.measured), rescaled to
    `one_worker` only if stated."""
    if source == "measured":
        prof = profile.measured(model, local_batch, device, threads=threads, sharers=sharers)
        if device == "cpu":  # the runtime's copies of fused messages there
            prof = prof.with_copy(*profile.measure_copy(device, threads))
        return prof if one_worker is None else prof.scaled(one_worker, f"{prof.source}, scaled to {one_worker:g} samples/s")
    if source != "derived":
        raise ValueError(f"profile source {source!r} is unknown; accepted: {', '.join(PROFILE_SOURCES)}")
    x1 = one_worker if one_worker is not None else profile.one_worker_samples_per_sec(model, local_batch)
    return profile.derived(model, local_batch, x1)


def check_device(device: str) -> None:
    """DEVICE's spelling (whether it is here is measure_device's question)."""
    if not re.fullmatch(r"auto|cpu|cuda(?::\d+)?", device):
        raise ValueError(f"{knob('--device', device)} is invalid; accepted: auto, cpu, cuda, cuda:N")


def measure_device(device: str) -> str:
    """The device a measured profile is taken on: `auto` is cuda where a GPU is visible (the
    target device of a GPU user's runs), else cpu."""
    import torch

    check_device(device)
    gpu = torch.cuda.is_available()
    if device == "auto":
        return "cuda" if gpu else "cpu"
    m = re.fullmatch(r"cuda(?::(\d+))?", device)
    if m and not gpu:
        raise ValueError(f"--device {device!r}: no CUDA GPU is visible here; accepted: auto, cpu")
    if m and m.group(1) is not None and int(m.group(1)) >= torch.cuda.device_count():
        raise ValueError(f"--device {device!r}: {torch.cuda.device_count()} CUDA GPU(s) visible here; accepted: auto, "
                         f"cpu, cuda, cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return device


def predict(model: str, workers: list[int], net: str | network.Cluster, methods=simulate.METHODS,
            local_batch: int | None = None, one_worker: float | None = None, opts: simulate.Options | None = None,
            explain: bool = True, prof: profile.Profile | None = None, comm_uncertainty: float | None = None):
    """{(method, workers): Prediction}, with the profile and cluster used; each also predicted with
    communication `comm_uncertainty` (default COMM_UNCERTAINTY) x the model's and `rank`ed, for
    the pick (`fastest_tied`)."""
    cluster = network.load(net) if isinstance(net, str) else net
    local_batch = local_batch or model_batch(model)
    prof = prof or load_profile(model, local_batch, one_worker)
    opts = opts or study_opts()
    out = {}
    k = COMM_UNCERTAINTY if comm_uncertainty is None else comm_uncertainty
    slow = network.slower(cluster, k)
    for w in workers:
        for m in methods:
            ex = simulate.explain(m, prof, cluster, w, opts) if explain and w > 1 else None
            period = ex["period_s"] if ex else simulate.simulate(m, prof, cluster, w, opts).period_s
            out[(m, w)] = Prediction(m, w, w * local_batch / period, period, prof.compute_s, ex,
                                     simulate.upper_bound(m, opts))
            if w > 1:
                period = simulate.simulate(m, prof, slow, w, opts).period_s
                out[(m, w)].slower_comm_samples_per_sec, out[(m, w)].comm_uncertainty = w * local_batch / period, k
        rank([p for (m, x), p in out.items() if x == w])
    return out, prof, cluster


# The pick. The model's communication is a lower bound: what it leaves out (simulate's "Not
# modelled": compute slowed by concurrent communication, the CPU beside the messages, a plugin's
# machinery) makes communication cost more or hide less, never less. Its inputs are as uncertain:
# the study's own two sources for one all-reduce (BERT-Large's, on its 4-GPU node: 441 ms in its
# text, 277 ms by the alpha/beta table its MG-WFBP code used) are 1.6x apart. So the method picked
# is the one that loses least to the fastest, whether communication costs what the model says or
# COMM_UNCERTAINTY times that (its largest shortfall, `regret`), and where those differ it is the
# one that stays near the top, not the one a model error could sink: with the ends of the range
# only, not a sweep between them, so the pick costs one more simulation per prediction.
COMM_UNCERTAINTY = 2.0


def rank(preds: list) -> None:
    """Set each of one worker count's predictions' `regret`: the largest share by which it falls
    short of the fastest estimate (upper bounds excluded, unless there are only those), at the
    model's communication and at COMM_UNCERTAINTY x it."""
    pool = [p for p in preds if not p.upper_bound] or preds
    if not pool or any(p.slower_comm_samples_per_sec is None for p in preds):
        return
    tops = (max(p.samples_per_sec for p in pool), max(p.slower_comm_samples_per_sec for p in pool))
    for p in preds:
        p.regret = max(1 - p.samples_per_sec / tops[0], 1 - p.slower_comm_samples_per_sec / tops[1])


# Predictions this close to the fastest tie with it: they differ by what the model leaves out
# (a tail message's tens of microseconds in an iteration of hundreds of milliseconds), so the
# model does not rank them; nor could a run: the study's repeats of its compute-bound ResNet-50
# cells vary by 0.1-0.4% (std / mean).
TIE_REL = 0.001


def tied(values: dict) -> list:
    """The keys of {key: samples/s} whose value is within TIE_REL of the largest, largest first."""
    top = max(values.values())
    return sorted((k for k, v in values.items() if v >= top * (1 - TIE_REL)), key=lambda k: -values[k])


def fastest_tied(preds: dict, workers: int) -> list[str]:
    """The pick at `workers`, then the methods tied with it: the least `regret` (`rank`), among
    estimates (an upper bound only where every prediction is one: a bound says how fast a method
    could be, not that it is fastest), then the most samples/s; tied: the estimates whose regret
    is within TIE_REL of the pick's, so within TIE_REL of the fastest at both ends of the range
    where the pick's is 0. Without regrets (one worker), `tied` over samples/s."""
    here = {m: p for (m, w), p in preds.items() if w == workers}
    pool = {m: p for m, p in here.items() if not p.upper_bound} or here
    if any(p.regret is None for p in pool.values()):
        return tied({m: p.samples_per_sec for m, p in pool.items()})
    key = {m: (p.regret, -p.samples_per_sec) for m, p in pool.items()}
    best = min(pool, key=key.get)
    return sorted((m for m, p in pool.items() if p.regret <= pool[best].regret + TIE_REL), key=key.get)


def describe(explanation: dict) -> str:
    """'compute; bandwidth 9%': what dominates, then the largest other cost exposed (communication,
    or waiting for the slowest worker), as a share of the iteration."""
    shares, period = explanation["shares_s"], explanation["period_s"]
    comm = {k: v for k, v in shares.items() if k != "compute"}
    top = max(comm, key=comm.get)
    text = explanation["dominant"]
    if comm[top] > 0.005 * period and top != text:
        text += f"; {top} {comm[top] / period:.0%}"
    return text


def why_picked(preds: dict, workers: int) -> str | None:
    """Where the pick at `workers` is not the fastest estimate (nor tied with it): why, in a line."""
    ties = fastest_tied(preds, workers)
    here = {m: p for (m, w), p in preds.items() if w == workers and not p.upper_bound}
    top = max(here, key=lambda m: here[m].samples_per_sec, default=None)
    pick = here.get(ties[0])
    if pick is None or top in ties or pick.slower_comm_samples_per_sec is None:
        return None
    other = here[top]
    return (f"{pick.method} is picked over {top}: {pick.samples_per_sec:.1f} against {other.samples_per_sec:.1f} "
            f"samples/s, but {pick.slower_comm_samples_per_sec:.1f} against {other.slower_comm_samples_per_sec:.1f} "
            f"with communication {pick.comm_uncertainty:g}x the model's")


def render(preds: dict, model: str, local_batch: int, cluster: network.Cluster, prof: profile.Profile) -> str:
    from ddlbench.analysis.tables import markdown, method_key

    workers = sorted({w for _, w in preds})
    methods = sorted({m for m, _ in preds}, key=method_key)
    best = {w: fastest_tied(preds, w) for w in workers}
    rows = []
    for m in methods:
        row = [m]
        for w in workers:
            p = preds[(m, w)]
            dom = f" ({describe(p.explanation)})" if p.explanation else ""
            row.append(f"{p.samples_per_sec:.1f}{' ^' if p.upper_bound else ''}{dom}" + (" *" if m in best[w] else ""))
        rows.append(row)
    bounds = sorted({(m, p.upper_bound) for (m, _), p in preds.items() if p.upper_bound})
    head = (f"PREDICTED, not measured: {model}, local batch {local_batch}, network {cluster.name} "
            f"({cluster.description})\nsamples/s; * = the pick: the fastest estimate, or where communication costing "
            f"{COMM_UNCERTAINTY:g}x the model's would change that,\nthe method that loses least to the fastest either way "
            f"(several: tied within {TIE_REL:.1%} at both, which the model does not rank); in brackets what dominates the iteration "
            f"(compute, latency, bandwidth, server, cpu, scheduler, stragglers)\nand the largest other cost exposed "
            f"as a share of the iteration\nprofile: {prof.source}")
    notes = [f"\n{w} workers: {note}" for w in workers if (note := why_picked(preds, w))]
    foot = "".join(notes) + "".join(f"\n^ {m}: an upper bound, not an estimate (so never the pick over one): {why}"
                                    for m, why in bounds)
    return head + "\n" + markdown(["method"] + [f"{w} workers" for w in workers], rows) + foot


def main(argv=None) -> int:
    ap = ArgumentParser(prog="python -m ddlbench.predict", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--workers", default="4,8,16,32", help="comma list")
    ap.add_argument("--network", default="100gbib", help=f"a conf/network config: {', '.join(network.names())}")
    ap.add_argument("--methods", default="all", help="comma list, or all (the seven methods and ddp)")
    ap.add_argument("--local-batch", type=int, default=None, help="default: the model's (the study's)")
    ap.add_argument("--one-worker", type=float, default=None,
                    help="one-worker samples/s on the target device (default: the study's published one-GPU row)")
    ap.add_argument("--profile", default="study", choices=run_profile_names(),
                    help="run profile whose ByteScheduler-PS variant applies")
    ap.add_argument("--profile-from", default="derived", choices=PROFILE_SOURCES,
                    help="derived: roofline scaled to a one-worker throughput; measured: one worker's hooks here (cached)")
    ap.add_argument("--device", default=None, help="with --profile-from measured, the device it is taken on: auto (the "
                    "default: cuda where a GPU is visible, else cpu), cpu, cuda, cuda:N")
    ap.add_argument("--intra", default=None, help="take the nodes (GPUs per node, their link) from this node config "
                    "instead (e.g. pcie3x16-mgwfbp-table, the study's alternative calibration; pcie3x16 for a "
                    "network make commbench measured one rank per node)")
    ap.add_argument("--stack", default="study", choices=simulate.STACKS,
                    help="study: BytePS/Horovod as the study ran them; ddlbench: this project's runtime")
    ap.add_argument("--algorithm", default=None, choices=network.ALGORITHMS,
                    help="all-reduce algorithm (default: nccl-2.4 with --stack study, the study's NCCL 2.4.8; "
                         "nccl else; ring is what Gloo runs)")
    ap.add_argument("--bytescheduler-unit-ms", type=float, default=0.0,
                    help="with --stack ddlbench: ByteScheduler's own machinery per unit, from a one-worker run of "
                         "the method (benchmarks/predict_validation.py prints it; 0: not modelled)")
    ap.add_argument("--ps-topology", default=None, choices=simulate.PS_TOPOLOGIES,
                    help="PS methods: per-machine (BytePS, the study; the default) or per-gpu (every worker pushes, "
                         "no node stage: this runtime's method.ps_topology=per-gpu; with --stack ddlbench)")
    ap.add_argument("--results", default="results", help=f"appends to RESULTS/{DEFAULT_FILE}")
    ap.add_argument("--no-record", action="store_true", help="print only")
    try:
        a = ap.parse_args(argv)
        workers = parse_workers(str(a.workers))
        if a.local_batch is not None and a.local_batch < 1:
            raise ValueError(f"{knob('--local-batch', a.local_batch)} is invalid; accepted: an integer >= 1 "
                             f"(default: the model's)")
        check_model(a.model)
        if a.device is not None:
            check_device(a.device)
            if a.profile_from != "measured":  # the derived profile is the same on every device: say so
                raise ValueError(f"{knob('--device', a.device)} applies to a measured profile only; accepted: DEVICE "
                                 f"with PROFILE_FROM=measured (--profile-from measured), or no DEVICE with the derived "
                                 f"profile, which is scaled to ONE_WORKER (or the study's one-GPU row) whatever the device")
        methods = simulate.METHODS if a.methods == "all" else tuple(a.methods.split(","))
        for m in methods:
            simulate.method_config(m)
        if not a.bytescheduler_unit_ms >= 0 or (a.bytescheduler_unit_ms and a.stack != "ddlbench"):
            raise ValueError(f"--bytescheduler-unit-ms={a.bytescheduler_unit_ms!r} with --stack {a.stack} is invalid; "
                             f"accepted: >= 0, and 0 but with --stack ddlbench (this runtime's machinery)")
        opts = replace(study_opts(a.profile, a.stack, a.algorithm, ps_topology=a.ps_topology),
                       bytescheduler_unit_s=a.bytescheduler_unit_ms / 1e3)
        net = network.with_intra(network.load(a.network), a.intra) if a.intra else a.network
        batch = a.local_batch or model_batch(a.model)
        results = None if a.no_record else check_results(a.results)  # before a minute of measuring, not after
        device = measure_device(a.device or "auto") if a.profile_from == "measured" else "cpu"
        prof = load_profile(a.model, batch, a.one_worker, a.profile_from, device)
        preds, prof, cluster = predict(a.model, workers, net, methods, batch, a.one_worker, opts, prof=prof)
    except (ValueError, hostcpu.MachineBusy) as exc:
        print(f"predict: error: {exc}", file=sys.stderr)
        return 2
    print(render(preds, a.model, prof.local_batch, cluster, prof))
    if results is not None:
        from ddlbench.record import append

        try:
            append(results, *[p.record(a.model, prof.local_batch, cluster, prof, opts) for p in preds.values()])
        except OSError as exc:  # checked before, so only what changed since: the table above keeps them
            print(f"predict: error: the predictions could not be appended to {results} ({exc}); accepted: "
                  f"{knob('--results', a.results)} a writable directory", file=sys.stderr)
            return 1
        print(f"\n{len(preds)} predictions appended to {results} (kind: predicted)")
    return 0
