"""`METHOD=auto`: the method predicted fastest for a run's configuration, resolved before it runs.

    python -m ddlbench.predict.auto --model tiny-resnet --workers 2 --profile local [--cluster local]
        [--link 1gbit] [--network NAME] [--profile-from measured|derived] [--device cpu]

prints on stderr the choice (`cli.fastest_tied`) and why (every method's predicted samples/s, what dominates), and
on stdout the Hydra overrides for the run: `method=<name>`, then `prediction={...}` last, which the
run record keeps as `prediction: {method, samples_per_sec, network, dominant}` beside the
measurement. `--ps-topology per-gpu` (PS_TOPOLOGY) predicts the PS methods with every worker
pushing, and adds `method.ps_topology=per-gpu` between the two when a PS method wins.

Which network (`network_for`): NETWORK=... if given; CLUSTER=emulated: `emulated-<LINK>`;
CLUSTER=slurm: `slurm-<PARTITION>`, written by `make commbench CLUSTER=slurm PARTITION=...`
(one rank per node; with GPUS_PER_NODE > 1, INTRA=<node config> names the link inside a node);
CLUSTER=local: `local-<hostname>` written by `make commbench` if present, else `loopback`
(conf/network/loopback.yaml, this project's own commbench fit on its development host; see its
sources), with every worker on this one machine (`network.on_one_machine`: one node, so
per-machine PS runs one server, as the local launchers do); on CLUSTER=emulated with
GPUS_PER_NODE workers per host, those talking over the host's loopback
(`network.emulated_hosts`). Which profile: for CLUSTER=local and emulated the one measured here by one worker at
the threads each worker of the run will have, beside the run's other workers each running the
same step on this machine's cores (profile.measured, sharers; cached); elsewhere the roofline
scaled to the study's one-GPU row. Runs here are this project's runtime, so the stack is "ddlbench".
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ddlbench.config import default_backend, default_device, threads_for

from . import cli, network, simulate

CLUSTERS = ("local", "emulated", "slurm")
# the make variable that sets each option (make reproduce METHOD=auto's auto_args), named in errors
MAKE_VARS = {"--model": "MODEL", "--workers": "WORKERS", "--profile": "PROFILE", "--cluster": "CLUSTER", "--link": "LINK",
             "--partition": "PARTITION", "--network": "NETWORK", "--profile-from": "PROFILE_FROM",
             "--one-worker": "ONE_WORKER", "--workers-per-node": "GPUS_PER_NODE", "--intra-link": "INTRA_LINK",
             "--intra": "INTRA", "--ps-topology": "PS_TOPOLOGY"}


def network_for(cluster: str, link: str | None = None, override: str | None = None,
                directory: Path | None = None, partition: str | None = None) -> str:
    if override:
        return override
    def written(name: str) -> bool:  # by make commbench
        return ((directory or network.conf_dir()) / f"{name}.yaml").exists()

    if cluster == "slurm" and partition:
        name = f"slurm-{partition}"
        if written(name):
            return name
        raise ValueError(f"CLUSTER=slurm PARTITION={partition} has no network config {name} yet; accepted: "
                         f"`make commbench CLUSTER=slurm PARTITION={partition}` first, or NETWORK=<a conf/network config>")
    if cluster == "emulated":
        if not link:
            raise ValueError("CLUSTER=emulated needs LINK (e.g. 1gbit, 10gbit); accepted: a conf/network/emulated-<LINK>")
        return f"emulated-{link}"
    if cluster == "local":
        return network.this_machine(directory or network.conf_dir())
    raise ValueError(f"CLUSTER={cluster!r} has no default network; accepted: NETWORK=<a conf/network config>")


def launcher_workers_per_node(cluster: str) -> int | None:
    """The launcher's own workers per node, as a run composes it (conf/launcher/<cluster>.yaml,
    and conf/local/default.yaml over it; None: all on this machine)."""
    from ddlbench.config import _compose

    return _compose([f"launcher={cluster}"]).launcher.get("workers_per_node")


def placed(cluster: str, net: network.Cluster, workers: int, workers_per_node: int | None = None,
           intra_link: str | None = None, intra: str | None = None) -> network.Cluster:
    """`net` as a run on `cluster` places its workers: `workers_per_node` a node (GPUS_PER_NODE;
    by default the launcher's own: all on this machine locally, one per emulated host, 4 per
    Slurm node). Locally every node is a layout on this machine (`network.on_one_machine`); an
    emulated host's workers talk over its loopback (`network.emulated_hosts`, INTRA_LINK); a
    Slurm node's over `intra`'s node config, or the network's own (`slurm_nodes`)."""
    per_node = min(workers, workers_per_node or launcher_workers_per_node(cluster) or workers)
    if cluster == "local":
        return network.on_one_machine(net, per_node)
    if cluster == "emulated":
        return network.emulated_hosts(net, per_node, intra_link)
    return slurm_nodes(net, per_node, intra)


