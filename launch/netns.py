"""An emulated cluster on one machine: hosts as network namespaces, a bridge, shaped links.

Only the wire's speed is emulated: every host is a network namespace of its own (its own
interface `eth0`, address, port space and routing table) plus a UTS namespace (its own hostname),
joined to one bridge by a veth pair; processes, sockets and protocols are real. Every host's
link is shaped with `tc tbf` in both directions at `link` (the host's egress on its own eth0,
its ingress on the bridge side of the pair, as a switch port would limit it), and with
`intra_link`, its loopback too, which carries the traffic between processes of one host. No
netem in this kernel, so no latency is added (`netem_available()` says where it exists).

Names and addresses are the project's own, so leftovers are found by name alone: every network
namespace and link is called `ddlb-...` (PREFIX), the state lives under /run/ddlbench-netns, and
the addresses come from 198.18.213.0/24, inside the range RFC 2544 reserves for benchmarking
(198.18.0.0/15). The bridge holds .1 (daemons in the root namespace, e.g. slurmctld, listen
there); host i holds .(10 + i). No host has a default route and IPv4 forwarding is left as it
is (off here), so nothing leaves the machine. Host names resolve through a marked block in
/etc/hosts (HOSTS_BEGIN .. HOSTS_END), written by `up` and removed by `down` (c10d looks peers'
names up, and Slurm and horovodrun address hosts by name); launchers here pass addresses.

API (for launchers; see launch/emulated.py):
    check_rate(text) -> bits/s, or ConfigError naming the accepted units
    unavailable() -> None, or the one-line reason this machine cannot host a cluster
    with cluster(nodes, link, intra_link=None) as c:   # up, yield, down on every path
        c.hosts[i].exec_prefix()     # argv prefix that runs a command on host i
        c.hosts[i].env()             # GLOO_SOCKET_IFNAME / DDLBENCH_PS_IFNAME for host i
        c.measure() -> [Link]; c.check(links) raises LinkTooSlow beyond 5% of the set rate
        c.describe(links) -> the run record's `network` block
    up(...)/down()/leftovers()/current() for interactive use (`python -m ddlbench.launch.netns`).

This module uses the standard library only: it is run as a script inside namespaces to measure.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PREFIX = "ddlb-"                     # every namespace and link this module creates
BRIDGE = "ddlb-br"
STATE_DIR = Path("/run/ddlbench-netns")  # state.json and the hosts' UTS namespace files
NETNS_DIR = Path("/run/netns")           # where `ip netns` keeps named network namespaces
SUBNET = "198.18.213"                    # /24 inside RFC 2544's benchmarking range 198.18.0.0/15
PREFIX_LEN = 24
BRIDGE_ADDRESS = f"{SUBNET}.1"
FIRST_HOST = 10                          # host i is SUBNET.(10 + i)
MAX_HOSTS = 254 - FIRST_HOST
IFNAME = "eth0"                          # every host's interface, inside its namespace
TOLERANCE = 0.05                         # a measured link within 5% of the set rate
UNSHAPED = ("none", "unshaped")          # link values that leave the wire unshaped
MEASURE_S = 0.5                          # the timed window of one link's measurement
MEASURE_WARMUP_S = 0.2                   # sent before the window: TCP's ramp and tbf's initial burst
MEASURE_PORT = 5201
MEASURE_TRIES = 3                        # a link outside tolerance is measured again, up to this many times
HOSTS_FILE = Path("/etc/hosts")
MAPPED_SUFFIX = "-v4mapped"  # the name of a host's IPv4-mapped IPv6 address in /etc/hosts
HOSTS_BEGIN = "# ddlbench-netns begin: emulated hosts (python -m ddlbench.launch.netns down removes this block)"
HOSTS_END = "# ddlbench-netns end"

# tc's rate units (tc(8), "RATES"): a bare number is bits per second.
RATE_UNITS = {
    "": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kibit": 1024, "mibit": 1024 ** 2, "gibit": 1024 ** 3, "tibit": 1024 ** 4,
    "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
    "kibps": 8 * 1024, "mibps": 8 * 1024 ** 2, "gibps": 8 * 1024 ** 3, "tibps": 8 * 1024 ** 4,
}


class NetnsError(RuntimeError):
    """The emulated network cannot be built or used; the message is one line."""


class BadSetting(NetnsError, ValueError):
    """A bad setting (link rate, node count); one line naming the value and the accepted ones."""


class LinkTooSlow(NetnsError):
    """A measured link is not within TOLERANCE of its set rate."""


def check_rate(text, what: str = "link") -> float | None:
    """Bits per second for a tc rate (`1gbit`, `300mbit`, `125mbps`, `1e9`), or None for an
    unshaped link (`none`). BadSetting, naming tc's units, for anything else."""
    s = str(text).strip().lower()
    if s in UNSHAPED:
        return None
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)([a-z]*)", s)
    if not m or m.group(2) not in RATE_UNITS or float(m.group(1)) <= 0:
        raise BadSetting(f"{what}={text!r} is not a rate tc understands; accepted: a number > 0 with one of "
                         f"{', '.join(u for u in RATE_UNITS if u)} (e.g. 1gbit, 300mbit), or none (unshaped)")
    return float(m.group(1)) * RATE_UNITS[m.group(2)]


