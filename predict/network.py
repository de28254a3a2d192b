"""Networks as alpha-beta links, and the cost of each collective over a cluster of nodes.

A link moves a message of n bytes in  t(n) = alpha_s + beta_s_per_byte * n  (Hockney's model).
Two measured points (n1, t1), (n2, t2) fix it exactly:
    beta = (t2 - t1) / (n2 - n1),   alpha = t1 - beta * n1
The study gives its points as effective throughput (Shi et al., IEEE Network 2020, "Communication
Performance"): a message of n bytes at R Gb/s takes t = 8 n / (R * 1e9) s. It writes "16KB" and
"1MB"; its other figure for the same IB network ("a 16KiB message takes 7.85us") shows that KB
means KiB: 16,384 bytes at 16.7 Gb/s is 7.85 us. So n1 = 16,384 and n2 = 1,048,576.

A cluster is W workers on m = ceil(W / g) nodes of g GPUs: an intra-node link (PCIe) between the
GPUs of a node and an inter-node link (the network) between nodes; PS servers sit on machines
of their own with the inter-node link (as in the study: one server per worker machine).

Collectives (n bytes, W ranks); the step time of a pipelined algorithm is set by its slowest
link, `max(alpha + chunk * beta)` over the link kinds the algorithm crosses:
- ring all-reduce: 2 (W - 1) steps of n / W bytes (reduce-scatter, then all-gather); the ring
  threads every node's GPUs over PCIe and the nodes over the network:
      t = 2 (W - 1) * max_link(alpha + n / W * beta)
- tree all-reduce (NCCL 2.4's double binary tree between nodes, a chain inside each): latency
  2 (ceil(log2 m) alpha_inter + (g - 1) alpha_intra); bandwidth: each node sends and receives
  n per phase, so 2 n beta of the slowest link (no (W-1)/W saving). On one node it is the
  chain alone, never faster than the ring, so NCCL's choice is then always the ring.
- hierarchical all-reduce (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE): reduce inside each node,
  ring all-reduce among the m node leaders, broadcast inside each node.
- NCCL (`nccl`): the faster of ring and tree, as NCCL >= 2.5 chooses by a cost model of this kind.
- NCCL 2.4 (`nccl-2.4`, the study's NCCL 2.4.8): the tree for messages up to a size threshold,
  the ring above it. NCCL 2.4 computed the threshold once per communicator from constants of
  its own (NVIDIA/nccl 2.4, src/init.cc, ncclTreeThreshold), not from the network:
      ring latency  6 us * (W - 1)
      tree latency  15 us * floor(log2 m) + 4 us * (W / m - 1)
      bandwidths    ring 5000 B/us; tree 2/3 of it (GPUs without NVLink, as in the study)
      threshold     ring_bw * tree_bw / (ring_bw - tree_bw) * (ring latency - tree latency),
                    0 (never the tree) on one node or where the ring's latency is no larger.
  E.g. 32 GPUs on 8 PCIe nodes: (186 - 57) us * 10,000 B/us = 1.29 MB. Only the choice comes from
  NCCL's constants; each algorithm's time is still this model's.
- inside a node for a PS partition (BytePS: ncclReduceScatter before the push, ncclAllGather
  after the pull, each GPU copying its slice to or from the host): (g - 1) steps of n / g bytes
  each way, plus the copy of n / g bytes.
"""
from __future__ import annotations

import bisect
import functools
import math
import socket
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ALGORITHMS = ("nccl", "nccl-2.4", "ring", "tree", "hierarchical")
UNMATCHED_ROUND = 1.1  # `_lane_speeds`: a round the fit's all-reduces, fully overlapped, overrun by more is a warning
GLOO_THREADS = 2  # ProcessGroupGloo's worker threads (its Options' default, `_threads`): async
                  # collectives run on the next free one, so two at once


def seconds_at(nbytes: int, gbps: float) -> float:
    """Time of an n-byte message at an effective throughput of `gbps` Gb/s (1e9 bits/s)."""
    if gbps <= 0:
        raise ValueError(f"throughput {gbps!r} Gb/s is invalid; accepted: > 0")
    return 8 * nbytes / (gbps * 1e9)


