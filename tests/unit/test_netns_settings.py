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