def check_nodes(nodes) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_HOSTS:
        raise BadSetting(f"nodes={nodes!r} is invalid; accepted: an integer 1..{MAX_HOSTS} "
                         f"(the hosts of {SUBNET}.0/{PREFIX_LEN})")
    return nodes


def unavailable() -> str | None:
    """Why this machine cannot host an emulated cluster (one line), or None where it can: root,
    and the `ip`, `tc`, `nsenter` and `unshare` tools."""
    missing = [t for t in ("ip", "tc", "nsenter", "unshare") if shutil.which(t) is None]
    if missing:
        return f"the emulated cluster needs {', '.join(missing)} on PATH (iproute2, util-linux)"
    if os.geteuid() != 0:
        return ("the emulated cluster needs root (network namespaces, veth pairs, a bridge and tc); "
                f"running as uid {os.geteuid()}: run it with sudo, or as root")
    return None


@functools.lru_cache(maxsize=None)
def netem_available() -> bool:
    """Whether this kernel has netem (added latency), tried on a dummy link of our own (tc
    answers 'Specified qdisc kind is unknown' where it is missing)."""
    probe = f"{PREFIX}probe"
    if _run(["ip", "link", "add", probe, "type", "dummy"], check=False).returncode != 0:
        return False
    try:
        return _run(["tc", "qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms"], check=False).returncode == 0
    finally:
        _run(["ip", "link", "del", probe], check=False)


@dataclasses.dataclass(frozen=True)
class Host:
    """One emulated host: network namespace `netns`, hostname `hostname`, `address` on eth0."""
    index: int
    netns: str
    hostname: str
    address: str
    veth: str  # the bridge side of its pair, in the root namespace

    @property
    def uts_file(self) -> Path:
        return STATE_DIR / "uts" / self.netns

    def exec_prefix(self) -> list[str]:
        """argv prefix running a command on this host: its network and UTS namespaces. nsenter,
        not `ip netns exec`, which remounts /sys (slurmd then finds no cgroup filesystem)."""
        return ["nsenter", f"--net={NETNS_DIR / self.netns}", f"--uts={self.uts_file}", "--"]

    def env(self) -> dict:
        """What a rank on this host needs: Gloo, NCCL's sockets and the PS wire on this host's
        interface. (With GPUs, NCCL tells hosts apart by hostname, so ranks on different emulated
        hosts use its socket transport over the shaped link; unverified: no GPU here.)"""
        return {"GLOO_SOCKET_IFNAME": IFNAME, "NCCL_SOCKET_IFNAME": IFNAME, "DDLBENCH_PS_IFNAME": IFNAME}


