"""Emulated cluster launcher: the multi-node launch of a real cluster, on hosts that are network
namespaces of this machine (launch/netns.py), joined by links shaped to `launcher.link`.

The launch is Slurm's, node for node: the same placement (`slurm.plan`: workers fill worker
hosts `workers_per_node` at a time, PS servers get hosts of their own, `servers_per_node` each),
and on every host the same node launch (`slurm.start_node`: one torchrun with
`--nnodes/--node-rank/--master-addr` at the first host's address, under the local watchdog).
Where Slurm's srun starts `node_main` on each node, this launcher starts `python -m
ddlbench.launch.emulated` inside each host's namespaces (nsenter), with Gloo and the PS wire on
the host's interface. Only the wire's speed is emulated; no latency is added (no netem here).

How the ranks start (`launcher.via`): `torchrun` as above; `horovodrun` (the default with
engine=horovod) or `mpirun` (MPICH Hydra, or Open MPI) run on host 0, as a user would run them
on a cluster's first node, and reach the other hosts over ssh: one sshd per host for the launch
(launch/sshd.py: a job-local host key and client key, bound to the host's address), hosts and
slots from the same plan (`-H`/`-hosts host0:n0,host1:n1,...`), the hosts' interface `eth0`.

Before the ranks start, every link in use is measured host to host and must come within 5% of
the set rate, or the run is recorded as failed without starting. The record gets `network`
(`netns.Cluster.describe`, and `dropped_packets`: what the links dropped during the run) and each
rank's host name.

The cluster is the run's own (brought up for it, removed on every path: success, failure,
Ctrl-C, SIGTERM), unless an interactive one (`make cluster-up`) with enough hosts and the same
links is up, which is then used and left up.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import netns

POLL_S = 0.2
VIA = ("auto", "torchrun", "horovodrun", "mpirun")


def via(cfg) -> str:
    """How the ranks start: launcher.via; `auto` is horovodrun for engine=horovod (as on one
    host), else torchrun."""
    v = cfg.launcher.get("via", "auto")
    if v == "auto":
        return "horovodrun" if cfg.engine.name == "horovod" else "torchrun"
    return v


def hosts_needed(cfg) -> int:
    from .slurm import nodes_needed

    return nodes_needed(cfg)


def check(cfg) -> None:
    """Settings, checked before anything is created (config.resolve calls it); ConfigError with
    one line. Root (or the tools) missing is said here too, so nothing starts."""
    from ddlbench.config import ConfigError, _int, local_capacity

    L = cfg.launcher
    for key in ("nodes", "workers_per_node", "servers_per_node"):
        _int(cfg, f"launcher.{key}", 1)
    try:
        netns.check_nodes(L.nodes)
        netns.check_rate(L.link, "launcher.link")
        if L.intra_link is not None:
            netns.check_rate(L.intra_link, "launcher.intra_link")
    except netns.BadSetting as exc:
        raise ConfigError(str(exc)) from None
    from .slurm import worker_nodes

    if worker_nodes(cfg) > L.nodes:
        raise ConfigError(f"workers={cfg.workers} at launcher.workers_per_node={L.workers_per_node} need {worker_nodes(cfg)} "
                          f"worker hosts, but launcher.nodes={L.nodes}; accepted: workers <= "
                          f"{L.nodes * int(L.workers_per_node)} (or more nodes)")
    capacity, why = local_capacity(cfg)
    if cfg.device == "cuda":  # the hosts share this machine's GPUs, each worker host a slice of its own
        if cfg.workers > capacity:
            raise ConfigError(f"workers={cfg.workers} on the emulated cluster is more than this machine's GPUs "
                              f"carry ({capacity}: {why}); accepted: workers <= {capacity}")
    need = hosts_needed(cfg)
    if need > netns.MAX_HOSTS:
        raise ConfigError(f"workers={cfg.workers} + servers={cfg.servers} need {need} emulated hosts; accepted: at most "
                          f"{netns.MAX_HOSTS}")
    if cfg.device == "cpu" and cfg.workers + cfg.servers > capacity:
        raise ConfigError(f"workers={cfg.workers} + servers={cfg.servers} is more processes than this machine's CPUs "
                          f"carry ({capacity}: launcher.max_workers_per_cpu x cores); accepted: workers + servers <= {capacity}")
    _check_via(cfg)
    reason = netns.unavailable()
    if reason:
        raise ConfigError(f"launcher=emulated: {reason}")


def _check_via(cfg) -> None:
    """launcher.via against the engine and what is installed; `auto` resolved in place, so the
    record says which it was."""
    from ddlbench.config import ConfigError

    v = cfg.launcher.get("via", "auto")
    if v not in VIA:
        raise ConfigError(f"launcher.via={v!r} is invalid; accepted: {', '.join(VIA)}")
    how = cfg.launcher.via = via(cfg)
    if how == "torchrun" and cfg.engine.name == "horovod":
        raise ConfigError("launcher.via=torchrun with engine=horovod: Horovod's ranks are started by horovodrun or "
                          "mpirun; accepted: launcher.via=horovodrun, mpirun or auto")
    if how == "horovodrun" and cfg.engine.name != "horovod":
        raise ConfigError(f"launcher.via=horovodrun starts Horovod jobs; accepted with engine=horovod only "
                          f"(engine={cfg.engine.name})")
    if how == "torchrun":
        return
    if how == "mpirun":
        from .mpirun import executable

        executable(cfg)  # an MPI is installed
    from . import sshd

    reason = sshd.unavailable()
    if reason:
        raise ConfigError(f"launcher=emulated with launcher.via={how}: {reason}")


def run(cfg, rec: dict, run_dir: Path, results: Path) -> None:
    """Bring up (or reuse) the hosts, measure the links, launch and record. Called inside
    `local.terminations()`, so SIGTERM and SIGHUP arrive as exceptions and the cluster's
    `finally` removes it."""
    from ddlbench import record

    from . import finish, launch_and_record, run_env

    n = hosts_needed(cfg)
    L = cfg.launcher
    with run_cluster(n, str(L.link), None if L.intra_link is None else str(L.intra_link)) as c:
        used = netns.Cluster(c.hosts[:n], c.link, c.intra_link)
        links = used.measure()
        rec["network"] = used.describe(links)
        for l in links:
            print(f"[ddlbench] emulated link {l.src} -> {l.dst}: {l.gbps:.3f} Gbit/s (set {c.link})", flush=True)
        try:
            used.check(links)
        except netns.LinkTooSlow as exc:
            print(f"ddlbench: error: {exc}", file=sys.stderr, flush=True)
            finish(cfg, rec, run_dir, 1, f"refused to start: {exc}", results)
            return
        env = run_env(cfg, local_procs=cfg.workers + cfg.servers)  # every host shares this machine's cores
        rec["env"] = record.env_knobs({**env, **used.hosts[0].env()})
        launch = start if via(cfg) == "torchrun" else start_over_ssh
        before = used.dropped_packets()

        def go(k, d):
            try:
                return launch(cfg, used, d, env)
            finally:  # the record says whether a queue overflowed: TCP's stalls would be in the numbers
                after = used.dropped_packets()
                rec["network"]["dropped_packets"] = None if None in (before, after) else after - before
                if rec["network"]["dropped_packets"]:
                    print(f"[ddlbench] warning: the emulated links dropped {after - before} packets during the run "
                          f"(a queue overflowed; TCP's retransmission stalls are in the measurement)", flush=True)
        launch_and_record(cfg, rec, run_dir, results, go)


class run_cluster:
    """The interactive cluster if one is up and fits (left up after), else the run's own."""

    def __init__(self, n: int, link: str, intra_link: str | None):
        self.args = (n, link, intra_link)
        self._own = None

    def __enter__(self) -> netns.Cluster:
        n, link, intra_link = self.args
        up = netns.current()
        if up is not None and up.owner_pid is None:  # make cluster-up's
            if len(up.hosts) >= n and up.link == link and up.intra_link == intra_link:
                return up
            raise netns.NetnsError(
                f"an interactive emulated cluster is up ({len(up.hosts)} hosts, link={up.link}, intra_link={up.intra_link}) "
                f"and this run needs {n} hosts at link={link}, intra_link={intra_link}; accepted: matching settings, "
                f"or `make cluster-down` first")
        self._own = netns.cluster(n, link, intra_link)
        return self._own.__enter__()

    def __exit__(self, *exc):
        return self._own.__exit__(*exc) if self._own is not None else False


