"""The emulated network itself (launch/netns.py): hosts with their own names and addresses, links
shaped and measured within 5% of the set rate, and nothing left behind, even after a crash."""
import signal
import subprocess
import sys
import textwrap

import pytest

from ddlbench.launch import netns

pytestmark = pytest.mark.netns


def restore(c) -> None:
    """The session's cluster again, after a test that took it down."""
    netns.up(len(c.hosts), c.link)


def run_on(host, *cmd) -> str:
    return subprocess.run([*host.exec_prefix(), *cmd], capture_output=True, text=True, check=True).stdout.strip()


def test_hosts_have_their_own_names_addresses_and_nothing_routes_out(emulated_cluster):
    h0, h1 = emulated_cluster.hosts[:2]
    assert run_on(h0, "hostname") == h0.hostname != run_on(h1, "hostname") == h1.hostname
    assert h0.address in run_on(h0, "ip", "-o", "addr", "show", "dev", netns.IFNAME)
    routes = run_on(h0, "ip", "route", "show")
    assert "default" not in routes and routes.startswith(f"{netns.SUBNET}.0/{netns.PREFIX_LEN}")
    # host to host over the bridge: h1 connects to a socket h0 listens on, at h0's address
    server = subprocess.Popen([*h0.exec_prefix(), sys.executable, "-c",
                               f"import socket; s = socket.create_server(({h0.address!r}, 7000)); print(1, flush=True); "
                               f"s.accept()[0].sendall(socket.gethostname().encode())"], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "1"
    got = run_on(h1, sys.executable, "-c", f"import socket; print(socket.create_connection(({h0.address!r}, 7000)).recv(99).decode())")
    assert got == h0.hostname and server.wait(timeout=10) == 0
    # a dual-stack server (c10d's TCPStore) sees a peer at its IPv4-mapped address: named too,
    # and a host's name still resolves to its one address, once
    for peer in (h0, h1):
        assert run_on(h0, sys.executable, "-c", f"import socket; print(socket.getnameinfo(('::ffff:{peer.address}', 0), "
                                                f"socket.NI_NAMEREQD)[0])") == peer.hostname + netns.MAPPED_SUFFIX
        assert run_on(h0, sys.executable, "-c", f"import socket; print(socket.gethostbyname_ex({peer.hostname!r})[2])") \
            == str([peer.address])


def test_links_are_shaped_and_measured_within_tolerance(emulated_cluster):
    links = emulated_cluster.measure()
    names = [h.hostname for h in emulated_cluster.hosts]
    assert [(l.src, l.dst) for l in links] == list(zip(names, names[1:] + names[:1]))  # every egress and ingress once
    want = netns.check_rate(emulated_cluster.link) / 1e9
    for l in links:
        assert abs(l.gbps - want) <= 0.05 * want, links
        assert l.goodput_gbps < l.gbps  # headers ride the wire too
    emulated_cluster.check(links)
    block = emulated_cluster.describe(links)
    assert block["emulated"] is True and block["measured_gbps"] == [round(l.gbps, 4) for l in links]
    assert block["netem_available"] is netns.netem_available() and "not emulated" in block["latency"]


def test_incast_queues_at_a_port_and_drops_nothing(emulated_cluster):
    """Two hosts send 4 MB each to a third at once, as workers push to one PS server: the third
    host's port (the tbf on the bridge side of its veth) queues the excess and drops nothing. A
    10 ms queue (375 KB at 300 Mbit/s) dropped here, and TCP then waited out its 200 ms
    retransmission timeout: BSP-PS at 100 Mbit/s ran at half its rate."""
    h0, h1, h2 = emulated_cluster.hosts[:3]
    nbytes = 4_000_000

    def dropped() -> int:
        out = subprocess.run(["tc", "-s", "qdisc", "show", "dev", h2.veth], capture_output=True, text=True,
                             check=True).stdout
        return int(out.split("dropped ")[1].split(",")[0])

    before = dropped()
    # the sink lets both senders go only once both are connected, so their flows overlap
    sink = subprocess.Popen([*h2.exec_prefix(), sys.executable, "-c", textwrap.dedent(f"""
        import socket, threading
        s = socket.create_server(({h2.address!r}, 7001), backlog=2)
        print(1, flush=True)
        conns = [s.accept()[0] for _ in range(2)]
        def drain(c):
            got = 0
            while got < {nbytes}:
                n = len(c.recv(1 << 20))
                if not n:
                    raise SystemExit("a sender closed early")
                got += n
        ts = [threading.Thread(target=drain, args=(c,)) for c in conns]
        [t.start() for t in ts]
        [c.sendall(b"g") for c in conns]
        [t.join() for t in ts]
    """)], stdout=subprocess.PIPE, text=True)
    assert sink.stdout.readline().strip() == "1"
    send = (f"import socket; c = socket.create_connection(({h2.address!r}, 7001)); "
            f"assert c.recv(1) == b'g'; c.sendall(bytes({nbytes}))")
    senders = [subprocess.Popen([*h.exec_prefix(), sys.executable, "-c", send]) for h in (h0, h1)]
    try:
        assert [p.wait(timeout=60) for p in senders] == [0, 0] and sink.wait(timeout=60) == 0
    finally:
        for p in [*senders, sink]:
            if p.poll() is None:
                p.kill()
    assert dropped() == before


def test_a_link_below_the_set_rate_is_refused(emulated_cluster):
    slow = netns.Cluster(emulated_cluster.hosts, "3gbit")  # the wire is tbf'd to 300mbit
    with pytest.raises(netns.LinkTooSlow, match=r"not within 5% of link=3gbit"):
        slow.check(emulated_cluster.measure())


def test_a_crashed_owners_leftovers_are_cleared_by_the_next_up_and_down_leaves_nothing(emulated_cluster):
    """A run that brought up its cluster and was SIGKILLed leaves namespaces behind; the next
    `up` finds them by the prefix, sees the owner is dead, and clears them; `down` then leaves
    `ip netns list` and `ip link` as they were. (Uses the session's cluster slot: it is brought
    back up at the end.)"""
    before_ns = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
                 if n and not n.startswith(netns.PREFIX)]
    netns.down()
    crasher = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, signal
        from ddlbench.launch import netns
        netns.up(3, "1gbit", owner_pid=os.getpid())
        print("up", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)], stdout=subprocess.PIPE, text=True)
    assert crasher.stdout.readline().strip() == "up"
    crasher.wait()
    try:
        left = netns.leftovers()
        assert "netns ddlb-h2" in left and "link ddlb-br" in left and netns.owner_alive() is None
        c = netns.up(2, emulated_cluster.link)
        assert [h.hostname for h in c.hosts] == ["ddlb-node0", "ddlb-node1"] and "netns ddlb-h2" not in netns.leftovers()
        assert "ddlb-node1" in open(netns.HOSTS_FILE).read()
        netns.down()
        assert netns.leftovers() == [] and netns.HOSTS_BEGIN not in open(netns.HOSTS_FILE).read()
        after_ns = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n") if n]
        assert after_ns == before_ns
        assert not [l for l in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
                    if netns.PREFIX in l]
    finally:
        restore(emulated_cluster)  # the session's cluster, for the tests after this one


def test_a_live_runs_cluster_is_not_taken(emulated_cluster):
    netns.down()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        netns.up(2, emulated_cluster.link, owner_pid=owner.pid)
        with pytest.raises(netns.NetnsError, match=f"up for run pid {owner.pid}"):
            netns.up(2, emulated_cluster.link)
    finally:
        owner.kill()
        owner.wait()
        restore(emulated_cluster)  # owner dead: its cluster is leftovers, replaced
    assert netns.owner_alive() is None


def test_processes_left_in_a_host_are_killed_on_down(emulated_cluster):
    netns.down()
    c = netns.up(1, "none")
    daemon = subprocess.Popen([*c.hosts[0].exec_prefix(), "sleep", "300"])
    try:
        netns.down()
        assert daemon.wait(timeout=10) == -signal.SIGKILL
    finally:
        if daemon.poll() is None:
            daemon.kill()
        restore(emulated_cluster)