def host(i: int) -> Host:
    return Host(i, f"{PREFIX}h{i}", f"{PREFIX}node{i}", f"{SUBNET}.{FIRST_HOST + i}", f"{PREFIX}h{i}")


@dataclasses.dataclass
class Link:
    """One measured link: `src`'s egress into `dst`'s ingress, over TCP for MEASURE_S."""
    src: str
    dst: str
    gbps: float          # on the wire: Ethernet frames, headers and all (what tc shapes)
    goodput_gbps: float  # TCP payload delivered


@dataclasses.dataclass
class Cluster:
    hosts: list[Host]
    link: str
    intra_link: str | None = None
    owner_pid: int | None = None  # the run that brought it up; None = interactive (cluster-up)
    steal_share: float | None = None  # `measure`: the cores stolen by other guests while it measured

    @property
    def link_bps(self) -> float | None:
        return check_rate(self.link)

    def measure(self, seconds: float = MEASURE_S) -> list[Link]:
        """Each host's link, host to host: host i sends to host i+1 (a ring), one pair at a
        time, so every host's egress and every host's ingress is measured once, alone. Keeps
        the share of this machine's cores the hypervisor gave other guests meanwhile
        (`steal_share`, for `check`'s error; None where /proc/stat has no steal)."""
        from ddlbench import hostcpu

        n = len(self.hosts)
        mark = hostcpu.steal_mark()
        links = [self._measure_link(self.hosts[i], self.hosts[(i + 1) % n], seconds) for i in range(n)] if n > 1 else []
        self.steal_share = hostcpu.stolen_share(mark)
        return links

    def _measure_link(self, src: Host, dst: Host, seconds: float) -> Link:
        """The best of up to MEASURE_TRIES measurements, stopping at the first within tolerance:
        a link carries what it carries at best; a try that fell short because other work held
        this machine's CPUs at that moment says nothing about the wire."""
        want = self.link_bps
        best = None
        for _ in range(MEASURE_TRIES):
            got = measure_pair(src, dst, seconds)
            best = got if best is None or got.gbps > best.gbps else best
            if want is None or abs(best.gbps * 1e9 - want) <= TOLERANCE * want:
                break
        return best

    def check(self, links: list[Link]) -> None:
        """LinkTooSlow unless every measured link is within TOLERANCE of the set rate (a link
        set to `none` is not checked: there is nothing to meet)."""
        want = self.link_bps
        if want is None:
            return
        bad = [l for l in links if abs(l.gbps * 1e9 - want) > TOLERANCE * want]
        if bad:
            l = bad[0]
            from ddlbench import metrics

            raise LinkTooSlow(f"link {l.src} -> {l.dst} measured {l.gbps:.3f} Gbit/s, not within "
                              f"{TOLERANCE:.0%} of link={self.link} ({want / 1e9:.3f} Gbit/s); accepted: a rate this "
                              f"machine's CPUs can carry (measured here: {', '.join(f'{x.gbps:.3f}' for x in links)} Gbit/s)"
                              + (f"; meanwhile the hypervisor gave other guests {self.steal_share:.0%} of this machine's "
                                 f"cores: try again when it is quieter" if metrics.disturbed(self.steal_share) else ""))

    def describe(self, links: list[Link]) -> dict:
        """The run record's `network` block."""
        netem = netem_available()
        return {
            "emulated": True, "link": self.link, "intra_link": self.intra_link,
            "link_gbps": None if self.link_bps is None else self.link_bps / 1e9,
            "measured_gbps": [round(l.gbps, 4) for l in links],
            "measured_goodput_gbps": [round(l.goodput_gbps, 4) for l in links],
            "measured_links": [f"{l.src}->{l.dst}" for l in links],
            "hosts": {h.hostname: h.address for h in self.hosts},
            "topology": f"{len(self.hosts)} hosts, one veth each to bridge {BRIDGE}; tbf at link both ways per host"
                        + (", at intra_link on each host's loopback" if self.intra_link else ""),
            "netem_available": netem,
            "latency": "not emulated (no netem in this kernel)" if not netem else "not emulated (netem not used)",
        }

    def dropped_packets(self) -> int | None:
        """Packets the shaped links have dropped since they were set up (every tbf of these hosts:
        egress, ingress, loopback), or None where tc's statistics cannot be read."""
        shows = [["tc", "-s", "qdisc", "show", "dev", h.veth] for h in self.hosts]
        shows += [[*h.exec_prefix(), "tc", "-s", "qdisc", "show"] for h in self.hosts]
        total = 0
        for argv in shows:
            out = _run(argv, check=False)
            if out.returncode != 0:
                return None
            total += sum(int(part.split(",")[0]) for part in out.stdout.split("dropped ")[1:])
        return total

    def hosts_lines(self) -> str:
        """/etc/hosts lines naming every host, for tools that need names (Slurm, horovodrun), and
        every host's IPv4-mapped IPv6 address too: c10d's TCPStore listens dual-stack and looks
        up each client's name from its ::ffff: address, which glibc does not match to an IPv4
        line (in a namespace, with no DNS to reach, every rank's connection warned "The hostname
        of the client socket cannot be retrieved. err=-3"). That line has a name of its own
        (`MAPPED_SUFFIX`): under the host's name glibc would return each address twice."""
        return "".join(f"{h.address} {h.hostname}\n" for h in self.hosts) + \
            "".join(f"::ffff:{h.address} {h.hostname}{MAPPED_SUFFIX}\n" for h in self.hosts)


