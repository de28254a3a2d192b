"""How ranks start across emulated hosts (launcher.via), checked before anything starts, and the
host lists the multi-host launchers get. No root needed."""
import pytest

from ddlbench import config
from ddlbench.config import ConfigError
from ddlbench.engines import horovod_available
from ddlbench.launch import emulated, mpirun, netns, slurm


def compose(*overrides):
    return config.resolve(config._compose([*overrides]))


def test_an_unknown_via_is_one_line_naming_the_accepted_ones():
    with pytest.raises(ConfigError, match=r"^launcher.via='ssh' is invalid; accepted: auto, torchrun, horovodrun, mpirun$"):
        compose("launcher=emulated", "launcher.via=ssh")


def test_horovodrun_starts_horovod_jobs_only():
    with pytest.raises(ConfigError, match=r"launcher.via=horovodrun starts Horovod jobs; accepted with engine=horovod only"):
        compose("launcher=emulated", "launcher.via=horovodrun")


@pytest.mark.skipif(not horovod_available()[0], reason=str(horovod_available()[1]))
def test_horovod_ranks_are_not_started_by_torchrun():
    with pytest.raises(ConfigError, match=r"launcher.via=torchrun with engine=horovod"):
        compose("launcher=emulated", "engine=horovod", "method=bsp-a2a", "launcher.via=torchrun")


def test_host_slots_follow_the_plan_host_by_host():
    assert slurm.host_slots(["a", "b", "c"], [2, 2, 1]) == "a:2,b:2,c:1"


def test_hydra_gets_the_hosts_and_the_ssh_to_reach_them(tmp_path):
    cfg = compose("launcher=mpirun", "method=bsp-ps", "workers=2", "servers=1")
    if mpirun.flavour(mpirun.executable(cfg)) != "mpich":
        pytest.skip("the mpiexec here is not MPICH's Hydra")
    env = {}
    cmd = mpirun.command(cfg, tmp_path, env, hosts="h0:1,h1:1,h2:1", ssh="/tmp/x/bin/ssh")
    assert cmd[1:3] == ["-n", "3"] and cmd[cmd.index("-hosts") + 1] == "h0:1,h1:1,h2:1"
    assert cmd[cmd.index("-launcher") + 1] == "ssh" and cmd[cmd.index("-launcher-exec") + 1] == "/tmp/x/bin/ssh"
    assert env["MASTER_ADDR"] == "h0"  # torch.distributed meets at the first host


@pytest.mark.skipif(not horovod_available()[0], reason=str(horovod_available()[1]))
def test_horovodrun_goes_over_eth0_across_hosts_and_over_loopback_on_one(tmp_path):
    """On one host horovodrun refuses any interface but loopback ("No interface is found for
    address 127.0.0.1"): `make reproduce CLUSTER=emulated ENGINE=horovod` failed its one-worker
    baseline that way."""
    def line(workers):
        cfg = config._compose(["launcher=emulated", "engine=horovod", "method=bsp-a2a", f"workers={workers}", "servers=0"])
        emulated._check_via(cfg)
        return emulated.ssh_launch_command(cfg, [netns.host(i) for i in range(workers)], tmp_path, {}, "/x/ssh")

    two, one = line(2), line(1)
    assert two[two.index("-H") + 1] == "ddlb-node0:1,ddlb-node1:1" and two[two.index("--network-interface") + 1] == "eth0"
    assert one[one.index("-H") + 1] == "localhost:1" and one[one.index("--network-interface") + 1] == "lo"
