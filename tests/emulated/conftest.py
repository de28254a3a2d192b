"""The emulated-cluster tier: tests that build hosts as network namespaces (root). They share one
cluster (`emulated_cluster`, three hosts at 300 Mbit/s, brought up once per session), which the
emulated launcher reuses for runs that fit in it (two workers, one PS server), so each test pays
for its runs only. A test that takes the cluster down brings it back."""
import pytest

from ddlbench.launch import netns

LINK = "300mbit"
HOSTS = 3


def pytest_collection_modifyitems(config, items):
    reason = netns.unavailable()
    for item in items:
        if "netns" in item.keywords and reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def emulated_cluster():
    """HOSTS hosts at LINK, interactive (as `make cluster-up`), removed at the end of the session."""
    if netns.owner_alive():
        pytest.skip(f"an emulated cluster is in use by run pid {netns.owner_alive()}")
    up = netns.current()
    if up is not None and up.owner_pid is None:  # someone's `make cluster-up`: one cluster per machine
        pytest.skip(f"an interactive emulated cluster is up ({len(up.hosts)} hosts, link={up.link}); "
                    f"these tests would take it down: `make cluster-down` first")
    c = netns.up(HOSTS, LINK)
    try:
        yield c
    finally:
        netns.down()



@pytest.fixture(scope="session")
def emulated_slurm(emulated_cluster, tmp_path_factory):
    """Slurm across the emulated hosts (tests/cluster/slurm.sh with EMULATED=1): slurmctld on the
    bridge's address, one slurmd per host in its namespaces; yields {"SLURM_CONF": path} for the
    clients. Stopped at the end of the session, every daemon gone."""
    from helpers import slurm_cluster

    with slurm_cluster(tmp_path_factory.mktemp("slurm-emulated"), emulated=True) as conf:
        yield {"SLURM_CONF": str(conf)}