# -- shell ---------------------------------------------------------------------------------------
def _run(argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and out.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed: {' '.join(out.stderr.split())[:300]}")
    return out


def tbf_burst_bytes(bps: float) -> int:
    """The bucket of a link at `bps`: at least a 64 KiB GSO frame (two: tbf drops a packet larger
    than its bucket) and 1 ms at the rate. After an idle spell that many bytes pass at once,
    which the predictor models (predict.network.Link.burst_bytes)."""
    return max(65536 * 2, int(bps / 8 / 1000))


# A link's queue holds what several hosts send one host at once. The study's InfiniBand is
# lossless (credit-based flow control: a full port pauses its senders); a tbf queue that overflows
# drops, and TCP at these microsecond round trips recovers from a tail drop by its 200 ms
# retransmission timeout. With a 10 ms queue (125 KB at 100 Mbit/s), BSP-PS on 2 workers lost
# half its throughput to that (43-53 samples/s against 98-100 with this queue): two workers'
# 312 KB pushes into one server's port. How full it gets is bounded by the senders' TCP windows
# (a few MB each), so 32 MiB holds a handful of hosts sending one at once; many more can overflow
# it again. The price: a small message waits behind a full queue (up to seconds at 100 Mbit/s),
# where InfiniBand's small buffers would interleave it.
TBF_QUEUE_BYTES = 32 << 20


def _tbf(dev: str, bps: float, netns: str | None = None) -> None:
    """A token bucket at `bps` on `dev`'s egress (`tbf_burst_bytes` deep) in front of a queue
    of TBF_QUEUE_BYTES, deep enough that incast queues instead of dropping."""
    burst = tbf_burst_bytes(bps)
    where = ["ip", "netns", "exec", netns] if netns else []
    _run([*where, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(bps)}bit",
          "burst", str(burst), "limit", str(TBF_QUEUE_BYTES)])


# -- state ---------------------------------------------------------------------------------------
def _state_file() -> Path:
    return STATE_DIR / "state.json"


def _start_time(pid: int) -> int | None:
    from ddlbench.launch.pids import start_time  # not at the top: this file also runs as a bare script

    return start_time(pid)


def current() -> Cluster | None:
    """The cluster that is up, from its state file, or None."""
    try:
        s = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return None
    return Cluster([host(i) for i in range(s["nodes"])], s["link"], s.get("intra_link"), s.get("owner_pid"))