def slurm_nodes(cluster: network.Cluster, workers_per_node: int, intra: str | None) -> network.Cluster:
    """A Slurm run's nodes of `workers_per_node` workers, joined by the link of `intra`'s node
    config (INTRA: its `intra`, else its `inter`, e.g. loopback for CPU nodes), else by the
    network's own intra-node link. make commbench CLUSTER=slurm measures one rank per node, so
    its network knows no link inside a node: a clear error, not a guess."""
    if intra:
        node = network.load(intra)
        link, name, source = node.intra or node.inter, f"{cluster.name}+{intra}", f"INTRA={intra}'s link inside a node"
    elif workers_per_node == 1 or cluster.intra is not None:
        link, name, source = cluster.intra, cluster.name, "the network's own link inside a node"
    else:
        nodes = ", ".join(n for n in network.names() if network.load(n).inter is None)  # one node each
        raise ValueError(f"GPUS_PER_NODE={workers_per_node} on network {cluster.name!r}, which knows no link inside "
                         f"a node; accepted: INTRA=<a node config: {nodes}, or loopback for CPU nodes>, or "
                         f"GPUS_PER_NODE=1")
    return replace(network.with_nodes(cluster, workers_per_node, link, f"{workers_per_node} workers a Slurm node; "
                                      f"{source}"), name=name)


def run_local_batch(model: str, run_profile: str) -> int:
    """The local batch a run would use: the run profile's override, else the model's."""
    batch = cli.run_profile_settings(run_profile).get("local_batch")
    return int(batch) if batch else cli.model_batch(model)


def resolve(model: str, workers: int, local_batch: int, net: "str | network.Cluster", profile_from: str,
            device: str = "cpu", run_profile: str = "local", stack: str = "ddlbench", methods=simulate.METHODS, prof=None,
            threads: int | None = None, sharers: int = 1, one_worker: float | None = None,
            ps_topology: str | None = None) -> dict:
    """{method, samples_per_sec, network, dominant, predicted, overrides, tied}: the method picked
    (`cli.fastest_tied`: the fastest estimate, unless communication costing cli.COMM_UNCERTAINTY x
    the model's would make it lose more than another; `tied`: those the model does not rank apart
    from it), every method's prediction (a measured CPU profile at `threads`, each worker's share,
    beside `sharers - 1` other workers on this machine's cores, and there ByteScheduler's
    machinery measured beside them too, `profile.machinery_s`, and an eager all-reduce's launch,
    `profile.measure_launch`; PS methods in `ps_topology`, by default their configs'), and the
    overrides that run the winner as it was predicted."""
    opts = cli.study_opts(run_profile, stack=stack, backend=default_backend(device), ps_topology=ps_topology)
    prof = prof or cli.load_profile(model, local_batch, one_worker, profile_from, device, threads, sharers)
    cfgs = [simulate.method_config(m, opts.bytescheduler_ps) for m in methods]
    if sharers > 1 and stack == "ddlbench" and any(simulate.runs_bytescheduler_queue(c) for c in cfgs):
        # ByteScheduler's machinery beside the other workers takes their cores: measured so too
        from . import profile

        opts = replace(opts, bytescheduler_cpu_s=profile.machinery_s(model, local_batch, threads, sharers)["machinery_s"])
    if sharers > 1 and stack == "ddlbench" and device == "cpu" and any(
            c["schedule"] in ("wfbp", "mgwfbp") and c["architecture"] == "a2a" for c in cfgs):
        # where the workers hold every core, an eager all-reduce's launch is CPU the iteration needs
        from . import profile

        opts = replace(opts, launch_s=profile.measure_launch(model, local_batch, threads,
                                                             cache_dir=profile.CACHE_DIR)[0])
    preds, prof, cluster = cli.predict(model, [workers], net, methods, local_batch, None, opts, explain=workers > 1,
                                       prof=prof)
    ties = cli.fastest_tied(preds, workers)
    best = ties[0]
    p = preds[(best, workers)]
    overrides = [f"method={best}"]
    if ps_topology and simulate.method_config(best)["architecture"] == "ps":
        overrides.append(f"method.ps_topology={ps_topology}")
    return {"method": best, "overrides": overrides, "samples_per_sec": round(p.samples_per_sec, 3), "network": cluster.name,
            "dominant": p.explanation["dominant"] if p.explanation else "compute",
            "profile_source": prof.source, "tied": ties[1:], "why": cli.why_picked(preds, workers),
            "predicted": {m: round(q.samples_per_sec, 3) for (m, _), q in preds.items()}}


def hydra_prediction(choice: dict) -> str:
    """The record's `prediction` as one Hydra override (no spaces: one shell word)."""
    tied = ",".join(f"'{m}'" for m in choice.get("tied", ()))
    return ("prediction={method:'%s',samples_per_sec:%r,network:'%s',dominant:'%s',tied:[%s]}"
            % (choice["method"], choice["samples_per_sec"], choice["network"], choice["dominant"], tied))


