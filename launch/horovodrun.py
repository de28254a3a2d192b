"""horovodrun launcher (engine=horovod): Horovod's own Gloo rendezvous starts every rank,
supervised like the local launcher."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ddlbench.config import ConfigError


def executable() -> str | None:
    """horovodrun next to this Python (where `make horovod` installs it), else on PATH."""
    return shutil.which("horovodrun", path=str(Path(sys.executable).parent)) or shutil.which("horovodrun")


def argv(n: int, hosts: str | None, network_interface: str | None, timeout_s: float | None = None) -> list[str]:
    """`horovodrun` over Gloo for n ranks; on this host alone (no hosts) over loopback."""
    exe = executable()
    if exe is None:
        from ddlbench.engines import INSTALL_HOROVOD

        raise ConfigError(f"launcher=horovodrun: horovodrun is not installed; {INSTALL_HOROVOD}")
    cmd = [exe, "-np", str(n), "-H", hosts or f"localhost:{n}", "--gloo"]
    if timeout_s is not None:
        cmd += ["--gloo-timeout-seconds", str(int(timeout_s))]
    nic = network_interface or (None if hosts else "lo")
    return cmd + (["--network-interface", nic] if nic else [])


def command(cfg, run_dir: Path, env: dict) -> list[str]:
    from . import worker_command

    L = cfg.launcher
    return argv(cfg.workers + cfg.servers, L.get("hosts"), L.get("network_interface"), cfg.comm_timeout_s) + \
        list(L.get("extra_args", [])) + worker_command(run_dir)