def owner_alive() -> int | None:
    """The pid of the live run that owns the cluster that is up, or None (interactive, or its
    owner is gone: a crashed run's leftovers)."""
    try:
        s = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return None
    pid = s.get("owner_pid")
    alive = pid and _start_time(pid) is not None and _start_time(pid) == s.get("owner_start")
    return pid if alive else None


def leftovers() -> list[str]:
    """Everything of ours that exists: namespaces, links, UTS files, the state directory."""
    found = [f"netns {n}" for n in _netns_names()]
    found += [f"link {n}" for n in _link_names()]
    if HOSTS_BEGIN in _read(HOSTS_FILE):
        found.append(f"block in {HOSTS_FILE}")
    if STATE_DIR.exists():
        found += [f"file {p}" for p in sorted(STATE_DIR.rglob("*"))] or [f"dir {STATE_DIR}"]
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _set_hosts_block(lines: str) -> None:
    """Replace our block in /etc/hosts with `lines` ("" removes it), in place: /etc/hosts is
    often a bind mount (containers), which a rename would not update."""
    text = _read(HOSTS_FILE)
    if HOSTS_BEGIN in text:
        head, _, rest = text.partition(HOSTS_BEGIN)
        text = head + rest.partition(HOSTS_END)[2].lstrip("\n")
    if lines:
        text = text + ("" if text.endswith("\n") or not text else "\n") + f"{HOSTS_BEGIN}\n{lines}{HOSTS_END}\n"
    with open(HOSTS_FILE, "r+") as f:
        f.write(text)
        f.truncate()


def _netns_names() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.startswith(PREFIX))


def _link_names() -> list[str]:
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return sorted(n for n in names if n.startswith(PREFIX))


# -- up and down ---------------------------------------------------------------------------------
def up(nodes: int, link: str, intra_link: str | None = None, owner_pid: int | None = None) -> Cluster:
    """Bring up `nodes` hosts on one bridge, every link shaped; clears a crashed run's leftovers
    first, refuses while a live run owns a cluster. Checks every value before creating anything.
    A failure half-way removes what was made."""
    check_nodes(nodes)
    bps = check_rate(link, "link")
    intra_bps = check_rate(intra_link, "intra_link") if intra_link is not None else None
    reason = unavailable()
    if reason:
        raise NetnsError(reason)
    busy = owner_alive()
    if busy and busy != owner_pid:
        raise NetnsError(f"an emulated cluster is up for run pid {busy}; accepted: one cluster at a time "
                         f"(wait for it, or end that run)")
    if leftovers():
        down(quiet=True)
    c = Cluster([host(i) for i in range(nodes)], str(link), None if intra_link is None else str(intra_link), owner_pid)
    try:
        (STATE_DIR / "uts").mkdir(parents=True, exist_ok=True)
        _state_file().write_text(json.dumps({"nodes": nodes, "link": c.link, "intra_link": c.intra_link,
                                             "owner_pid": owner_pid,
                                             "owner_start": _start_time(owner_pid) if owner_pid else None}))
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "add", f"{BRIDGE_ADDRESS}/{PREFIX_LEN}", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])
        for h in c.hosts:
            _add_host(h, bps, intra_bps)
        _set_hosts_block(c.hosts_lines())
    except BaseException:
        down(quiet=True)
        raise
    return c


def _add_host(h: Host, bps: float | None, intra_bps: float | None) -> None:
    _run(["ip", "netns", "add", h.netns])
    h.uts_file.touch()
    _run(["unshare", f"--uts={h.uts_file}", "hostname", h.hostname])
    _run(["ip", "link", "add", h.veth, "type", "veth", "peer", "name", IFNAME, "netns", h.netns])
    _run(["ip", "link", "set", h.veth, "master", BRIDGE, "up"])
    ns = ["ip", "-n", h.netns]
    _run([*ns, "addr", "add", f"{h.address}/{PREFIX_LEN}", "dev", IFNAME])
    _run([*ns, "link", "set", IFNAME, "up"])
    _run([*ns, "link", "set", "lo", "up"])
    if bps is not None:
        _tbf(IFNAME, bps, h.netns)  # the host's egress
        _tbf(h.veth, bps)           # its ingress: the bridge's egress into it
    if intra_bps is not None:
        _tbf("lo", intra_bps, h.netns)


