"""horovodrun launcher (engine=horovod): Horovod's own Gloo rendezvous starts every rank,
supervised like the local launcher."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ddlbench.config import ConfigError


def command(cfg, run_dir: Path, env: dict) -> list[str]:
    exe = shutil.which("horovodrun", path=str(Path(sys.executable).parent)) or shutil.which("horovodrun")
    if exe is None:
        from ddlbench.engines import INSTALL_HOROVOD

        raise ConfigError(f"launcher=horovodrun: horovodrun is not installed; {INSTALL_HOROVOD}")
    n = cfg.workers + cfg.servers
    hosts = cfg.launcher.hosts or f"localhost:{n}"
    cmd = [exe, "-np", str(n), "-H", hosts, "--gloo", "--gloo-timeout-seconds", str(int(cfg.comm_timeout_s))]
    nic = cfg.launcher.network_interface or ("lo" if not cfg.launcher.hosts else None)
    if nic:
        cmd += ["--network-interface", nic]
    return cmd + list(cfg.launcher.extra_args) + [sys.executable, "-m", "ddlbench.launch.worker", str(run_dir)]
