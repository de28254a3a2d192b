"""Settings of the emulated network, checked before anything is created: tc's rate units, node
counts in the project's address range. No root needed."""
import pytest

from ddlbench.launch import netns


@pytest.mark.parametrize("text, bps", [("1gbit", 1e9), ("300mbit", 3e8), ("125mbps", 1e9), ("1.5gbit", 1.5e9),
                                       ("1e9", 1e9), ("1000", 1000.0), ("1mibit", 1024 ** 2), ("none", None)])
def test_rates_in_tcs_units(text, bps):
    assert netns.check_rate(text) == bps


@pytest.mark.parametrize("text", ["fast", "1 gbit", "1gb", "-1mbit", "0mbit", "", "gbit"])
def test_a_rate_tc_does_not_understand_is_one_line_naming_the_units(text):
    with pytest.raises(netns.BadSetting) as exc:
        netns.check_rate(text)
    msg = str(exc.value)
    assert "\n" not in msg and repr(text) in msg and "mbit" in msg and "none" in msg


@pytest.mark.parametrize("nodes", [0, -1, netns.MAX_HOSTS + 1, 2.0, True, "2"])
def test_node_counts_outside_the_address_range(nodes):
    with pytest.raises(netns.BadSetting, match=rf"nodes={nodes!r} is invalid; accepted: an integer 1\.\.{netns.MAX_HOSTS}"):
        netns.check_nodes(nodes)


def test_bad_values_fail_before_anything_is_created(monkeypatch):
    created = []
    monkeypatch.setattr(netns, "_run", lambda argv, **kw: created.append(argv))
    for args in ((2, "fast"), (0, "1gbit"), (2, "1gbit", "slow")):
        with pytest.raises(netns.BadSetting):
            netns.up(*args)
    assert created == []


def test_host_addresses_are_the_projects_own():
    hosts = [netns.host(i) for i in (0, 1, netns.MAX_HOSTS - 1)]
    assert [h.address for h in hosts] == ["198.18.213.10", "198.18.213.11", "198.18.213.253"]
    assert all(h.netns.startswith(netns.PREFIX) and len(h.veth) <= 15 for h in hosts)  # IFNAMSIZ


def _check(overrides, monkeypatch, reason=None):
    from ddlbench.config import _compose, resolve

    monkeypatch.setattr(netns, "unavailable", lambda: reason)
    return resolve(_compose(["launcher=emulated", *overrides]))


@pytest.mark.parametrize("overrides, message", [
    (["launcher.link=fast"], "launcher.link='fast' is not a rate tc understands; accepted: "),
    (["launcher.intra_link=1 gbit"], "launcher.intra_link='1 gbit' is not a rate tc understands"),
    (["launcher.nodes=0"], "launcher.nodes=0 is invalid; accepted: an integer >= 1"),
    (["workers=4", "launcher.nodes=2"], "workers=4 at launcher.workers_per_node=1 need 4 worker hosts, but launcher.nodes=2"),
])
def test_emulated_settings_fail_in_one_line_before_anything_starts(overrides, message, monkeypatch):
    from ddlbench.config import ConfigError

    with pytest.raises(ConfigError) as exc:
        _check(overrides, monkeypatch)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_without_root_the_emulated_launcher_says_why_in_one_line(monkeypatch):
    from ddlbench.config import ConfigError

    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match=r"^launcher=emulated: the emulated cluster needs root .* uid 1000"):
        _check([], monkeypatch, reason=netns.unavailable())


def test_ps_servers_get_hosts_of_their_own_as_under_slurm(monkeypatch):
    from ddlbench.launch import emulated, slurm

    cfg = _check(["method=bsp-ps", "workers=4", "launcher.nodes=2", "launcher.workers_per_node=2"], monkeypatch)
    assert cfg.servers == 2 and slurm.plan(cfg) == [2, 2, 1, 1] and emulated.hosts_needed(cfg) == 4


def test_with_gpus_each_worker_host_sees_a_slice_of_its_own_and_server_hosts_none(monkeypatch):
    """The hosts share this machine's GPUs: two hosts of two workers on GPUs 0-3 (or on the
    user's CUDA_VISIBLE_DEVICES), and the PS servers' hosts without a GPU, not past the last one."""
    from ddlbench.launch import emulated

    cfg = _check(["method=bsp-ps", "workers=4", "launcher.nodes=2", "launcher.workers_per_node=2"], monkeypatch)
    cfg.device = "cuda"
    hosts = [netns.host(i) for i in range(4)]
    seen = [emulated.node_env(cfg, h, i, {}, gpus=4)["CUDA_VISIBLE_DEVICES"] for i, h in enumerate(hosts)]
    assert seen == ["0,1", "2,3", "", ""]
    user = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert [emulated.node_env(cfg, h, i, user, gpus=4)["CUDA_VISIBLE_DEVICES"] for i, h in enumerate(hosts[:2])] == \
        ["4,5", "6,7"]


def test_a_link_refused_while_the_hypervisor_stole_the_cores_says_so():
    """A link below its set rate is refused either way; where the machine lost at least
    metrics.DISTURBED_STEAL_SHARE of its cores to other guests while the links were measured
    (`Cluster.steal_share`, kept by `measure`), the error says that too (be45: every 1 Gbit/s
    run refused at 0.88-0.95 Gbit/s while 13% of the cores were stolen)."""
    slow = [netns.Link("ddlb-node0", "ddlb-node1", 0.92, 0.9)]
    cluster = netns.Cluster([], "1gbit", steal_share=0.13)
    with pytest.raises(netns.LinkTooSlow, match=r"not within 5% of link=1gbit.*other guests 13% of this machine's "
                                                r"cores: try again when it is quieter"):
        cluster.check(slow)
    with pytest.raises(netns.LinkTooSlow) as quiet:
        netns.Cluster([], "1gbit", steal_share=0.02).check(slow)
    assert "other guests" not in str(quiet.value)
    netns.Cluster([], "1gbit", steal_share=0.5).check([netns.Link("a", "b", 0.99, 0.98)])  # within: no error