def down(quiet: bool = False) -> list[str]:
    """Remove everything of ours: processes left in our namespaces, namespaces (their veth
    ends and qdiscs go with them), links, the /etc/hosts block, UTS files, state. Returns what
    was removed."""
    removed = leftovers()
    for name in _netns_names():
        _kill_inside(name)
        _run(["ip", "netns", "del", name], check=False)
    for name in _link_names():
        _run(["ip", "link", "del", name], check=False)
    if HOSTS_BEGIN in _read(HOSTS_FILE):
        _set_hosts_block("")
    uts = STATE_DIR / "uts"
    if uts.exists():
        for f in uts.iterdir():
            subprocess.run(["umount", str(f)], capture_output=True)
            f.unlink(missing_ok=True)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    left = leftovers()
    if left and not quiet:
        raise NetnsError(f"could not remove {', '.join(left)}")
    return removed


def _kill_inside(netns: str) -> None:
    """SIGKILL whatever still runs in the namespace (a daemon, a rank whose launcher died)."""
    pids = _run(["ip", "netns", "pids", netns], check=False).stdout.split()
    for p in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(p), signal.SIGKILL)


@contextlib.contextmanager
def cluster(nodes: int, link: str, intra_link: str | None = None):
    """A cluster for the block, owned by this process, removed whatever ends the block (an error,
    Ctrl-C, SIGTERM turned into an exception by the launcher's handler)."""
    c = up(nodes, link, intra_link, owner_pid=os.getpid())
    try:
        yield c
    finally:
        down(quiet=True)