@dataclass(frozen=True)
class Link:
    """t(n) = alpha_s + beta_s_per_byte * n; `burst_bytes`: the depth of a token bucket in front
    of it (tc tbf, the emulated cluster's shaping): after the link idled, that many bytes pass
    without waiting for the rate (simulate.Bucket); 0 for a real link."""

    alpha_s: float
    beta_s_per_byte: float
    burst_bytes: float = 0.0

    def time_s(self, nbytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * nbytes

    @classmethod
    def from_points(cls, small: tuple[int, float], large: tuple[int, float]) -> "Link":
        """Exact alpha, beta through two (bytes, effective Gb/s) points."""
        (n1, r1), (n2, r2) = small, large
        if n2 <= n1:
            raise ValueError(f"points ({n1} B, {n2} B) are invalid; accepted: the second message larger than the first")
        t1, t2 = seconds_at(n1, r1), seconds_at(n2, r2)
        beta = (t2 - t1) / (n2 - n1)
        alpha = t1 - beta * n1
        if beta <= 0 or alpha < 0:
            raise ValueError(f"points {small}, {large} give alpha={alpha:.3g} s, beta={beta:.3g} s/B; "
                             f"accepted: points whose line has alpha >= 0 and beta > 0")
        return cls(alpha, beta)

    @classmethod
    def from_allreduce(cls, alpha_s: float, beta_s_per_byte: float, ranks: int) -> "Link":
        """The per-link alpha, beta behind an all-reduce measured as t = a + b n on `ranks` ranks
        of one ring (t = 2 (r - 1) alpha + 2 (r - 1) / r * n * beta)."""
        if ranks < 2:
            raise ValueError(f"ranks={ranks} is invalid for an all-reduce fit; accepted: >= 2")
        return cls(alpha_s / (2 * (ranks - 1)), beta_s_per_byte * ranks / (2 * (ranks - 1)))

    @property
    def gbps(self) -> float:
        """Asymptotic bandwidth in Gb/s."""
        return 8 / self.beta_s_per_byte / 1e9


def _cost(fit: dict, nbytes: float) -> float:
    """A `{s_per_message, s_per_byte}` fit's CPU seconds for one message of n bytes."""
    return fit["s_per_message"] + fit["s_per_byte"] * nbytes


@dataclass(frozen=True)
class HostCpu:
    """Workers and servers on one machine's `cores` (a local run, the emulated cluster): each PS
    message a worker sends costs the machine `s_per_message + s_per_byte * n` busy CPU seconds
    (the worker's and the server's processes, the kernel's networking), which the workers'
    compute then lacks. Measured by commbench's ps bursts (hostcpu.busy_s; its paced ones, one
    push every pace_s as backward spaces its gradients, where there are some). Likewise each
    all-reduce of n bytes costs the machine `allreduce[W]`'s s_per_message + s_per_byte * n per
    worker at W ranks (Gloo's threads, the kernel's networking), measured by commbench's fusion
    bursts; where commbench also timed its ordered rounds (each all-reduce launched as
    ByteScheduler's leader chooses it, its choice a message of its own), an all-reduce so
    launched costs `ordered_s_per_message` in place of s_per_message. Each message through a
    per-machine PS node of g workers on these cores (its reduce, the leader's push and pull, the
    server's sum, the broadcast) costs the machine `node_ps[g]`'s, measured by commbench's node
    bursts; {} where none were."""

    cores: int
    s_per_message: float
    s_per_byte: float = 0.0
    allreduce: dict = field(default_factory=dict)  # ranks -> {"s_per_message", "s_per_byte"[, "ordered_s_per_message"]}
    node_ps: dict = field(default_factory=dict)    # node workers -> {"s_per_message", "s_per_byte"}

    def message_s(self, nbytes: float) -> float:
        return self.s_per_message + self.s_per_byte * nbytes

    def scaled(self, k: float) -> "HostCpu":
        """Every message's CPU `k` times this one's (the cores' count kept)."""
        def times(fits: dict) -> dict:
            return {w: {key: v * k for key, v in f.items()} for w, f in fits.items()}
        return replace(self, s_per_message=self.s_per_message * k, s_per_byte=self.s_per_byte * k,
                       allreduce=times(self.allreduce), node_ps=times(self.node_ps))

    def allreduce_s(self, nbytes: float, ranks: int, ordered: bool = False) -> float | None:
        """The machine's busy CPU per worker for one all-reduce of n bytes at `ranks` ranks, at
        the nearest worker count commbench's fusion bursts measured (the lower of two as near);
        None where none were. `ordered`: launched in a leader's order (ByteScheduler's), at the
        ordered rounds' cost per message where that count has one."""
        if not self.allreduce:
            return None
        fit = self.allreduce[min(self.allreduce, key=lambda w: (abs(w - ranks), w))]
        per_message = fit.get("ordered_s_per_message", fit["s_per_message"]) if ordered else fit["s_per_message"]
        return per_message + fit["s_per_byte"] * nbytes

    def node_message_s(self, nbytes: float, g: int) -> float | None:
        """The machine's busy CPU for one message of n bytes through a per-machine PS node of g
        workers, where commbench's node bursts measured that node size; else None."""
        fit = self.node_ps.get(g)
        return None if fit is None else _cost(fit, nbytes)


@dataclass(frozen=True)
class Cluster:
    """A network config resolved: the links, the node size and the servers' summing speed."""

    name: str
    intra: Link | None            # between GPUs of one node (None: one GPU per node)
    inter: Link | None            # between nodes and to servers (None: a single node only)
    gpus_per_node: int
    server_mem_Bps: float = 0.0   # a PS server's memory bandwidth for summing (0: summing is free)
    mgwfbp_table: dict = field(default_factory=dict)  # workers -> (alpha_s, beta_s_per_byte) MG-WFBP used
    description: str = ""
    sources: dict = field(default_factory=dict)
    ps: Link | None = None        # the PS wire between machines and servers where measured (commbench's
                                  # ps mode); None: `inter`, as for the study's BytePS over RDMA
    host_cpu: HostCpu | None = None  # every host on one machine's cores (local, emulated): what a PS
                                     # message costs them; None: each worker has a machine of its own
    measured: dict = field(default_factory=dict)  # collective (all_reduce, reduce, broadcast) -> ranks ->
                                     # Link: the whole collective at that many ranks as make commbench
                                     # timed it here (t = a + b n; on an emulated network the all-reduce's
                                     # b is the tc wire's, `emulated_by_ranks`), in this config's own
                                     # placement, with the backend that runs `measured_algorithm`
    measured_algorithm: str = "ring"  # the algorithm the measuring backend ran (Gloo: ring; NCCL: nccl)
    measured_on_one_machine: bool = False  # those ranks shared one machine's cores (a local commbench)
    lane_speed: dict = field(default_factory=dict)  # ranks -> the speed of each of GLOO_THREADS async
                                     # all-reduces running at once, where make commbench timed a burst
                                     # of them at that many ranks in this config's own placement
                                     # (`lane_speed_by_ranks` under `inter: allreduce:`); else they
                                     # run one at a time
    starved_share: dict = field(default_factory=dict)  # ranks -> the share of a core those lanes' core-
                                     # bound part gets while every rank computes, where make commbench
                                     # timed its round beside compute at that many ranks in this
                                     # config's own placement (`data_lanes`: computing_measured_s,
                                     # `starved_shares`); else `simulate.Lanes`' rule without one
    order_s: dict = field(default_factory=dict)  # ranks -> seconds per message of this runtime's
                                     # ByteScheduler leader (its order protocol), where make commbench
                                     # timed its ordered round at that many ranks in this config's own
                                     # placement (`data_order`, `ordered_choices`); else 0
    after_compute_s: dict = field(default_factory=dict)  # ranks -> what an all-reduce that starts after
                                     # the ranks computed costs beyond this config's own time for it
                                     # (caches and threads as compute left them), where make commbench
                                     # timed one so at that many ranks in this config's own placement
                                     # (`data_after_compute`, `after_compute_extra`); else 0
    ps_after_compute_s: dict = field(default_factory=dict)  # workers -> what a PS round that starts
                                     # after the workers computed costs beyond the same round back to
                                     # back, where make commbench timed one so with that many workers
                                     # in this config's own placement (`data_ps_after_compute`,
                                     # `ps_after_compute_extra`); else 0
    ps_landing: dict = field(default_factory=dict)  # pushing machines -> (sizes ascending, per size how
                                     # much earlier than the last each reply of a server lands, fastest
                                     # first, in units of one reply's time at the PS wire's rate), where
                                     # make commbench timed it in this config's own placement
                                     # (`data_ps_landing`, `ps_landing`); else one after another

    def landing_gaps(self, machines: int, nbytes: float) -> list[float] | None:
        """How much earlier than the last each of `machines` replies of `nbytes` lands, fastest
        first, in units of one reply's time at the PS wire's rate (`ps_landing`): between two
        measured sizes on the line in log size, beyond them the nearest's; None where not measured."""
        if machines not in self.ps_landing:
            return None
        sizes, gaps = self.ps_landing[machines]
        if nbytes <= sizes[0] or len(sizes) == 1:
            return list(gaps[0])
        if nbytes >= sizes[-1]:
            return list(gaps[-1])
        k = bisect.bisect_right(sizes, nbytes)
        w = math.log(nbytes / sizes[k - 1]) / math.log(sizes[k] / sizes[k - 1])
        return [a + (b - a) * w for a, b in zip(gaps[k - 1], gaps[k])]

    def measured_here(self, same_placement: bool) -> dict:
        """What was measured in this config's own placement (`measured`, `lane_speed`, `starved_share`, `order_s`,
        `after_compute_s`, `ps_after_compute_s`, `ps_landing`), as fields for `replace`: kept for a cluster in the
        same placement, dropped for any other."""
        if same_placement:
            return {"measured": self.measured, "lane_speed": self.lane_speed, "starved_share": self.starved_share,
                    "order_s": self.order_s, "after_compute_s": self.after_compute_s,
                    "ps_after_compute_s": self.ps_after_compute_s, "ps_landing": self.ps_landing}
        return {"measured": {}, "lane_speed": {}, "starved_share": {}, "order_s": {}, "after_compute_s": {},
                "ps_after_compute_s": {}, "ps_landing": {}}

    def nodes(self, workers: int) -> tuple[int, int]:
        """(machines m, GPUs per machine g) for `workers` workers, filling nodes g at a time."""
        if workers < 1:
            raise ValueError(f"workers={workers} is invalid; accepted: >= 1")
        g = min(workers, self.gpus_per_node)
        m = math.ceil(workers / g)
        if m > 1 and self.inter is None:
            raise ValueError(f"network {self.name!r} is one node of {self.gpus_per_node} GPUs; "
                             f"workers={workers} is invalid; accepted: 1..{self.gpus_per_node}")
        return m, g

    def _links(self, workers: int) -> list[Link]:
        m, g = self.nodes(workers)
        out = []
        if g > 1:
            out.append(self.intra)
        if m > 1:
            out.append(self.inter)
        return out

    def ring_allreduce_s(self, nbytes: float, workers: int) -> float:
        if workers == 1:
            return 0.0
        chunk = nbytes / workers
        return 2 * (workers - 1) * max(l.time_s(chunk) for l in self._links(workers))

    def tree_allreduce_s(self, nbytes: float, workers: int) -> float:
        m, g = self.nodes(workers)
        if workers == 1:
            return 0.0
        between = math.ceil(math.log2(m)) * self.inter.alpha_s if m > 1 else 0.0
        latency = 2 * (between + (g - 1) * (self.intra.alpha_s if g > 1 else 0))
        return latency + 2 * nbytes * max(l.beta_s_per_byte for l in self._links(workers))

    def nccl24_tree_threshold_bytes(self, workers: int) -> float:
        """The largest all-reduce NCCL 2.4 sends by tree (module docstring: its own constants, the
        branch for GPUs without NVLink, as every node config here is)."""
        m, _ = self.nodes(workers)
        ring_bw = 5000.0  # B/us
        tree_bw = ring_bw * 2 / 3
        ring_lat_us = 6.0 * (workers - 1)
        tree_lat_us = 15.0 * int(math.log2(m)) + 4.0 * (workers // m - 1)
        if m < 2 or ring_lat_us <= tree_lat_us:
            return 0.0
        return ring_bw * tree_bw / (ring_bw - tree_bw) * (ring_lat_us - tree_lat_us)

    def hierarchical_allreduce_s(self, nbytes: float, workers: int) -> float:
        m, g = self.nodes(workers)
        inside = 2 * self.intra_reduce_s(nbytes, g) if g > 1 else 0.0
        if m == 1:
            return inside
        leaders = 2 * (m - 1) * self.inter.time_s(nbytes / m)
        return inside + leaders

    def broadcast_s(self, nbytes: float, workers: int, binomial: bool) -> float:
        """One broadcast of n bytes from one rank to the others: Gloo's binomial tree
        (gloo/broadcast.cc: ceil(log2 W) rounds, each a whole message over the slowest link),
        else NCCL's ring broadcast, a pipelined chain (W - 1 hops' start-up, the bytes once)."""
        if workers == 1:
            return 0.0
        links = self._links(workers)
        if binomial:
            return math.ceil(math.log2(workers)) * max(link.time_s(nbytes) for link in links)
        return (workers - 1) * max(link.alpha_s for link in links) + nbytes * max(link.beta_s_per_byte for link in links)

    def allreduce_s(self, nbytes: float, workers: int, algorithm: str = "nccl") -> float:
        """One all-reduce of n bytes on `workers` workers: measured where make commbench timed
        this many ranks with the backend that runs `algorithm` (`measured`), else the
        algorithm's model over the links (module docstring)."""
        if workers == 1:
            return 0.0
        measured = self.measured_s("all_reduce", nbytes, workers, algorithm)
        if measured is not None:
            return measured
        if algorithm == "ring":
            return self.ring_allreduce_s(nbytes, workers)
        if algorithm == "tree":
            return self.tree_allreduce_s(nbytes, workers)
        if algorithm == "hierarchical":
            return self.hierarchical_allreduce_s(nbytes, workers)
        if algorithm == "nccl":
            return min(self.ring_allreduce_s(nbytes, workers), self.tree_allreduce_s(nbytes, workers))
        if algorithm == "nccl-2.4":
            if nbytes <= self.nccl24_tree_threshold_bytes(workers):
                return self.tree_allreduce_s(nbytes, workers)
            return self.ring_allreduce_s(nbytes, workers)
        raise ValueError(f"all-reduce algorithm {algorithm!r} is unknown; accepted: {', '.join(ALGORITHMS)}")

    def intra_reduce_s(self, nbytes: float, g: int) -> float:
        """One half of a node's all-reduce (reduce-scatter or all-gather over g GPUs) plus each
        GPU's copy of its n / g slice to or from the host (BytePS's COPYD2H / COPYH2D)."""
        if g <= 1:
            return 0.0
        return (g - 1) * self.intra.time_s(nbytes / g) + self.intra.beta_s_per_byte * nbytes / g

    def measured_s(self, collective: str, nbytes: float, ranks: int, algorithm: str) -> float | None:
        """One `collective` of n bytes on `ranks` ranks as make commbench timed it here, where it
        did so with the backend that runs `algorithm`; else None."""
        link = self.measured.get(collective, {}).get(ranks) if algorithm == self.measured_algorithm else None
        return None if link is None else link.time_s(nbytes)

    def node_stage_s(self, collective: str, nbytes: float, g: int, algorithm: str) -> float:
        """One stage of a PS machine's node over its g workers (methods.ps_node, over the node's
        group): `reduce` of n bytes onto its leader (dist.reduce), or the leader's `broadcast` of
        the pulled sum (dist.broadcast). Measured where make commbench timed that collective at
        g ranks in this placement (`measured`), else `intra_reduce_s`."""
        if g <= 1:
            return 0.0
        measured = self.measured_s(collective, nbytes, g, algorithm)
        return self.intra_reduce_s(nbytes, g) if measured is None else measured

    def node_ps_s(self, nbytes: float, g: int, algorithm: str) -> float | None:
        """One message of n bytes through per-machine PS's whole path on a node of g workers
        (the node's reduce, the leader's control message, push, pull and broadcast), sustained
        in a burst, as make commbench's node bursts timed it on this machine's cores
        (`measured['node_ps']`, kept in this placement only, for the algorithm the measuring
        backend ran inside the node); else None."""
        return self.measured_s("node_ps", nbytes, g, algorithm)

    def server_sum_s(self, nbytes: float, threads: int) -> float:
        """One engine thread summing one push of n bytes into the key's sum: reads both, writes
        one (3 n bytes) at its share of the server's memory bandwidth."""
        if not self.server_mem_Bps:
            return 0.0
        return 3 * nbytes / (self.server_mem_Bps / threads)


# -- configs ------------------------------------------------------------------------------------
def conf_dir() -> Path:
    from ddlbench.config import conf_dir as conf

    return conf() / "network"


def names() -> list[str]:
    from ddlbench.config import choices

    return choices("network")


def local_network_name(host: str | None = None) -> str:
    """The name `make commbench` writes this machine's network under: local-<hostname>."""
    host = (host or socket.gethostname()).split(".")[0].lower()
    return "local-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in host)


def _link(spec) -> Link | None:
    if spec is None:
        return None
    if "points" in spec:
        (n1, r1), (n2, r2) = spec["points"]
        return Link.from_points((int(n1), float(r1)), (int(n2), float(r2)))
    if "allreduce" in spec:
        a = spec["allreduce"]
        if "point" in a:  # one measured all-reduce (bytes, seconds) with the latency stated apart
            nbytes, seconds = (float(v) for v in a["point"])
            beta = (seconds - float(a["alpha_s"])) / nbytes
            if beta <= 0:
                raise ValueError(f"all-reduce point {a['point']} with alpha_s={a['alpha_s']} gives beta={beta:.3g}; "
                                 f"accepted: a point slower than alpha alone")
            return Link.from_allreduce(float(a["alpha_s"]), beta, int(a["ranks"]))
        return Link.from_allreduce(float(a["alpha_s"]), float(a["beta_s_per_byte"]), int(a["ranks"]))
    if "rate_gbps" in spec:
        return Link(float(spec.get("alpha_s", 0.0)), 8 / (float(spec["rate_gbps"]) * 1e9))
    return Link(float(spec["alpha_s"]), float(spec["beta_s_per_byte"]))


def with_intra(cluster: Cluster, node_name: str) -> Cluster:
    """`cluster` with its nodes taken from the node config `node_name` (e.g. the study's two
    calibrations of its PCIe node, or a node for a network make commbench measured one rank
    per node): its intra-node link and its GPUs per node, the source recorded."""
    node = load(node_name)
    if node.intra is None:
        raise ValueError(f"network {node_name!r} has no intra-node link; accepted: a node config such as pcie3x16")
    return replace(cluster, intra=node.intra, gpus_per_node=node.gpus_per_node, name=f"{cluster.name}+{node_name}",
                   sources={**cluster.sources, "intra": node.sources.get("intra", node_name)},
                   **cluster.measured_here(False))


def slower(cluster: Cluster, k: float) -> Cluster:
    """`cluster` with every link's alpha and beta `k` times its own (between GPUs, nodes and
    servers, and what make commbench measured): communication costing k times the model's. Where
    the workers share one machine's cores (`host_cpu`), every message's CPU is k times too: a
    message's time there is mostly the cores' work (Gloo's threads, the kernel's loopback), so
    what makes it slower costs the cores that much more (bl48, local: the runs' communication
    probes read 0.54-0.95 of the bench's commbench burst; with the links alone scaled,
    ByteScheduler-A2A's two runs read -17% and -17%, with the CPU too +1% and -17%). The MG-WFBP
    table stays: it is what the runtime's merge rule was given, not how fast the wire is."""
    def scaled(link: Link | None) -> Link | None:
        return None if link is None else replace(link, alpha_s=link.alpha_s * k, beta_s_per_byte=link.beta_s_per_byte * k)

    return replace(cluster, intra=scaled(cluster.intra), inter=scaled(cluster.inter), ps=scaled(cluster.ps),
                   measured={c: {r: scaled(link) for r, link in by.items()} for c, by in cluster.measured.items()},
                   host_cpu=None if cluster.host_cpu is None else cluster.host_cpu.scaled(k),
                   name=f"{cluster.name} (communication x{k:g})")


def with_nodes(cluster: Cluster, workers_per_node: int, link: Link, source: str,
               same_placement: bool = False) -> Cluster:
    """`cluster` with `workers_per_node` workers a machine, talking inside it over `link`: the
    placement a run has where it is not the config's (a config written by make commbench has
    one worker per endpoint, as it measured). Its measured all-reduces go with the config's
    placement, unless the caller knows the measurement had this one (`same_placement`)."""
    return replace(cluster, intra=link, gpus_per_node=workers_per_node,
                   description=f"{cluster.description}; {workers_per_node} workers per machine",
                   sources={**cluster.sources, "placement": source},
                   **cluster.measured_here(same_placement))


def on_one_machine(cluster: Cluster, workers_per_node: int) -> Cluster:
    """`cluster` as a local run uses it (launch.local, and mpirun or horovodrun on one host):
    every worker a process of this one machine, laid out as nodes of `workers_per_node` (the
    local launchers' `workers_per_node`: by default all the run's workers, one node). Per-machine
    PS then reduces inside a node, pushes once per partition from its leader and runs a server
    per node (`servers: auto`: one by default), where the config's own shape (one worker per
    endpoint, as make commbench measured it) would give every worker a machine and a server of
    its own. Every link is the one measured between two processes here (the config's `inter`,
    else its `intra`); all-reduces make commbench timed on this machine's cores at a run's
    worker count are that run's (`Cluster.measured`: W processes here, as the run): its
    all-reduces, and per-machine PS's reduce and broadcast inside its node."""
    link = cluster.inter or cluster.intra
    if link is None:
        raise ValueError(f"network {cluster.name!r} has no link between processes; accepted: a config with "
                         f"`inter` (make commbench writes one)")
    return with_nodes(cluster, workers_per_node, link,
                      f"a local run: nodes of {workers_per_node} workers on this machine, over the config's "
                      f"measured link",
                      same_placement=cluster.measured_on_one_machine)


def emulated_hosts(cluster: Cluster, workers_per_host: int, intra_link: str | None = None,
                   directory: Path | None = None) -> Cluster:
    """An emulated network as a run with `workers_per_host` workers on each host uses it
    (launch.emulated, GPUS_PER_NODE): a host's workers talk over its loopback, this machine's
    own (the link of `local-<hostname>` where make commbench wrote it, else of `loopback`), or,
    where `intra_link` shapes it (INTRA_LINK), at that tc rate behind its token bucket with the
    loopback's per-message cost (a 64 KiB MTU: headers are left out)."""
    if workers_per_host <= 1:
        return cluster
    directory = directory or conf_dir()
    base = this_machine(directory)
    link = load(base, directory).inter
    source = f"{workers_per_host} workers per emulated host, over its loopback: conf/network/{base}'s link"
    bps = tc_rate_bps(intra_link, "intra_link") if intra_link else None
    if bps is not None:  # None: unshaped
        from ddlbench.launch.netns import tbf_burst_bytes

        link = Link(link.alpha_s, 8 / bps, burst_bytes=tbf_burst_bytes(bps))
        source += f", shaped to {intra_link} (INTRA_LINK)"
    return with_nodes(cluster, workers_per_host, link, source)


DEFAULT_LOCAL_NETWORK = "loopback"


def this_machine(directory: Path) -> str:
    """The network config of this machine's own links: `local-<hostname>` where make commbench
    wrote it, else `loopback` (this project's development host)."""
    mine = local_network_name()
    return mine if (directory / f"{mine}.yaml").exists() else DEFAULT_LOCAL_NETWORK


def tc_rate_bps(text: str, what: str = "link") -> float | None:
    """launch.netns.check_rate as a ValueError: bits per second, None for an unshaped link."""
    from ddlbench.launch.netns import BadSetting, check_rate

    try:
        return check_rate(text, what)
    except BadSetting as exc:
        raise ValueError(str(exc)) from None


EMULATED = "emulated-"


def emulated_spec(rate: str, directory: Path | None = None) -> dict:
    """The emulated cluster at any tc rate (`emulated-300mbit`) when nobody measured it: one CPU
    worker per host, links at the shaped rate, and the per-message cost of the software stack on
    this machine (no netem: no added delay): the alpha of `loopback` (or of the user's own
    commbench fit, `local-<hostname>`, where one exists), per link, and its PS wire's where it
    has one. `make commbench LINK=<rate>` measures them across the hosts (their veth pairs, tbf
    and bridge, on the same cores: a small all-reduce took 1.1-2.2 ms on average here over three
    runs) and writes conf/network/emulated-<rate>.yaml, which `load` reads first."""
    bps = tc_rate_bps(rate)
    if bps is None:
        raise ValueError(f"network 'emulated-{rate}' has no rate; accepted: emulated-<a tc rate, e.g. 1gbit>")
    directory = directory or conf_dir()
    base = this_machine(directory)
    here = load(base, directory)
    ps = {"ps": {"rate_gbps": bps / 1e9, "alpha_s": here.ps.alpha_s}} if here.ps is not None else {}
    if here.host_cpu is not None:  # the same machine's cores, whatever the links
        ps["host_cpu"] = asdict(here.host_cpu)
    return {"name": f"{EMULATED}{rate}", "gpus_per_node": 1, **ps,
            "description": f"emulated: tc rate {rate} between namespaces, no added delay, 1 CPU worker per host",
            "inter": {"rate_gbps": bps / 1e9, "alpha_s": here.inter.alpha_s},
            "sources": {"inter": f"rate: the emulated cluster's tc shaping ({rate}); alpha: conf/network/{base} "
                                 f"(this machine's software stack, unchanged by the namespaces; no netem)"}}


# Payload bytes per byte tc counts on the emulated links: a full Ethernet frame (MTU 1500 + 14
# bytes of header) carries one 1,448-byte TCP segment (MSS less the timestamp option); the
# launcher measures it on every link before a run (launch.netns._frame_ratio: goodput 0.0956 of a
# 0.1 Gbit/s link).
EMULATED_PAYLOAD_PER_WIRE_BYTE = 1448 / 1514


def emulated_wire(link: Link, rate_bps: float, data: dict | None) -> tuple[Link, str]:
    """The emulated link's wire from its spec: beta is the tc rate's, at TCP's payload per wire
    byte (`EMULATED_PAYLOAD_PER_WIRE_BYTE`), not a fit's slope. Least relative squares over
    commbench's 16 B..4 MiB all-reduces follow the many small, noisy sizes and took the slope
    from a 4 MiB all-reduce 26% faster than measured at 100 Mbit/s. Alpha: refitted to the same
    data (`data`: the 2-rank all-reduce's bytes and times) with that beta fixed, by least
    relative squares; as loaded where there is no data. Returns the link and a note."""
    beta = 8 / (rate_bps * EMULATED_PAYLOAD_PER_WIRE_BYTE)
    note = (f"beta {beta:.4g} s/B: the tc rate ({rate_bps / 1e9:g} Gbit/s) at {EMULATED_PAYLOAD_PER_WIRE_BYTE:.4f} "
            f"payload bytes per wire byte (launch.netns measures it per link)")
    pairs = [(float(n), float(t)) for n, t in zip(data["bytes"], data["time_s"]) if float(t) > 0] if data else []
    if not pairs:
        return replace(link, beta_s_per_byte=beta), note + "; alpha as loaded"
    # a 2-rank ring all-reduce of n bytes: t = 2 alpha + n beta (per link)
    alpha = intercept_at_slope(pairs, beta) / 2
    return replace(link, alpha_s=alpha, beta_s_per_byte=beta), \
        note + f"; alpha {alpha:.4g} s per link refitted to the {len(pairs)} all-reduce sizes with that beta"


def intercept_at_slope(pairs: list[tuple[float, float]], slope: float) -> float:
    """The a >= 0 of t = a + slope x n through (n, t) pairs, by least relative squares (minimising
    sum(((a + slope n - t) / t)^2)), the slope held fixed (a tc wire's)."""
    return max(0.0, sum((t - slope * n) / t ** 2 for n, t in pairs) / sum(1 / t ** 2 for _, t in pairs))


def emulated_by_ranks(wire: Link, data: dict | None, name: str = "emulated") -> tuple[dict, str]:
    """({ranks: Link of the whole all-reduce}, a note) at every rank count beyond 2 that make
    commbench timed across the emulated hosts (`data_by_ranks`: one rank per host, each size's
    time), as a run of that many workers meets them: the slope is the ring's through the tc
    wire (2 (W-1) / W bytes per byte at its beta), and the intercept is refitted to the data with
    that slope fixed, by least relative squares, as `emulated_wire` does at 2 ranks. The ring
    over the 2-rank link scales one hop's cost by its 2 (W-1) steps, but the hosts' ranks share
    this machine's cores: at 1 Gbit/s here, up to 64 KiB, 3 ranks took 1.5-1.7 ms and 4 ranks
    3.0-4.5 ms, where that ring gives 0.6 and 0.9 ms (the large sizes, wire-bound, agree within
    2%). 2 ranks keep the link itself. ({}, "") where nothing beyond 2 ranks was timed."""
    out, sized = {}, {}
    for ranks, d in (data or {}).items():
        try:
            w, sizes, times = int(ranks), [float(n) for n in d["bytes"]], [float(t) for t in d["time_s"]]
            ok = w >= 2 and len(sizes) == len(times) and min(sizes + times, default=0.0) >= 0
        except (TypeError, ValueError, KeyError):
            ok = False
        if not ok:
            raise ValueError(f"network {name!r}: data_by_ranks {ranks}: {d!r} is invalid; accepted: ranks >= 2, "
                             f"bytes and time_s of the same length, none below 0")
        pairs = [(n, t) for n, t in zip(sizes, times) if t > 0]
        if w < 3 or not pairs:
            continue
        b = 2 * (w - 1) / w * wire.beta_s_per_byte
        out[w], sized[w] = Link(intercept_at_slope(pairs, b), b), len(pairs)
    notes = [f"{w} ranks {out[w].alpha_s * 1e3:.3f} ms ({sized[w]} sizes)" for w in sorted(out)]
    note = ("all-reduces of 3 or more ranks: the ring's slope through the tc wire, the intercept refitted to "
            "make commbench's times at that many ranks (data_by_ranks): " + "; ".join(notes)) if out else ""
    return out, note


def _emulated_rate_bps(name: str) -> float | None:
    """The tc rate of an emulated-<rate> network, or None (another network, or no rate set)."""
    if not name.startswith(EMULATED):
        return None
    from ddlbench.launch.netns import BadSetting, check_rate

    try:
        return check_rate(name[len(EMULATED):])
    except BadSetting:
        return None


def load(name: str, directory: Path | None = None) -> Cluster:
    """`conf/network/<name>.yaml` as a Cluster. A config names its links (`inter`, `intra`) by
    two points, an all-reduce fit, a rate, or alpha/beta; `intra_from` borrows another config's
    intra-node link (the study's networks share PCIe 3.0 x16 nodes)."""
    import yaml

    directory = directory or conf_dir()
    path = directory / f"{name}.yaml"
    if path.exists():
        spec = yaml.safe_load(path.read_text()) or {}
    elif name.startswith(EMULATED):
        spec = emulated_spec(name[len(EMULATED):], directory)
    else:
        raise ValueError(f"network {name!r} is unknown; accepted: {', '.join(names())}, or emulated-<tc rate>")
    intra = _link(spec.get("intra"))
    gpus = spec.get("gpus_per_node")
    if spec.get("intra_from"):
        node = load(spec["intra_from"], directory)
        intra, gpus = intra or node.intra, gpus or node.gpus_per_node
    table = {int(k): (float(v[0]), float(v[1])) for k, v in (spec.get("mgwfbp_alpha_beta") or {}).items()}
    inter, ps, sources = _link(spec.get("inter")), _link(spec.get("ps")), dict(spec.get("sources", {}))
    rate_bps = _emulated_rate_bps(name)
    by_ranks: dict = {}  # an emulated wire's all-reduces beyond 2 ranks (emulated_by_ranks)
    if rate_bps is not None and inter is not None:
        # the emulated links are tc token buckets (launch.netns._tbf), measured or not
        from ddlbench.launch.netns import tbf_burst_bytes

        burst = tbf_burst_bytes(rate_bps)
        inter, note = emulated_wire(inter, rate_bps, spec.get("data"))
        inter = replace(inter, burst_bytes=burst)
        sources["wire"] = note
        by_ranks, note = emulated_by_ranks(inter, spec.get("data_by_ranks"), name)
        if note:
            sources["wire_by_ranks"] = note
            if "by_ranks" in sources:  # commbench's own fits at those ranks: their slopes are not the wire's
                sources["by_ranks"] += "; superseded by `wire_by_ranks`"
        if "inter" in sources:  # a commbench fit's a and b: its data stays, its slope does not
            sources["inter"] += "; superseded by `wire`"
        # a PS round's push and pull phases alternate, so each link direction refills its bucket
        # while the other works and the round's slope understates the rate: the PS wire keeps
        # its own per-message cost and takes the links' rate from the all-reduce (same tc rate)
        ps = replace(ps, beta_s_per_byte=inter.beta_s_per_byte, burst_bytes=burst) if ps is not None else None
        sources["burst"] = f"launch.netns.tbf_burst_bytes: the tbf bucket of every emulated link, {burst:.0f} B"
    host_cpu = _host_cpu(spec.get("host_cpu"), name)
    measured, one_machine, algorithm = _measured(spec.get("inter"), name)
    lanes = _lane_speed(spec.get("inter"), name)
    if rate_bps is not None:  # an emulated wire's slope is the tc rate's (emulated_wire), not a fit's
        measured, lanes = ({"all_reduce": by_ranks} if by_ranks else {}), {}
    cluster = Cluster(name=spec.get("name", name), intra=intra, inter=inter,
                      gpus_per_node=int(gpus or 1), server_mem_Bps=float(spec.get("server_mem_GBps", 0)) * 1e9,
                      mgwfbp_table=table, description=spec.get("description", ""), sources=sources, ps=ps,
                      host_cpu=host_cpu, measured=measured, measured_algorithm=algorithm,
                      measured_on_one_machine=one_machine, lane_speed=lanes)
    if rate_bps is not None and inter is not None and spec.get("data_lanes"):
        cluster.lane_speed.update(emulated_lanes(cluster, spec["data_lanes"]))
        sources["lanes"] = ("make commbench's rounds of per-tensor all-reduces (data_lanes: measured_s; a paced round "
                            "that tells no speed here gives way to its burst, burst_measured_s), each all-reduce "
                            "timed alone as this network times it (the tc rate's wire above; at 3 or more ranks "
                            "wire_by_ranks), not by the fit (simulate.lane_speed)")
    if inter is not None and spec.get("data_lanes") and cluster.lane_speed:
        cluster.starved_share.update(starved_shares(cluster, spec["data_lanes"]))
        if cluster.starved_share:
            sources["starved_share"] = (
                "make commbench's rounds of per-tensor all-reduces beside compute (data_lanes: "
                "computing_measured_s; every rank computing, one launch every computing_pace_s): the share of a "
                "core their core-bound part gets meanwhile (simulate.starved_share), each all-reduce timed alone "
                "as this network times it, on the lanes above: "
                + "; ".join(f"{w} workers {v:.2f}" for w, v in sorted(cluster.starved_share.items())))
    if inter is not None and spec.get("data_order"):
        cluster.order_s.update(ordered_choices(cluster, spec["data_order"], rate_bps is not None))
    if inter is not None and spec.get("data_after_compute"):
        cluster.after_compute_s.update(after_compute_extra(cluster, spec["data_after_compute"], rate_bps is not None))
    if spec.get("data_ps_after_compute"):
        cluster.ps_after_compute_s.update(ps_after_compute_extra(cluster.name, spec["data_ps_after_compute"]))
    if spec.get("data_ps_landing") and (ps or inter) is not None:
        cluster.ps_landing.update(ps_landing(cluster.name, ps or inter, spec["data_ps_landing"]))
    return cluster


@functools.lru_cache(maxsize=None)
def _gradient_numels(model: str) -> tuple[int, ...]:
    from ddlbench.commbench.modes import gradient_numels

    return tuple(gradient_numels(model))


def emulated_lanes(cluster: "Cluster", data: dict) -> dict:
    """{ranks: speed} of Gloo's concurrent all-reduces on an emulated network, from make commbench's
    rounds across its hosts (`data_lanes`: each model's per-tensor all-reduces launched at once,
    or one every `pace_s` where commbench paced them, `measured_s`; one rank per host, the
    placement of runs with one worker per host), each all-reduce's time alone taken as the
    simulator takes it on this cluster (the tc rate's wire): the speeds commbench wrote are
    relative to its fit's slope, which this network does not use. A paced round that tells no
    speed on these times (`simulate.paced_round_tells`) gives way to the burst kept beside it
    (`burst_measured_s`), as `_lane_speeds` does on the fit's times; without one, it is all there
    is (configs written before the burst was kept)."""
    from ddlbench.predict.simulate import lane_speed, paced_round_tells, ring_link_bytes  # simulate imports this

    out = {}
    for ranks, models in (data or {}).items():
        speeds = []
        for model, d in (models or {}).items():
            numels = _gradient_numels(model)
            alone = [cluster.allreduce_s(4 * n, int(ranks), "ring") for n in numels]  # fp32
            link_bytes = [ring_link_bytes(4 * n, int(ranks)) for n in numels]
            measured_s, pace_s, burst = float(d["measured_s"]), float(d.get("pace_s") or 0.0), d.get("burst_measured_s")
            if burst is not None and not float(burst) > 0:
                raise ValueError(f"network {cluster.name!r}: data_lanes {ranks} {model}: burst_measured_s "
                                 f"{burst!r} is invalid; accepted: > 0 seconds")
            if pace_s and burst is not None and \
                    not paced_round_tells(alone, measured_s, GLOO_THREADS, pace_s, cluster.inter, link_bytes):
                measured_s, pace_s = float(burst), 0.0
            speeds.append(lane_speed(alone, measured_s, GLOO_THREADS, cluster.inter, link_bytes, pace_s))
        if speeds:
            out[int(ranks)] = statistics.median(speeds)
    return out


def starved_shares(cluster: "Cluster", data: dict) -> dict:
    """{ranks: share} from make commbench's rounds beside compute (`data_lanes`: each model's
    `computing_measured_s`, its per-tensor all-reduces launched one every `computing_pace_s`
    while every rank computes, the compute ending with the last launch), where this cluster has
    that rank count's lane speed: the share of a core their core-bound part gets meanwhile
    (`simulate.starved_share`), each all-reduce timed alone as the simulator times it here
    (`Cluster.allreduce_s`; on shaped links its wire needs no core, `simulate.ring_link`), the
    median over models. On this machine's 2 cores, tiny-resnet, 11.6 ms of compute: 2 ranks
    over emulated 100 Mbit/s links took 30.5 ms where the burst alone took 29.0 (the wire's
    all-reduces ran on beside compute); at 1 Gbit/s 16.2 against 4.7, on loopback 15.3 against
    3.8, and 4 ranks on either 62.1 and 40.1 against 49.3 and 27.9 (none ran till it ended)."""
    from ddlbench.predict.simulate import core_bound_s, ring_link, ring_link_bytes, starved_share  # simulate imports this

    out = {}
    for ranks, models in (data or {}).items():
        ranks = int(ranks)
        speed = cluster.lane_speed.get(ranks)
        if not speed:
            continue
        shares = []
        for model, d in (models or {}).items():
            measured_s, pace_s = d.get("computing_measured_s"), d.get("computing_pace_s")
            if measured_s is None:
                continue
            if not (float(measured_s) > 0 and pace_s is not None and float(pace_s) > 0):
                raise ValueError(f"network {cluster.name!r}: data_lanes {ranks} {model}: computing_measured_s "
                                 f"{measured_s!r}, computing_pace_s {pace_s!r} are invalid; accepted: both > 0 seconds")
            numels = _gradient_numels(model)
            alone = [cluster.allreduce_s(4 * n, ranks, "ring") for n in numels]  # fp32
            link_bytes = [ring_link_bytes(4 * n, ranks) for n in numels]
            wire = ring_link(cluster, ranks, "ring")
            starved = [core_bound_s(a, b, wire) for a, b in zip(alone, link_bytes)]
            shares.append(starved_share(alone, starved, float(measured_s), GLOO_THREADS, speed, float(pace_s),
                                        wire, link_bytes))
        if shares:
            out[ranks] = statistics.median(shares)
    return out


@functools.lru_cache(maxsize=32)
def _config_data(path: str, mtime_ns: int, size: int) -> dict:
    """The network config at `path`, parsed once per version of the file (its modification time
    and size are the key): a validation asks it once per run."""
    import yaml

    return yaml.safe_load(Path(path).read_text()) or {}


def _data_of(name: str, key: str, directory: Path | None) -> dict | None:
    """The config `name`'s `key` table (under `directory`, else conf/network), {} where it has
    none; None where there is no such config."""
    path = (directory or conf_dir()) / f"{name}.yaml"
    if not path.exists():
        return None
    stat = path.stat()
    return _config_data(str(path), stat.st_mtime_ns, stat.st_size).get(key) or {}


def commbench_burst_s(name: str, ranks: int, model: str, directory: Path | None = None) -> float | None:
    """make commbench's burst of `model`'s per-tensor fp32 all-reduces, all launched at once, then
    waited (its fusion mode's `per_tensor`: the median over records of the slowest rank's mean
    round), at `ranks` ranks, as the config `name` it wrote keeps it (`data_lanes`:
    `burst_measured_s` beside a paced round, else `measured_s`, which is the burst's where no pace
    is given); None where it kept none. The driver's communication probe times the same burst
    beside a run (`comm_probe_s`)."""
    data = _data_of(name, "data_lanes", directory)
    d = (data.get(ranks) or data.get(str(ranks)) or {}).get(model) if data else None
    if not d:
        return None
    burst = d.get("burst_measured_s") if d.get("pace_s") else d.get("measured_s")
    return float(burst) if burst is not None and float(burst) > 0 else None


def commbench_node_key_s(name: str, node_workers: int, key_bytes: int, directory: Path | None = None) -> float | None:
    """make commbench's ps node bursts through one per-machine node of `node_workers` workers,
    as the config `name` it wrote keeps them (`data_node_ps`: per key size, a burst's wall time
    over its keys, the median over records): the time per key of `key_bytes`; None where it
    kept none at that node size and key size. The driver's PS probe times the same burst beside
    a run (`ps_probe_s`)."""
    data = _data_of(name, "data_node_ps", directory)
    d = (data.get(node_workers) or data.get(str(node_workers))) if data else None
    if not d or key_bytes not in d.get("bytes", []):
        return None
    t = float(d["time_s"][d["bytes"].index(key_bytes)])
    return t if t > 0 else None


# commbench's collective -> its key under a config's `inter:` (the all-reduce's is the link's own).
MEASURED_KEYS = {"all_reduce": "allreduce", "reduce": "reduce", "broadcast": "broadcast"}


def _measured(spec, name: str) -> tuple[dict, bool, str]:
    """({collective: {ranks: Link of the whole collective}}, measured on one machine's cores, the
    backend's algorithm) from the `by_ranks:` fits that make commbench wrote under `inter:`
    (`allreduce:`, `reduce:`, `broadcast:`, `node_ps:`), else ({}, False, "ring")."""
    spec = spec or {}
    a = spec.get("allreduce") or {}
    measured = {}
    # node_ps: make commbench's ps node bursts, the whole per-machine PS path per message at g workers
    for collective, key in (*MEASURED_KEYS.items(), ("node_ps", "node_ps")):
        by_ranks = {}
        for ranks, fit in ((spec.get(key) or {}).get("by_ranks") or {}).items():
            link = Link(float(fit["alpha_s"]), float(fit["beta_s_per_byte"]))
            if int(ranks) < 2 or link.alpha_s < 0 or link.beta_s_per_byte < 0:
                raise ValueError(f"network {name!r}: {key} by_ranks {ranks}: {fit} is invalid; accepted: ranks >= 2, "
                                 f"alpha_s and beta_s_per_byte >= 0")
            by_ranks[int(ranks)] = link
        if by_ranks:
            measured[collective] = by_ranks
    algorithm = a.get("algorithm", "ring")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"network {name!r}: allreduce algorithm {algorithm!r} is unknown; accepted: "
                         f"{', '.join(ALGORITHMS)}")
    return measured, bool(a.get("one_machine", False)), algorithm


def _host_cpu(cpu, name: str) -> HostCpu | None:
    """`host_cpu:` as written by make commbench (its `allreduce:` by ranks optional)."""
    if not cpu:
        return None
    per, node = ({int(w): {"s_per_message": float(f["s_per_message"]), "s_per_byte": float(f.get("s_per_byte", 0.0)),
                           **({"ordered_s_per_message": float(f["ordered_s_per_message"])}
                              if key == "allreduce" and "ordered_s_per_message" in f else {})}
                  for w, f in (cpu.get(key) or {}).items()} for key in ("allreduce", "node_ps"))
    host_cpu = HostCpu(int(cpu["cores"]), float(cpu["s_per_message"]), float(cpu.get("s_per_byte", 0.0)), per, node)
    costs = [host_cpu.s_per_message, host_cpu.s_per_byte] + [v for f in (*per.values(), *node.values())
                                                             for v in f.values()]
    if host_cpu.cores < 1 or min(costs) < 0 or min((*per, *node), default=2) < 2:
        raise ValueError(f"network {name!r}: host_cpu {cpu} is invalid; accepted: cores >= 1, s_per_message and "
                         f"s_per_byte >= 0 (allreduce and node_ps: at workers >= 2)")
    return host_cpu


def ordered_choices(cluster: "Cluster", data: dict, emulated: bool) -> dict:
    """{ranks: seconds per message of ByteScheduler's leader} from make commbench's ordered rounds
    (`data_order`: each model's per-tensor all-reduces in the leader's order, one choice a
    message, `measured_s`), each all-reduce's time alone and the lanes' sharing as the simulator
    takes them on this cluster (simulate.order_s; behind the links' token buckets on an emulated
    network); the median over models. Only a worker count with such a round gets one."""
    from ddlbench.predict.simulate import order_s, ring_link_bytes  # simulate imports this module

    out = {}
    for ranks, models in (data or {}).items():
        w, per_message = int(ranks), []
        for model, d in (models or {}).items():
            measured_s = float(d["measured_s"])
            if w < 2 or not measured_s > 0:
                raise ValueError(f"network {cluster.name!r}: data_order {ranks} {model}: {d!r} is invalid; "
                                 f"accepted: ranks >= 2, measured_s > 0")
            numels = _gradient_numels(model)
            alone = [cluster.allreduce_s(4 * n, w, cluster.measured_algorithm) for n in numels]  # fp32
            per_message.append(order_s(alone, measured_s, GLOO_THREADS, cluster.lane_speed.get(w),
                                       cluster.inter if emulated else None,
                                       [ring_link_bytes(4 * n, w) for n in numels] if emulated else None))
        if per_message:
            out[w] = statistics.median(per_message)
    return out


def after_compute_extra(cluster: "Cluster", data: dict, emulated: bool) -> dict:
    """{ranks: seconds} that an all-reduce right after compute costs beyond the simulator's time
    for it alone (`Cluster.allreduce_s`; on an emulated link less what its token bucket passes at
    once, refilled from empty over the round's compute, `compute_s`, as the rounds ran back to
    back), from make commbench's rounds after compute (`data_after_compute`: each model's
    gradients as one all-reduce, `measured_s` the rank that arrived last's time); the median over
    models, none below 0. Only a worker count with such a round gets one."""
    from ddlbench.predict.simulate import Bucket, ring_link_bytes, timed  # simulate imports this module

    out = {}
    for ranks, models in (data or {}).items():
        w, extra = int(ranks), []
        for model, d in (models or {}).items():
            nbytes, measured_s, compute_s = int(d["bytes"]), float(d["measured_s"]), float(d.get("compute_s", 0))
            if w < 2 or nbytes < 1 or not measured_s > 0 or not compute_s > 0:
                raise ValueError(f"network {cluster.name!r}: data_after_compute {ranks} {model}: {d!r} is invalid; "
                                 f"accepted: ranks >= 2, bytes >= 1, measured_s > 0, compute_s > 0")
            alone = cluster.allreduce_s(nbytes, w, cluster.measured_algorithm)
            if emulated and cluster.inter.burst_bytes:
                bucket = Bucket(cluster.inter)
                bucket.tokens, bucket.idle_from = 0.0, -compute_s
                alone = timed(bucket, ring_link_bytes(nbytes, w), alone)(0.0)
            extra.append(max(0.0, measured_s - alone))
        if extra:
            out[w] = statistics.median(extra)
    return out


def ps_after_compute_extra(name: str, data: dict) -> dict:
    """{workers: seconds} that a PS round right after compute costs beyond the same round back to
    back, from make commbench's ps rounds after compute (`data_ps_after_compute`: each model's
    gradients as one push/pull, `measured_s` the worker that arrived last's time, `back_to_back_s`
    the same workers' rounds back to back at that size); the median over models, none below 0.
    On an emulated link the back-to-back rounds had drained its token bucket, which the rounds
    after compute found refilled: there the extra is what remains beyond the bucket's gift (less
    than the cold start costs, never more)."""
    out = {}
    for workers, models in (data or {}).items():
        w, extra = int(workers), []
        for model, d in (models or {}).items():
            measured_s, alone_s = float(d["measured_s"]), float(d["back_to_back_s"])
            if w < 1 or not measured_s > 0 or not alone_s > 0:
                raise ValueError(f"network {name!r}: data_ps_after_compute {workers} {model}: {d!r} is invalid; "
                                 f"accepted: workers >= 1, measured_s > 0, back_to_back_s > 0")
            extra.append(max(0.0, measured_s - alone_s))
        if extra:
            out[w] = statistics.median(extra)
    return out


def ps_landing(name: str, wire: Link, data: dict) -> dict:
    """{pushing machines: (sizes, gaps)} from make commbench's landing rounds (`data_ps_landing`:
    per worker count the sizes and, per size, how much earlier than the last each worker's reply
    landed, fastest first, in seconds), each gap in units of one reply's time at `wire`'s rate
    (the PS wire: on an emulated network the tc rate's). A worker count needs as many gaps per
    size as workers, none below 0."""
    out = {}
    for workers, d in (data or {}).items():
        w = int(workers)
        sizes, gaps = [int(n) for n in d.get("bytes") or []], d.get("gaps_s") or []
        if (w < 2 or not sizes or len(gaps) != len(sizes) or sizes != sorted(set(sizes)) or sizes[0] < 1
                or any(len(g) != w or min(g) < 0 for g in gaps) or not wire.beta_s_per_byte > 0):
            raise ValueError(f"network {name!r}: data_ps_landing {workers}: {d!r} is invalid; accepted: workers >= 2, "
                             f"bytes ascending >= 1, per size `workers` gaps_s >= 0, on a wire with a rate")
        out[w] = (sizes, [[float(x) / (n * wire.beta_s_per_byte) for x in g] for n, g in zip(sizes, gaps)])
    return out


def _lane_speed(spec, name: str) -> dict:
    """{ranks: speed} from `lane_speed_by_ranks:` under `inter: allreduce:` (make commbench's
    fusion mode), else {}."""
    out = {}
    for ranks, speed in (((spec or {}).get("allreduce") or {}).get("lane_speed_by_ranks") or {}).items():
        if int(ranks) < 2 or not 0 < float(speed) <= 1:
            raise ValueError(f"network {name!r}: allreduce lane_speed_by_ranks {ranks}: {speed!r} is invalid; "
                             f"accepted: ranks >= 2, 0 < speed <= 1")
        out[int(ranks)] = float(speed)
    return out


# -- the user's own network, from commbench ------------------------------------------------------
METHOD_BACKENDS = ("gloo", "nccl")  # what the methods' runs all-reduce with (torch.distributed)


def commbench_network(rows: list[dict], name: str, source: str, backend: str | None = None,
                      shared_cores: bool = True) -> dict:
    """A network config (as written to conf/network/<name>.yaml) fitted from commbench's records:
    the 2-worker fp32 all-reduce of the `sizes` mode, one backend (`backend`, else the methods'
    own where timed, `METHOD_BACKENDS`, then the one with the most sizes), the median over repeated records of each size's mean time (a method pays
    every all-reduce of its stream, the slow tail a shared machine gives included: two emulated
    hosts here took 0.4-0.8 ms at the median and 0.9-2.2 ms on average for the same small
    all-reduce, and a burst of 29 of them, as WFBP sends, 1.1-2.4 ms each); t = a + b n
    fitted by the predictor's fit (methods.mgwfbp.fit_alpha_beta: least relative squares, a, b
    >= 0), kept as a 2-rank all-reduce (per link: alpha = a / 2, beta = b). One worker per node:
    every worker of a local run is its own endpoint on the measured path. The data it came from
    is written into the config beside its source. Each other worker count's all-reduce, and
    every worker count's reduce and broadcast, that the same backend timed get fits of their own
    (`_by_ranks`: `by_ranks:` under `inter:`'s `allreduce:`, `reduce:`, `broadcast:`). Gloo's
    fusion-mode bursts at a worker count with an all-reduce fit give that count's lane speed
    (`_lane_speeds`: `lane_speed_by_ranks:` under `allreduce:`).
    `shared_cores`: the ranks ran on one machine's cores (one host, or emulated hosts of it), so
    its PS bursts give `host_cpu`; across a Slurm job's nodes they did not, and no `host_cpu` is
    written."""
    usable = _collective_rows(rows, 2)
    # the methods' own backends first (a run's all-reduces are torch.distributed's, Gloo or NCCL:
    # mpi4py's shared-memory all-reduce on one machine is 40x faster than Gloo's at 16 B), then
    # the most sizes, then the name: a tie was the order of a set, which differs per process
    backends = sorted({r.get("backend") for r in usable},
                      key=lambda b: (b not in METHOD_BACKENDS, -sum(r.get("backend") == b for r in usable), str(b)))
    if backend is None and backends:
        backend = backends[0]
    usable = [r for r in usable if r.get("backend") == backend]
    fit = _fit_sizes(usable)
    if fit is None:
        raise ValueError(f"commbench records give {len({r['bytes'] for r in usable})} all-reduce sizes at 2 workers "
                         f"(fp32, backend {backend!r}); accepted: at least 2 (run make commbench WORKERS=2)")
    sizes, times, a, b = fit
    device = usable[0].get("device", "?")
    out = {
        "name": name,
        "description": f"measured by make commbench: {backend} on {device}, 2 workers, one worker per endpoint",
        "gpus_per_node": 1,
        "inter": {"allreduce": {"alpha_s": a, "beta_s_per_byte": b, "ranks": 2}},
        "sources": {"inter": f"{source}: 2-worker fp32 all_reduce, {backend} on {device}, {len(sizes)} sizes "
                             f"{sizes[0]}..{sizes[-1]} B; t = a + b n by least relative squares "
                             f"(methods.mgwfbp.fit_alpha_beta), a = {a:.4g} s, b = {b:.4g} s/B"},
        "data": {"bytes": sizes, "time_s": times},
    }
    fits = {c: _by_ranks(rows, backend, c) for c in MEASURED_KEYS} if backend in BACKEND_ALGORITHM else {}
    fits = {c: by_ranks for c, by_ranks in fits.items() if by_ranks}
    lanes = _lane_speeds(rows, backend, (a, b), fits.get("all_reduce", {})) if backend == "gloo" else {}
    order = _ordered_rounds(rows, backend)
    after = _after_compute_rounds(rows, backend)
    if fits or lanes or order or after:
        out["inter"]["allreduce"].update(algorithm=BACKEND_ALGORITHM[backend], one_machine=shared_cores)
    for collective, by_ranks in fits.items():
        key = MEASURED_KEYS[collective]
        out["inter"].setdefault(key, {})["by_ranks"] = {w: {"alpha_s": fa, "beta_s_per_byte": fb}
                                                       for w, (_, _, fa, fb) in by_ranks.items()}
        use = ("all-reduces" if collective == "all_reduce"
               else f"per-machine PS's {collective} inside a machine of that many workers")
        out["sources"]["by_ranks" if collective == "all_reduce" else key] = (
            f"{source}: fp32 {collective}, {backend} on {device}, at "
            + "; ".join(f"{w} workers ({len(fs)} sizes {fs[0]}..{fs[-1]} B: a = {fa:.4g} s, b = {fb:.4g} s/B)"
                        for w, (fs, _, fa, fb) in by_ranks.items())
            + f"; the same fit, used as measured for {use} in runs of that many workers"
            + (" on this machine's cores" if shared_cores else " one per node"))
        out["data_by_ranks" if collective == "all_reduce" else f"data_{key}"] = {
            w: {"bytes": fs, "time_s": ft} for w, (fs, ft, _, _) in by_ranks.items()}
    if lanes:
        out["inter"]["allreduce"]["lane_speed_by_ranks"] = {w: speed for w, (speed, _) in lanes.items()}
        paces = sorted({d["pace_s"] for _, per_model in lanes.values() for d in per_model.values() if d.get("pace_s")})
        paced = f"one every {', '.join(f'{p * 1e3:g} ms' for p in paces)} where paced, else " if paces else ""
        out["sources"]["lanes"] = (
            f"{source}: commbench's fusion mode, each model's per-tensor fp32 all-reduces launched {paced}"
            f"at once, then waited ({backend} on {device}); the speed of each of Gloo's {GLOO_THREADS} concurrent all-reduces "
            f"(simulate.lane_speed) at which that burst, each all-reduce timed alone by the fit above, takes the "
            f"measured time; the median over models: "
            + "; ".join(f"{w} workers {speed:.3f}" for w, (speed, _) in lanes.items()))
        out["data_lanes"] = {w: per_model for w, (_, per_model) in lanes.items()}
        # an emulated network times its all-reduces alone on the tc wire, not by this fit (`emulated_lanes`)
        emulated = any(isinstance(r.get("network"), dict) and r["network"].get("emulated") for r in rows)
        if not emulated and (warnings := lane_warnings(lanes)):
            out["warnings"] = warnings
    if order:
        out["sources"]["order"] = (
            f"{source}: commbench's fusion mode, each model's per-tensor fp32 all-reduces in ByteScheduler's "
            f"order (rank 0 sends each choice to the others over a Gloo group, every rank launching it once "
            f"told; {backend} on {device}), the median over repeated records of the round's mean time "
            f"(data_order), against which the predictor finds each message's time (network.ordered_choices)")
        out["data_order"] = order
    if after:
        out["sources"]["after_compute"] = (
            f"{source}: commbench's fusion mode, each model's gradients as one fp32 all-reduce right after every "
            f"rank computed (fused_after_compute; {backend} on {device}), the time of the rank that arrived last, "
            f"the median over repeated records of its mean (data_after_compute), less the predictor's time for it "
            f"on idle links: what a collective that starts after compute pays beyond (network.after_compute_extra)")
        out["data_after_compute"] = after
    ps_after = _ps_after_compute_rounds(rows)
    if ps_after:
        _keep_ps_rounds(out, "ps_after_compute", ps_after, shared_cores, (
            f"{source}: commbench's ps rounds after compute (push_pull_after_compute: each fusion model's "
            f"gradients as one push/pull once every worker computed), the time of the worker that arrived last, "
            f"the median over repeated records of its mean (data_ps_after_compute: measured_s), against the same "
            f"workers' rounds back to back at that size (back_to_back_s: on the line through the two sizes around it): "
            f"what a PS round that starts after compute pays beyond (network.ps_after_compute_extra)"))
    landing = _ps_landing_rounds(rows)
    if landing:
        _keep_ps_rounds(out, "ps_landing", landing, shared_cores, (
            f"{source}: commbench's ps landing rounds (push_pull_landing: one partition, every worker pushing "
            f"at once after a barrier and timing its own round), per worker count and size the median over "
            f"repeated records of how much earlier than the slowest each worker's reply landed, fastest first "
            f"(data_ps_landing: gaps_s), in place of a server's replies one after another (network.ps_landing)"))
    ps = _ps_fit(rows)
    if ps is not None:
        (alpha, beta, ps_sizes, ps_times, partition) = ps
        out["ps"] = {"alpha_s": alpha, "beta_s_per_byte": beta}
        out["sources"]["ps"] = (f"{source}: commbench's ps mode, 2 workers + 1 server, one push/pull round of one "
                                f"partition ({len(ps_sizes)} sizes {ps_sizes[0]}..{ps_sizes[-1]} B, up to the "
                                f"{partition} B partition) t = a + b n, fitted as the simulator's round on 2 "
                                f"machines and 1 server: t = 2 alpha + 4 n beta")
        out["data_ps"] = {"bytes": ps_sizes, "time_s": ps_times}
    node = _node_ps_fits(rows) if shared_cores else {}
    if node:
        out["inter"]["allreduce"]["one_machine"] = True
        out["inter"]["node_ps"] = {"by_ranks": {g: {"alpha_s": fa, "beta_s_per_byte": fb}
                                                for g, (_, _, fa, fb) in node.items()}}
        out["sources"]["node_ps"] = (
            f"{source}: commbench's ps node bursts, W workers of this machine as one per-machine PS node "
            f"(methods.ps_node) and 1 server, each burst's keys pushed back to back; per key t = a + b n "
            f"(methods.mgwfbp.fit_alpha_beta) at "
            + "; ".join(f"{g} workers ({fs[0]} and {fs[-1]} B keys: a = {fa:.4g} s, b = {fb:.4g} s/B)"
                        for g, (fs, _, fa, fb) in node.items())
            + "; the node stage of per-machine PS in runs with that many workers on this machine's cores "
              "takes at least this per message (simulate.PSComm)")
        out["data_node_ps"] = {g: {"bytes": fs, "time_s": ft} for g, (fs, ft, _, _) in node.items()}
    cpu = _host_cpu_fit(rows) if shared_cores else None
    if cpu is not None:
        out["host_cpu"], sizes_cpu, busy, paced = cpu
        out["sources"]["host_cpu"] = (f"{source}: commbench's {'paced ' if paced else ''}ps bursts "
                                      f"({sizes_cpu[0]} and {sizes_cpu[-1]} B keys), "
                                      f"the machine's busy CPU per worker-message, {busy[0] * 1e3:.3f} and "
                                      f"{busy[-1] * 1e3:.3f} ms, through both points; workers and servers on this "
                                      f"machine's {out['host_cpu']['cores']} cores")
    node_cpu = _node_ps_cpu_fits(rows) if shared_cores else {}
    if node_cpu:
        out.setdefault("host_cpu", {"cores": hostcpu_cores(rows), "s_per_message": 0.0, "s_per_byte": 0.0})
        out["host_cpu"]["node_ps"] = {g: {"s_per_message": a, "s_per_byte": b} for g, (a, b) in node_cpu.items()}
        out["sources"]["host_cpu_node_ps"] = (
            f"{source}: commbench's ps node bursts, the machine's busy CPU per key (per worker-message x the "
            f"node's workers), through the smallest and the largest key: "
            + "; ".join(f"{g} workers {a * 1e3:.3f} ms + {b * 1e9:.3f} ns/B" for g, (a, b) in node_cpu.items())
            + "; what each message of a local per-machine PS run costs the cores its workers compute on")
    allreduce_cpu = _allreduce_cpu_fits(rows, backend) if shared_cores else {}
    if allreduce_cpu:
        out.setdefault("host_cpu", {"cores": hostcpu_cores(rows), "s_per_message": 0.0, "s_per_byte": 0.0})
        ordered = _ordered_cpu_fits(rows, backend, allreduce_cpu)
        out["host_cpu"]["allreduce"] = {w: {"s_per_message": a, "s_per_byte": b,
                                            **({"ordered_s_per_message": ordered[w]} if w in ordered else {})}
                                        for w, (a, b, _) in allreduce_cpu.items()}
        out["sources"]["host_cpu_allreduce"] = (
            f"{source}: commbench's fusion bursts ({backend} on cpu: each model's gradients all-reduced per tensor, "
            f"fused, and in 25 MiB buckets), the machine's busy CPU per worker and round, fitted as s_per_message x "
            f"(messages + 1: the round's barrier) + s_per_byte x bytes by least relative squares over "
            + "; ".join(f"{w} workers ({n} kinds of round: {a * 1e3:.3f} ms + {b * 1e9:.3f} ns/B"
                        + (f"; launched in the leader's order, {ordered[w] * 1e3:.3f} ms" if w in ordered else "") + ")"
                        for w, (a, b, n) in allreduce_cpu.items())
            + ("; ordered_s_per_message from the ordered rounds (each all-reduce launched as ByteScheduler's "
               "leader chooses it), less the fit's bytes term, over messages + 1" if ordered else "")
            + ("; no ps bursts, so a PS message's CPU is not known (0)" if cpu is None else ""))
    return out


# The all-reduce algorithm a measured backend runs by itself (simulate.default_algorithm's).
BACKEND_ALGORITHM = {"gloo": "ring", "nccl": "nccl"}


def _collective_rows(rows: list[dict], workers: int, collective: str = "all_reduce") -> list[dict]:
    """commbench's `sizes` rows of an fp32 `collective` at `workers` workers that a fit may use:
    timed, right, and from 2 elements per rank up (a smaller all-reduce is not a ring: Gloo's ring
    splits the buffer into one chunk per rank; one 4-byte element took 0.27 ms across two
    emulated hosts, 16 bytes 1.5 ms; least relative squares would take its alpha from that point
    alone)."""
    return [r for r in rows if r.get("mode", "sizes") == "sizes" and r.get("collective") == collective
            and r.get("dtype") == "fp32" and r.get("workers") == workers and r.get("time_us")
            and r.get("bytes", 0) >= 2 * 4 * workers and not r.get("wrong") and "error" not in r]


def _by_ranks(rows: list[dict], backend: str, collective: str = "all_reduce") -> dict:
    """{workers: (sizes, times, a, b)} for every worker count that commbench's `sizes` mode
    measured `collective` at with `backend` (fp32, at least 2 elements per rank, two sizes or
    more), above 2 for the all-reduce (whose 2-rank fit is the links'): what W ranks here take,
    where the 2-rank links would only extrapolate (on a 2-core machine 4 processes took 6-12 ms
    for a 1 KiB all-reduce, against 0.6-0.9 ms for 2; and 4-7 ms for a 1 KiB reduce, which the
    links put at 1.3 ms)."""
    least = 3 if collective == "all_reduce" else 2
    out = {}
    for w in sorted({r.get("workers") for r in rows if isinstance(r.get("workers"), int) and r["workers"] >= least}):
        fit = _fit_sizes([r for r in _collective_rows(rows, w, collective) if r.get("backend") == backend])
        if fit is not None:
            out[w] = fit
    return out


def _lane_speeds(rows: list[dict], backend: str, two: tuple[float, float], by_ranks: dict) -> dict:
    """{workers: (speed, {model: data})}: for every worker count whose all-reduce has a fit (2:
    `two`; more: `by_ranks`) and whose fusion mode timed a model's per-tensor all-reduces (fp32,
    `backend`), the lane speed (simulate.lane_speed) of each model's round, measured as the median
    over repeated records of the mean time, and the median over models. The paced rounds
    (`per_tensor_paced`: one launch every `pace_s`, as WFBP and ByteScheduler launch during
    backward) where that worker count has any, else the bursts (all launched at once): Gloo's
    all-reduces overlap more when they trickle out than when launched together (emulated 1
    Gbit/s, tiny-resnet, 2 workers: 24-37 ms paced at 0.4 ms against 36-51 ms at once, three
    runs), which one speed cannot give both ways, and the runs launch as the paced round does.
    But a paced round whose launches alone take as long as it did, every all-reduce done before
    the next one starts even at the slowest speed, bounds the speed from no side: the fit would
    return its floor (2 local workers here: 11.73 ms for 29 launches 0.4 ms apart, 11.47 ms at
    any speed, read 0.25 where the burst gives 0.63). That model takes the burst instead."""
    from ddlbench.commbench.modes import gradient_numels
    from ddlbench.predict.simulate import burst_s, lane_speed, paced_round_tells  # simulate imports this

    fits = {2: two, **{w: (fa, fb) for w, (_, _, fa, fb) in by_ranks.items()}}
    rounds = [r for r in rows if r.get("mode") == "fusion"
              and r.get("strategy") in ("per_tensor", "per_tensor_paced", "per_tensor_computing")
              and r.get("dtype") == "fp32" and r.get("backend") == backend and r.get("workers") in fits
              and r.get("time_us") and not r.get("wrong") and "error" not in r]
    out = {}
    for w in sorted({r["workers"] for r in rounds}):
        a, b = fits[w]
        mine = [r for r in rounds if r["workers"] == w]
        paced = [r for r in mine if r["strategy"] == "per_tensor_paced" and r.get("pace_s")]
        bursts = [r for r in mine if r["strategy"] == "per_tensor"]
        per_model = {}
        for model in sorted({r["model"] for r in mine}):
            alone = [Link(a, b).time_s(4 * n) for n in gradient_numels(model)]  # fp32
            of_bursts = [float(r["time_us"]) * 1e-6 for r in bursts if r["model"] == model]
            burst = {"burst_measured_s": statistics.median(of_bursts)} if of_bursts else {}
            for use in (paced, bursts):
                of_model = [r for r in use if r["model"] == model]
                if not of_model:
                    continue
                measured_s = statistics.median(float(r["time_us"]) * 1e-6 for r in of_model)
                pace_s = float(statistics.median(float(r.get("pace_s") or 0.0) for r in of_model))
                if pace_s and burst and not paced_round_tells(alone, measured_s, GLOO_THREADS, pace_s):
                    continue  # the launches alone took that long: no speed told, the burst's instead
                # a paced round keeps the burst beside it: an emulated network times every
                # all-reduce alone on its tc wire, where the paced round may tell no speed
                per_model[model] = {"tensors": len(alone), "measured_s": measured_s, "alone_s": sum(alone),
                                    "speed": lane_speed(alone, measured_s, GLOO_THREADS, pace_s=pace_s),
                                    **({"pace_s": pace_s, **burst} if pace_s else {})}
                # `lane_warnings`: the round, and the burst kept beside a paced one, against the
                # fit's all-reduces at full speed; the worse of the two where both overrun
                checks = [(measured_s, pace_s)] + ([(burst["burst_measured_s"], 0.0)] if pace_s and burst else [])
                over = max(((burst_s(alone, GLOO_THREADS, 1.0, pace_s=p), m) for m, p in checks),
                           key=lambda fm: fm[0] / fm[1])
                if over[0] > UNMATCHED_ROUND * over[1]:
                    per_model[model]["unmatched"] = {"full_speed_s": over[0], "measured_s": over[1]}
                # the same launches paced beside every rank's compute: what the lanes get meanwhile
                # (`starved_shares`, at load, on this network's own times)
                computing = [r for r in mine if r["strategy"] == "per_tensor_computing" and r["model"] == model
                             and r.get("pace_s")]
                if computing:
                    per_model[model]["computing_measured_s"] = statistics.median(
                        float(r["time_us"]) * 1e-6 for r in computing)
                    per_model[model]["computing_pace_s"] = float(statistics.median(float(r["pace_s"]) for r in computing))
                break
        out[w] = (statistics.median(m["speed"] for m in per_model.values()), per_model)
    return out


def lane_warnings(lanes: dict) -> list[str]:
    """What `_lane_speeds` found that no lane speed explains: a round of a model's per-tensor
    all-reduces (`data_lanes`: the round the speed came from, or the burst kept beside a paced
    one) shorter than the size sweep's fit gives them even fully overlapped, every lane at full
    speed (`unmatched`: more than UNMATCHED_ROUND times the round). That worker count's sweep ran
    slower than its rounds: one commbench session here timed each 4-rank all-reduce 6-12 ms in
    its sweep (the session before, 0.9-3.1 ms) and the burst of tiny-resnet's 29 at 73 ms (its
    paced round 127 ms), where the fit gives 137 ms at full speed, so its runs' per-tensor
    all-reduces were predicted too slow (WFBP-A2A at 4 local workers -35%)."""
    return [f"all_reduce at {w} workers: the size sweep's fit gives {model}'s {d['tensors']} all-reduces "
            f"{d['unmatched']['full_speed_s'] * 1e3:.0f} ms even fully overlapped ({d['alone_s'] * 1e3:.0f} ms one "
            f"at a time), against {d['unmatched']['measured_s'] * 1e3:.0f} ms measured with them all in flight: "
            f"that sweep ran slower than its rounds, so predictions of per-tensor all-reduces at {w} workers will "
            f"read too slow; run make commbench again on a quiet machine"
            for w, (_, per_model) in sorted(lanes.items()) for model, d in sorted(per_model.items())
            if d.get("unmatched")]


def _ordered_rounds(rows: list[dict], backend: str) -> dict:
    """{workers: {model: {messages, measured_s}}} from commbench's ordered rounds
    (`per_tensor_ordered`: a model's per-tensor all-reduces, each launched once rank 0's choice
    arrived; `_fusion_rounds`). The leader's messages go one at a time: Gloo sends one only once
    every follower has posted its receive, which it does after launching what the last one said
    (2 local workers on 2 cores: 0.8-1.1 ms a choice in a round, 0.12 ms with no all-reduce
    launched between choices)."""
    return _fusion_rounds(rows, backend, "per_tensor_ordered", messages=("messages", int))


def _after_compute_rounds(rows: list[dict], backend: str) -> dict:
    """{workers: {model: {bytes, compute_s, measured_s}}} from commbench's rounds after compute
    (`fused_after_compute`: a model's gradients as one all-reduce once every rank computed
    `compute_s`; each round the time of the rank that arrived last, who waited for nobody;
    `_fusion_rounds`)."""
    return _fusion_rounds(rows, backend, "fused_after_compute", bytes=("bytes", int),
                          compute_s=("after_compute_s", float))


def _fusion_rounds(rows: list[dict], backend: str, strategy: str, **keep) -> dict:
    """{workers: {model: {field: ..., measured_s}}} from commbench's fusion rounds of `strategy`
    (fp32, `backend`, right), the median over repeated records of the mean time; `keep`: the
    fields to keep, each as (the row's key, its type), from the first such record."""
    rounds = [r for r in rows if r.get("mode") == "fusion" and r.get("strategy") == strategy
              and r.get("dtype") == "fp32" and r.get("backend") == backend and r.get("time_us")
              and all(r.get(key) for key, _ in keep.values()) and not r.get("wrong") and "error" not in r]
    out: dict = {}
    for w in sorted({int(r["workers"]) for r in rounds}):
        for model in sorted({r["model"] for r in rounds if int(r["workers"]) == w}):
            mine = [r for r in rounds if int(r["workers"]) == w and r["model"] == model]
            out.setdefault(w, {})[model] = {**{name: kind(mine[0][key]) for name, (key, kind) in keep.items()},
                                            "measured_s": statistics.median(float(r["time_us"]) * 1e-6 for r in mine)}
    return out


def _host_cpu_fit(rows: list[dict]):
    """({cores, s_per_message, s_per_byte}, sizes, busy, paced) from commbench's 2-worker ps
    bursts on the CPU (a GPU's compute does not wait for the cores): the machine's busy CPU per
    worker-message at each key size (the median over repeated records; the paced bursts' where
    there are some, `paced_first`), a line through the smallest and the largest (per-byte cost
    at least 0), or None without bursts that measured the CPU (no /proc/stat)."""
    bursts = paced_first([r for r in rows if r.get("mode") == "ps" and r.get("collective") == "push_pull_burst"
                          and r.get("workers") == 2 and r.get("device") == "cpu" and r.get("cpu_busy_s") is not None
                          and not r.get("wrong") and "error" not in r])
    if not bursts:
        return None
    sizes, busy = _medians_by_size([(r["key_bytes"], r["cpu_busy_s"]) for r in bursts])
    per_message, slope = _line_through_ends(sizes, busy)
    return {"cores": min(int(r["cores"]) for r in bursts), "s_per_message": per_message, "s_per_byte": slope}, \
        sizes, busy, bool(bursts[0].get("pace_s"))


def paced_first(bursts: list[dict]) -> list[dict]:
    """The paced ps bursts among these where there are some (`pace_s`: one push every pace_s, as
    WFBP and ByteScheduler push while backward computes), else all: a paced message costs the
    machine more CPU than one of a back-to-back burst, whose keys share their wake-ups."""
    return [r for r in bursts if r.get("pace_s")] or bursts


def _line_through_ends(sizes: list[int], values: list[float]) -> tuple[float, float]:
    """(a, b), both >= 0, of the line a + b n through the smallest and the largest size's value
    (b = 0 with one size)."""
    slope = max(0.0, (values[-1] - values[0]) / (sizes[-1] - sizes[0])) if len(sizes) > 1 else 0.0
    return max(0.0, values[0] - slope * sizes[0]), slope


def hostcpu_cores(rows: list[dict]) -> int:
    """The cores the CPU-measuring rows (fusion and ps bursts) counted (the fewest, if they differ)."""
    return min(int(r["cores"]) for r in rows if r.get("mode") in ("fusion", "ps") and r.get("cores"))


def _allreduce_cpu_fits(rows: list[dict], backend: str) -> dict:
    """{workers: (s_per_message, s_per_byte, rounds)} from commbench's fusion bursts on the CPU
    (`cpu_busy_s`: the machine's busy CPU per worker and round): c = a (messages + 1) + b bytes,
    the + 1 the round's barrier, by least relative squares with a, b >= 0 (the median over
    repeated records of each model and strategy), for every worker count with two rounds of
    different shapes or more. A round too short for /proc/stat's ticks reads 0 and is left out;
    so is a paced round (`per_tensor_paced`), whose window is mostly the worker's sleep, and an
    ordered one (`per_tensor_ordered`), whose messages are the leader's too (`_ordered_cpu_fits`)."""
    bursts = [r for r in rows if r.get("mode") == "fusion" and r.get("device") == "cpu" and not r.get("pace_s")
              and not r.get("order") and r.get("backend") == backend and r.get("cpu_busy_s")
              and not r.get("wrong") and "error" not in r]
    out = {}
    for w in sorted({int(r["workers"]) for r in bursts}):
        by_shape: dict[tuple, list[float]] = {}
        for r in bursts:
            if int(r["workers"]) == w:
                by_shape.setdefault((int(r["messages"]) + 1, int(r["bytes"])), []).append(float(r["cpu_busy_s"]))
        points = [(m, n, statistics.median(c)) for (m, n), c in sorted(by_shape.items())]
        if len({m / n for m, n, _ in points}) >= 2:
            out[w] = (*_nonnegative_two_term_fit(points), len(points))
    return out


def _ordered_cpu_fits(rows: list[dict], backend: str, fits: dict) -> dict:
    """{workers: ordered_s_per_message} from commbench's ordered fusion rounds on the CPU
    (`per_tensor_ordered`: each all-reduce launched as ByteScheduler's leader chooses it, the
    choice a Gloo message of its own): the round's busy CPU per worker less the back-to-back
    fit's bytes term (`fits`, `_allreduce_cpu_fits`), over messages + 1 (the barrier), the median
    over repeated records and models. The leader's choices and the followers' waits for them
    cost the cores beyond a burst's wake-ups (2 workers here: 9.5-18 ms a tiny-resnet round of 29
    against 7-11 back to back). Only worker counts that have both."""
    ordered = [r for r in rows if r.get("mode") == "fusion" and r.get("device") == "cpu" and r.get("order")
               and r.get("backend") == backend and r.get("cpu_busy_s") and not r.get("wrong") and "error" not in r]
    out = {}
    for w, (_, b, _) in fits.items():
        per = [max(0.0, (float(r["cpu_busy_s"]) - b * int(r["bytes"])) / (int(r["messages"]) + 1))
               for r in ordered if int(r["workers"]) == w]
        if per:
            out[w] = statistics.median(per)
    return out


def _nonnegative_two_term_fit(points) -> tuple[float, float]:
    """(a, b) >= 0 minimising sum(((a x + b y - c) / c)^2) over (x, y, c) points: weighted least
    squares (weights 1 / c^2) in two terms without an intercept; with a constraint active, the
    best fit of the other term alone."""
    w = [1.0 / c**2 for _, _, c in points]
    sxx = sum(wi * x * x for wi, (x, _, _) in zip(w, points))
    syy = sum(wi * y * y for wi, (_, y, _) in zip(w, points))
    sxy = sum(wi * x * y for wi, (x, y, _) in zip(w, points))
    sxc = sum(wi * x * c for wi, (x, _, c) in zip(w, points))
    syc = sum(wi * y * c for wi, (_, y, c) in zip(w, points))
    det = sxx * syy - sxy * sxy
    a, b = ((sxc * syy - syc * sxy) / det, (syc * sxx - sxc * sxy) / det) if det else (-1.0, -1.0)
    if a >= 0 and b >= 0:
        return a, b
    only_a, only_b = (sxc / sxx if sxx else 0.0, 0.0), (0.0, syc / syy if syy else 0.0)

    def loss(ab):
        return sum(wi * (ab[0] * x + ab[1] * y - c) ** 2 for wi, (x, y, c) in zip(w, points))
    return min((only_a, only_b), key=loss)


def _node_ps_fits(rows: list[dict]) -> dict:
    """{node workers: (key sizes, time per key, a, b)} from commbench's ps node bursts on the CPU
    (`push_pull_node_burst`, not paced: a burst's wall time over its keys, the median over
    repeated records at each key size; t = a + b n by methods.mgwfbp.fit_alpha_beta), for every
    node size with two key sizes or more."""
    from ddlbench.methods.mgwfbp import fit_alpha_beta

    bursts = [r for r in _node_bursts(rows) if r.get("time_us") and r.get("keys") and not r.get("pace_s")]
    out = {}
    for g in sorted({int(r["node_workers"]) for r in bursts}):
        sizes, times = _medians_by_size([(r["key_bytes"], float(r["time_us"]) * 1e-6 / int(r["keys"]))
                                         for r in bursts if int(r["node_workers"]) == g])
        if len(sizes) >= 2:
            out[g] = (sizes, times, *fit_alpha_beta(sizes, times))
    return out


def _node_ps_cpu_fits(rows: list[dict]) -> dict:
    """{node workers: (s_per_message, s_per_byte)}: the machine's busy CPU per key of commbench's
    ps node bursts (`cpu_busy_s` per worker-message x the node's workers; the median over
    repeated records at each key size; the paced bursts' where there are some), a line through
    the smallest and the largest key (per-byte cost at least 0), for every node size with two
    key sizes or more."""
    bursts = [r for r in _node_bursts(rows) if r.get("cpu_busy_s") is not None]
    out = {}
    for g in sorted({int(r["node_workers"]) for r in bursts}):
        sizes, busy = _medians_by_size([(r["key_bytes"], r["cpu_busy_s"] * g)
                                        for r in paced_first([r for r in bursts if int(r["node_workers"]) == g])])
        if len(sizes) >= 2:
            out[g] = _line_through_ends(sizes, busy)
    return out


def _node_bursts(rows: list[dict]) -> list[dict]:
    """commbench's ps node bursts on the CPU that came back right."""
    return [r for r in rows if r.get("mode") == "ps" and r.get("collective") == "push_pull_node_burst"
            and r.get("device") == "cpu" and r.get("node_workers") and not r.get("wrong") and "error" not in r]


def _medians_by_size(pairs) -> tuple[list[int], list[float]]:
    """(sizes ascending, the median value at each) from (bytes, value) pairs of repeated records."""
    by_size: dict[int, list[float]] = {}
    for n, v in pairs:
        by_size.setdefault(int(n), []).append(float(v))
    sizes = sorted(by_size)
    return sizes, [statistics.median(by_size[n]) for n in sizes]


def _fit_sizes(rows: list[dict]):
    """(sizes, times, a, b): each size's median over repeated records of its mean call time, and
    t = a + b n through them by the predictor's fit (methods.mgwfbp.fit_alpha_beta: least
    relative squares, a, b >= 0); None with fewer than 2 sizes."""
    from ddlbench.methods.mgwfbp import fit_alpha_beta

    sizes, times = _medians_by_size([(r["bytes"], float(r["time_us"]) * 1e-6) for r in rows])
    if len(sizes) < 2:
        return None
    return (sizes, times, *fit_alpha_beta(sizes, times))


def _ps_after_compute_rounds(rows: list[dict]) -> dict:
    """{workers: {model: {bytes, compute_s, measured_s, back_to_back_s}}} from commbench's ps
    rounds after compute (`push_pull_after_compute`, right), the median over repeated records of
    the mean time, beside what the same workers' back-to-back rounds took at that size: the line
    through the two measured sizes around it (each the median over records of its mean), not a
    fit through them all, which the emulated links' token buckets bend (100 Mbit/s, 2 workers:
    51 ms at 256 KiB and 300 ms at 1 MiB, where t = a + b n by least relative squares gave 312 KB
    20 ms less than the line). A worker count without two back-to-back sizes is left out."""
    ok = [r for r in rows if r.get("mode") == "ps" and not r.get("wrong") and "error" not in r and r.get("time_us")]
    out: dict = {}
    for w in sorted({r["workers"] for r in ok if r.get("collective") == "push_pull_after_compute"}):
        sizes, times = _medians_by_size([(r["bytes"], float(r["time_us"]) * 1e-6) for r in ok
                                         if r["workers"] == w and r.get("collective") == "push_pull"])
        if len(sizes) < 2:
            continue
        after = [r for r in ok if r["workers"] == w and r.get("collective") == "push_pull_after_compute"]
        for model in sorted({r["model"] for r in after}):
            of_model = [r for r in after if r["model"] == model]
            nbytes = int(of_model[0]["bytes"])
            out.setdefault(w, {})[model] = {
                "bytes": nbytes, "compute_s": float(of_model[0]["after_compute_s"]),
                "measured_s": statistics.median(float(r["time_us"]) * 1e-6 for r in of_model),
                "back_to_back_s": _through(sizes, times, nbytes)}
    return out


def _keep_ps_rounds(out: dict, key: str, data: dict, shared_cores: bool, source: str) -> None:
    """Keep commbench's PS rounds of one kind in the written config: `data_<key>` with its
    source, measured in the placement the rounds had (`one_machine`)."""
    out["sources"][key] = source
    out[f"data_{key}"] = data
    out["inter"]["allreduce"]["one_machine"] = shared_cores


def _ps_landing_rounds(rows: list[dict]) -> dict:
    """{workers: {bytes: [...], gaps_s: [[...] per size]}} from commbench's landing rounds
    (`push_pull_landing`, right): per size and order (fastest worker first), the median over
    repeated records of the gap to the slowest."""
    ok = [r for r in rows if r.get("mode") == "ps" and r.get("collective") == "push_pull_landing"
          and not r.get("wrong") and "error" not in r and r.get("gaps_s")]
    out: dict = {}
    for w in sorted({r["workers"] for r in ok}):
        of_w = [r for r in ok if r["workers"] == w and len(r["gaps_s"]) == w]
        sizes = sorted({int(r["bytes"]) for r in of_w})
        if sizes:
            out[w] = {"bytes": sizes, "gaps_s": [
                [statistics.median(float(r["gaps_s"][k]) for r in of_w if int(r["bytes"]) == n) for k in range(w)]
                for n in sizes]}
    return out


def _through(sizes: list, times: list, n: float) -> float:
    """The time at n bytes on the line through the two measured sizes around it (ascending
    `sizes`; beyond them, the nearest two's line)."""
    k = min(max(bisect.bisect_left(sizes, n), 1), len(sizes) - 1)
    (n0, t0), (n1, t1) = (sizes[k - 1], times[k - 1]), (sizes[k], times[k])
    return t0 + (t1 - t0) * (n - n0) / (n1 - n0)


def _ps_fit(rows: list[dict]):
    """(alpha, beta, sizes, times, partition) of the PS wire from commbench's `ps` rows at 2
    workers, or None without them. The simulator's round for one partition of n bytes on 2
    machines and 1 server (simulate.PSComm: a push on each machine's uplink, the server's downlink
    taking both, a pull on the server's uplink carrying both, cut through to each machine) takes
    2 alpha + 4 n beta: so alpha = a / 2, beta = b / 4. Sizes up to one partition: beyond it the
    engine pipelines partitions."""
    ps = [r for r in rows if r.get("mode") == "ps" and r.get("collective") == "push_pull" and r.get("workers") == 2
          and r.get("time_us")
          and not r.get("wrong") and "error" not in r and r["bytes"] <= r.get("partition_bytes", 4_096_000)]
    fit = _fit_sizes(ps)
    if fit is None:
        return None
    sizes, times, a, b = fit
    return a / 2, b / 4, sizes, times, ps[0].get("partition_bytes", 4_096_000)


def write_config(spec: dict, directory: Path | None = None) -> Path:
    return replace_config(spec, directory)[0]


def replace_config(spec: dict, directory: Path | None = None) -> tuple[Path, Path | None]:
    """Write the network config `spec` as <directory>/<name>.yaml: (its path, where the config it
    replaced is kept, or None). A config that would change is first copied to
    <name>.yaml.<time>.bak beside it (git-ignored, not a network Hydra lists): a small or partial
    make commbench must not silently replace a calibration that took a full sweep."""
    import shutil
    import time

    import yaml

    path = (directory or conf_dir()) / f"{spec['name']}.yaml"
    head = "# Written by make commbench (predict.network.commbench_network): the user's own network, fitted\n" \
           "# from the all-reduce records in `data`; rerun make commbench to refresh.\n"
    text = head + yaml.safe_dump(spec, sort_keys=False)
    kept = None
    if path.exists() and path.read_text() != text:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(path.stat().st_mtime))
        kept = path.with_name(f"{path.name}.{stamp}.bak")
        shutil.copy2(path, kept)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path, kept
