"""The predictor's network model: alpha/beta from two points, collectives, configs."""
import math

import pytest

from ddlbench.predict import network
from ddlbench.predict.network import Cluster, Link


def test_two_points_give_alpha_beta_by_hand():
    # 1000 B in 1 us (8 Gb/s) and 2000 B in 1.5 us (10.667 Gb/s): beta = 0.5 us / 1000 B, alpha = 0.5 us
    link = Link.from_points((1000, 8.0), (2000, 16 / 1.5))
    assert link.beta_s_per_byte == pytest.approx(5e-10)
    assert link.alpha_s == pytest.approx(5e-7)
    assert link.time_s(1000) == pytest.approx(1e-6)


def test_the_studys_infiniband_points():
    # 16 KiB at 16.7 Gb/s = 7.85 us (the study's own figure); 1 MiB at 83.2 Gb/s = 100.8 us
    link = network.load("100gbib").inter
    assert link.time_s(16384) == pytest.approx(7.85e-6, rel=1e-3)
    assert link.time_s(1 << 20) == pytest.approx(8 * (1 << 20) / 83.2e9)
    assert link.alpha_s == pytest.approx(6.37e-6, rel=1e-2)
    assert link.gbps == pytest.approx(88.8, rel=1e-2)


def test_points_that_are_not_a_line_are_refused():
    with pytest.raises(ValueError, match="second message larger"):
        Link.from_points((2000, 8.0), (1000, 8.0))
    with pytest.raises(ValueError, match="alpha >= 0"):
        Link.from_points((1000, 1.0), (2000, 100.0))  # faster for the larger: negative alpha


def test_a_fitted_allreduce_becomes_a_per_link_model():
    # 4 ranks: t = 6 alpha + 1.5 n beta
    link = Link.from_allreduce(6e-6, 1.5e-10, 4)
    assert (link.alpha_s, link.beta_s_per_byte) == (pytest.approx(1e-6), pytest.approx(1e-10))


def node(g=4, inter=None):
    return Cluster("toy", intra=Link(1e-6, 1e-9), inter=inter, gpus_per_node=g)


def test_ring_inside_one_node_by_hand():
    # 4 ranks, 4000 B: 2 * 3 steps of (1 us + 1000 B * 1 ns)
    assert node().ring_allreduce_s(4000, 4) == pytest.approx(12e-6)
    assert node().allreduce_s(4000, 1) == 0.0


def test_ring_across_nodes_runs_at_the_slowest_link():
    c = node(g=2, inter=Link(5e-6, 2e-9))
    # 4 ranks on 2 nodes: 6 steps of max(1 us + 1 us, 5 us + 2 us)
    assert c.ring_allreduce_s(4000, 4) == pytest.approx(6 * 7e-6)


def test_tree_between_nodes_by_hand_and_nccl_takes_the_faster():
    c = node(g=2, inter=Link(5e-6, 2e-9))
    # 2 nodes: latency 2 * (1 * 5 us + 1 * 1 us); bandwidth 2 * 4000 B * 2 ns
    assert c.tree_allreduce_s(4000, 4) == pytest.approx(12e-6 + 16e-6)
    assert c.allreduce_s(4000, 4) == min(c.ring_allreduce_s(4000, 4), c.tree_allreduce_s(4000, 4))
    assert math.isinf(node().tree_allreduce_s(4000, 4))  # one node: no tree


def test_hierarchical_by_hand():
    c = node(g=2, inter=Link(5e-6, 2e-9))
    inside = 2 * (1 * (1e-6 + 2000 * 1e-9) + 1e-9 * 2000)  # reduce and broadcast, each with its copy
    leaders = 2 * 1 * (5e-6 + 2000 * 2e-9)
    assert c.hierarchical_allreduce_s(4000, 4) == pytest.approx(inside + leaders)


def test_one_node_network_refuses_more_workers():
    with pytest.raises(ValueError, match="accepted: 1..4"):
        network.load("pcie3x16").nodes(8)


def test_every_network_config_loads():
    for name in network.names():
        c = network.load(name)
        assert c.gpus_per_node >= 1 and (c.inter or c.intra)
    with pytest.raises(ValueError, match="accepted: .*100gbib"):
        network.load("nonesuch")


def test_an_emulated_network_at_any_tc_rate_takes_the_rate_and_this_machines_alpha(tmp_path):
    (tmp_path / "loopback.yaml").write_text("name: loopback\ninter: {alpha_s: 2.0e-4, beta_s_per_byte: 1.0e-9}\n")
    c = network.load("emulated-300mbit", tmp_path)
    assert c.name == "emulated-300mbit" and c.gpus_per_node == 1
    assert c.inter.alpha_s == 2.0e-4  # the software stack's, unchanged by the namespaces (no netem)
    assert c.inter.beta_s_per_byte == pytest.approx(8 / 300e6)
    assert c.inter.time_s(1_000_000) == pytest.approx(2.0e-4 + 8e6 / 300e6)
    with pytest.raises(ValueError, match="'fast' is not a rate tc understands"):
        network.load("emulated-fast", tmp_path)