# -- measurement ---------------------------------------------------------------------------------
def measure_pair(src: Host, dst: Host, seconds: float = MEASURE_S) -> Link:
    """TCP from `src` to `dst` for MEASURE_WARMUP_S + `seconds`; the rate over the timed window,
    as TCP payload and on the wire (`_frame_ratio`)."""
    me = [sys.executable, str(Path(__file__).resolve())]
    recv = subprocess.Popen([*dst.exec_prefix(), *me, "_recv", dst.address, str(MEASURE_PORT), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    send = None
    try:
        if recv.stdout.readline().strip() != "ready":
            raise NetnsError(f"the bandwidth receiver on {dst.hostname} did not start")
        send = subprocess.Popen([*src.exec_prefix(), *me, "_send", dst.address, str(MEASURE_PORT)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out, _ = recv.communicate(timeout=30 + seconds)
        if recv.returncode != 0:
            raise NetnsError(f"measuring {src.hostname} -> {dst.hostname} failed (receiver exit {recv.returncode})")
        r = json.loads(out)
    finally:
        for p in (send, recv):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    return Link(src.hostname, dst.hostname, r["wire_bps"] / 1e9, r["goodput_bps"] / 1e9)


def _frame_ratio(conn: socket.socket) -> float:
    """Bytes on the wire per byte of TCP payload for full-size segments: an Ethernet frame
    (MTU + 14 bytes of header) carries one MSS of payload (TCP_MAXSEG, less TCP's options).
    tc counts frames, header and all, per segment even for GSO packets, while a received
    byte count through GRO does not: so the wire rate is derived from the payload rate."""
    import fcntl
    import struct

    mss = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
    req = struct.pack("16si", IFNAME.encode(), 0)
    mtu = struct.unpack("16si", fcntl.ioctl(conn.fileno(), 0x8921, req))[1]  # SIOCGIFMTU
    return (mtu + 14) / mss


def _receiver(address: str, port: int, seconds: float) -> None:
    srv = socket.create_server((address, port))
    print("ready", flush=True)
    conn, _ = srv.accept()
    buf = bytearray(1 << 20)
    got = 0
    t_start = time.perf_counter()
    while time.perf_counter() - t_start < MEASURE_WARMUP_S:
        got += conn.recv_into(buf)
    b0, t0 = got, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n = conn.recv_into(buf)
        if not n:
            raise NetnsError("the sender stopped early")
        got += n
    goodput = (got - b0) * 8 / (time.perf_counter() - t0)
    print(json.dumps({"goodput_bps": goodput, "wire_bps": goodput * _frame_ratio(conn)}), flush=True)


def _sender(address: str, port: int) -> None:
    data = bytes(1 << 20)
    with socket.create_connection((address, port)) as s:
        with contextlib.suppress(OSError):
            while True:
                s.sendall(data)


# -- command line --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """`up NODES LINK [INTRA_LINK]`, `down`, `status`, `shell NODE [COMMAND...]`, `measure`."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m ddlbench.launch.netns", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="bring up NODES hosts with links shaped at LINK, and measure them")
    u.add_argument("nodes", type=int)
    u.add_argument("link")
    u.add_argument("intra_link", nargs="?")
    sub.add_parser("down", help="remove every emulated host, link and namespace (a crashed run's too)")
    sub.add_parser("status", help="what is up, and any leftovers")
    sh = sub.add_parser("shell", help="a shell (or COMMAND) on host NODE")
    sh.add_argument("node", type=int)
    sh.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("measure", help="measure every link of the cluster that is up")
    sub.add_parser("_recv").add_argument("args", nargs=3)
    sub.add_parser("_send").add_argument("args", nargs=2)
    a = p.parse_args(argv)
    try:
        if a.cmd == "_recv":
            _receiver(a.args[0], int(a.args[1]), float(a.args[2]))
        elif a.cmd == "_send":
            _sender(a.args[0], int(a.args[1]))
        elif a.cmd == "up":
            c = up(a.nodes, a.link, a.intra_link)
            for h in c.hosts:
                print(f"{h.hostname} {h.address} (netns {h.netns}): python -m ddlbench.launch.netns shell {h.index}")
            _print_links(c)
        elif a.cmd == "down":
            removed = down()
            print(f"removed {len(removed)} object(s)" + (f": {', '.join(removed)}" if removed else ""))
        elif a.cmd == "status":
            c, left = current(), leftovers()
            if c:
                owner = owner_alive()
                print(f"up: {len(c.hosts)} hosts, link={c.link}, intra_link={c.intra_link}, "
                      f"{'owned by run pid ' + str(owner) if owner else 'interactive or orphaned'}")
                for h in c.hosts:
                    print(f"  {h.hostname} {h.address} (netns {h.netns})")
            elif left:
                print(f"leftovers (make cluster-down removes them): {', '.join(left)}")
            else:
                print("no emulated cluster")
        elif a.cmd == "measure":
            c = current()
            if c is None:
                raise NetnsError("no emulated cluster is up; accepted: make cluster-up NODES=... LINK=... first")
            _print_links(c)
        elif a.cmd == "shell":
            c = current()
            if c is None:
                raise NetnsError("no emulated cluster is up; accepted: make cluster-up NODES=... LINK=... first")
            if not 0 <= a.node < len(c.hosts):
                raise BadSetting(f"NODE={a.node} is not a host of the cluster; accepted: 0..{len(c.hosts) - 1}")
            cmd = a.command or [os.environ.get("SHELL", "/bin/bash")]
            os.execvp("nsenter", [*c.hosts[a.node].exec_prefix(), *cmd])
    except NetnsError as exc:
        print(f"ddlbench: error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


def _print_links(c: Cluster) -> None:
    links = c.measure()
    for l in links:
        print(f"  {l.src} -> {l.dst}: {l.gbps:.3f} Gbit/s on the wire, {l.goodput_gbps:.3f} Gbit/s TCP payload")
    try:
        c.check(links)
    except LinkTooSlow as exc:
        print(f"warning: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