def node_argv(host: netns.Host, launch_dir: Path, node: int, first: str, port: int) -> list[str]:
    """Host `node`'s share of the launch, run inside its namespaces (srun's place on Slurm)."""
    return [*host.exec_prefix(), sys.executable, "-m", "ddlbench.launch.emulated", str(launch_dir), str(node),
            first, str(port)]


def node_env(cfg, host: netns.Host, node: int, env: dict, gpus: int | None = None) -> dict:
    """Host `node`'s environment. With GPUs, which this machine's hosts share: worker host i sees
    the visible GPUs i*per .. i*per+per-1 (of the user's CUDA_VISIBLE_DEVICES if set, else of the
    `gpus` this machine has; wrapping around only when launcher.share_gpu lets workers share),
    and a PS server host none (servers sum on the CPU)."""
    from .slurm import worker_nodes

    env = {**env, **host.env()}
    if cfg.device != "cuda":
        return env
    if node >= worker_nodes(cfg):
        env["CUDA_VISIBLE_DEVICES"] = ""
        return env
    env["CUDA_VISIBLE_DEVICES"] = gpu_slice(env, node, int(cfg.launcher.workers_per_node), gpus)
    return env


def gpu_slice(env: dict, node: int, per: int, gpus: int | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for host `node` of this machine taking `per` GPUs: visible GPUs
    node*per .. node*per+per-1, wrapping around, of the user's CUDA_VISIBLE_DEVICES in `env` if
    set, else of the `gpus` this machine has (torch's count by default)."""
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible:
        if gpus is None:
            import torch

            gpus = torch.cuda.device_count()
        visible = [str(i) for i in range(gpus)]
    return ",".join(visible[(node * per + g) % len(visible)] for g in range(per))


def start(cfg, c: netns.Cluster, launch_dir: Path, env: dict) -> tuple[int, str | None]:
    """One launch: every host's node process at once, rendezvous at host 0; wait for all. A
    host that fails lets the others' watchdogs see its rank's error (they stop their ranks
    within the grace); whatever ends this wait (Ctrl-C, SIGTERM, an error) stops every host."""
    from . import local

    port = random.randrange(20000, 60000)  # host 0's namespace has its own port space; a fresh port per launch
    first = c.hosts[0].address
    procs = [subprocess.Popen(node_argv(h, launch_dir, i, first, port), env=node_env(cfg, h, i, env),
                              start_new_session=True) for i, h in enumerate(c.hosts)]
    failed_at = None
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(POLL_S)
            if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > 3 * local.GRACE_S:
                break  # the others' watchdogs had their time: stop them below
    finally:
        with local.deferred_signals():
            _stop(procs)
    rcs = [p.returncode for p in procs]
    rc = next((r for r in rcs if r != 0), 0)
    return rc, None if rc == 0 else local.failure_reason(launch_dir, cfg.workers, rc, cfg.servers)


def start_over_ssh(cfg, c: netns.Cluster, launch_dir: Path, env: dict) -> tuple[int, str | None]:
    """One launch by horovodrun or mpiexec on host 0, which starts host 0's ranks itself and
    the other hosts' over ssh, under the local launcher's watchdog. Whatever ends it, no rank
    on any host outlives it (the hosts share this kernel's pids: `pids.on_hosts`) and the ssh
    servers stop."""
    from . import local, sshd

    first = c.hosts[0]
    with sshd.daemons(c.hosts) as ssh:
        env = ssh.env({**env, **first.env()})
        cmd = ssh_launch_command(cfg, c.hosts, launch_dir, env, str(ssh.exe))
        try:
            return local.start(cfg, launch_dir, env, [*first.exec_prefix(), *cmd])
        finally:
            with local.deferred_signals():
                stop_ranks(launch_dir, [h.hostname for h in c.hosts])


def ssh_launch_command(cfg, hosts: list[netns.Host], launch_dir: Path, env: dict, ssh: str) -> list[str]:
    """horovodrun's or mpiexec's line on host 0 for `hosts`, the plan's slots on each. On one
    host horovodrun gets none: with every host local it insists on the loopback interface
    ("No interface is found for address 127.0.0.1" for eth0), as with launcher=horovodrun here."""
    from . import horovodrun, mpirun, worker_command
    from .slurm import host_slots, plan

    slots = host_slots([h.hostname for h in hosts], plan(cfg))
    if via(cfg) == "mpirun":
        return mpirun.command(cfg, launch_dir, env, hosts=slots, ssh=ssh)
    multi = len(hosts) > 1  # --disable-cache: horovodrun would keep its ssh check under ~/.horovod
    return horovodrun.argv(cfg.workers + cfg.servers, slots if multi else None, netns.IFNAME if multi else None,
                           cfg.comm_timeout_s) + ["--disable-cache", *cfg.launcher.get("extra_args", [])] + \
        worker_command(launch_dir)


def stop_ranks(launch_dir: Path, hostnames: list[str]) -> None:
    """SIGTERM, then SIGKILL, every rank of these hosts still running (by its pid file)."""
    from . import local, pids

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for e in pids.on_hosts(launch_dir, hostnames):
            pids.send(e, sig)
        deadline = time.monotonic() + local.GRACE_S
        while pids.on_hosts(launch_dir, hostnames):
            if time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
        else:
            return


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each node process still running (its own handler stops its ranks), then SIGKILL."""
    from .local import GRACE_S

    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in procs if p.poll() is None]
        for p in live:
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2 * GRACE_S
        for p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


def node_main(launch_dir: str, node: int, first: str, port: int) -> int:
    """On one emulated host: its ranks, as on a Slurm node (`slurm.start_node`), under the same
    watchdog; SIGTERM (from the launcher) stops them as Ctrl-C does."""
    from omegaconf import OmegaConf

    from . import local
    from .slurm import start_node

    launch_dir = Path(launch_dir)
    cfg = OmegaConf.load(launch_dir / "config.yaml")
    try:
        with local.terminations():
            rc, _ = start_node(cfg, launch_dir, node, first, port, dict(os.environ))
    except KeyboardInterrupt as exc:
        return 128 + getattr(exc, "signum", signal.SIGINT)
    return rc


if __name__ == "__main__":
    sys.exit(node_main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