def main(argv=None) -> int:
    ap = cli.ArgumentParser(prog="python -m ddlbench.predict.auto", description=__doc__.split("\n\n")[0],
                            make_vars=MAKE_VARS)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--profile", default="local", choices=cli.run_profile_names(),
                    help="the run profile (its local batch and ByteScheduler-PS variant)")
    ap.add_argument("--local-batch", type=int, default=None)
    ap.add_argument("--cluster", default="local", choices=CLUSTERS)
    ap.add_argument("--link", default=None)
    ap.add_argument("--partition", default=None, help="CLUSTER=slurm: its network is slurm-<partition> (make commbench)")
    ap.add_argument("--network", default=None, help="overrides the cluster's network")
    ap.add_argument("--profile-from", default=None, choices=cli.PROFILE_SOURCES,
                    help="default: measured for local and emulated clusters, derived elsewhere")
    ap.add_argument("--device", default=None, help="the run's device: cpu, cuda, cuda:N, or auto (the default: the "
                    "cluster's, as device=auto)")
    ap.add_argument("--one-worker", type=float, default=None,
                    help="one-worker samples/s on the run's device (ONE_WORKER): scales the derived profile "
                         "(default: the study's one-GPU row), or rescales a measured one")
    ap.add_argument("--workers-per-node", type=int, default=None,
                    help="workers per node or emulated host (GPUS_PER_NODE; default: the launcher's own, all on "
                         "this machine locally, 1 per emulated host, 4 per Slurm node)")
    ap.add_argument("--intra-link", default=None, help="CLUSTER=emulated: the hosts' loopback rate (INTRA_LINK)")
    ap.add_argument("--intra", default=None,
                    help="CLUSTER=slurm: the node config (conf/network, e.g. pcie3x16) whose link joins a node's GPUs")
    ap.add_argument("--ps-topology", default=None, choices=simulate.PS_TOPOLOGIES,
                    help="PS methods: per-machine (their configs' default) or per-gpu (every worker pushes); "
                         "the run of a PS winner gets method.ps_topology")
    try:
        a = ap.parse_args(argv)
        # the knobs a user sets, each checked before a profile is measured (or threads_for divides by them)
        for option, value in (("--workers", a.workers), ("--local-batch", a.local_batch),
                              ("--workers-per-node", a.workers_per_node)):
            if value is not None and value < 1:
                raise ValueError(f"{cli.knob(option, value, MAKE_VARS)} is invalid; accepted: an integer >= 1")
        cli.check_model(a.model)
        if a.device is not None:
            cli.check_device(a.device)
        net = network_for(a.cluster, a.link, a.network, partition=a.partition)
        source = a.profile_from or ("derived" if a.cluster == "slurm" else "measured")
        batch = a.local_batch or run_local_batch(a.model, a.profile)
        # workers here share this machine's cores (launch.run_env: cores // processes each, and
        # the emulated hosts are namespaces of this machine): the profile is measured beside the
        # other workers; the PS methods' servers take a share too, not counted: one profile serves
        # every method
        here = a.cluster in ("local", "emulated")
        threads = threads_for(a.workers) if here else None
        # device=auto: the launcher a cluster uses has its name
        device = a.device if a.device not in (None, "auto") else default_device(a.cluster)
        sharers = a.workers if here and device == "cpu" and source == "measured" else 1
        net = placed(a.cluster, network.load(net), a.workers, a.workers_per_node, a.intra_link, a.intra)
        choice = resolve(a.model, a.workers, batch, net, source, device, a.profile,
                         stack="study" if a.cluster == "slurm" and a.profile == "study" else "ddlbench", threads=threads,
                         sharers=sharers, one_worker=a.one_worker, ps_topology=a.ps_topology)
    except (ValueError, RuntimeError) as exc:  # RuntimeError: the profile's neighbour workers failed
        print(f"auto: error: {exc}", file=sys.stderr)
        return 2
    ranked = sorted(choice["predicted"].items(), key=lambda kv: -kv[1])
    print(f"METHOD=auto: {choice['method']} is picked for {a.model} x{a.workers} (local batch {batch}) on "
          f"network {choice['network']} ({choice['dominant']} dominates); profile: {choice['profile_source']}.\n"
          + (f"  {choice['why']}\n" if choice.get("why") else "")
          + (f"  tied with it (within {cli.TIE_REL:.1%} at the model's communication and at {cli.COMM_UNCERTAINTY:g}x "
             f"it, not ranked by the model): {', '.join(choice['tied'])}\n"
             if choice.get("tied") else "") +
          f"  predicted samples/s: " + ", ".join(f"{m} {v:.1f}" for m, v in ranked), file=sys.stderr)
    print(" ".join(choice["overrides"] + [hydra_prediction(choice)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
