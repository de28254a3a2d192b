"""ssh between emulated hosts, for the launchers that reach other hosts over ssh (horovodrun -H,
MPICH Hydra's ssh bootstrap), as on a real cluster.

`daemons(hosts)` starts one OpenSSH server per emulated host, inside the host's namespaces
(`netns.Host.exec_prefix`), listening on the host's address only, and stops them when the block
ends, however it ends. Nothing outside the job is read or written: a fresh directory holds a
host key and a client key made for the job, `authorized_keys` admits only that client key, and
`known_hosts` names every host (by name and address) with the job's host key, so the client
checks the server it reaches. The client side is `ssh -F <job config>` behind a wrapper named
`ssh` (`Ssh.bin`): horovodrun calls `ssh` by name (put `Ssh.bin` first on PATH), Hydra takes
`-launcher-exec` and Open MPI `plm_rsh_agent`. Root's ~/.ssh, /etc/ssh and any system sshd are
left alone; the only shared path is sshd's privilege-separation directory (/run/sshd), created
if missing and removed again if this module created it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from . import netns

SSHD = "/usr/sbin/sshd"      # sshd refuses to start unless given by its absolute path
PRIVSEP_DIR = Path("/run/sshd")
PORT = 22                    # every host has its own port space
START_TIMEOUT_S = 10.0
INSTALL = "apt-get install openssh-server openssh-client (as root; launch/install/sshd.sh)"


class SshError(netns.NetnsError):
    """ssh between the emulated hosts cannot be set up; the message is one line."""


def unavailable() -> str | None:
    """Why ssh between emulated hosts cannot run here (one line), or None."""
    missing = [t for t in ("ssh", "ssh-keygen") if shutil.which(t) is None]
    if not os.access(SSHD, os.X_OK):
        missing.insert(0, SSHD)
    return f"ssh between emulated hosts needs {', '.join(missing)}: {INSTALL}" if missing else None


@dataclasses.dataclass(frozen=True)
class Ssh:
    """The client side of a job's ssh: `bin/ssh` runs ssh with the job's config."""
    dir: Path

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    @property
    def exe(self) -> Path:
        return self.bin / "ssh"

    def env(self, env: dict) -> dict:
        """`env` with this job's ssh first on PATH (horovodrun runs `ssh` by name)."""
        return {**env, "PATH": f"{self.bin}{os.pathsep}{env.get('PATH', os.defpath)}"}


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ddlbench-emulated", "-f", str(path)],
                   check=True, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


def _write(d: Path, hosts: list[netns.Host]) -> Ssh:
    """Keys, the server's and the client's configs, and the client wrapper, all under `d`."""
    host_pub = _keygen(d / "host_ed25519")
    client_pub = _keygen(d / "id_ed25519")
    (d / "authorized_keys").write_text(client_pub + "\n")
    key_type, key = host_pub.split()[:2]
    (d / "known_hosts").write_text("".join(f"{h.hostname},{h.address} {key_type} {key}\n" for h in hosts))
    (d / "sshd_config").write_text(
        f"Port {PORT}\nHostKey {d / 'host_ed25519'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nPrintMotd no\nPrintLastLog no\n"
        # the job's files live in a temporary directory, whose modes StrictModes would question
        "StrictModes no\nMaxStartups 100:30:200\nMaxSessions 100\n")
    (d / "ssh_config").write_text(
        f"Host *\n  Port {PORT}\n  User {_user()}\n  IdentityFile {d / 'id_ed25519'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {d / 'known_hosts'}\n  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n  ConnectTimeout 10\n")
    ssh = Ssh(d)
    ssh.bin.mkdir()
    ssh.exe.write_text(f"#!/bin/sh\nexec {shlex.quote(shutil.which('ssh'))} -F {shlex.quote(str(d / 'ssh_config'))} \"$@\"\n")
    ssh.exe.chmod(0o755)
    return ssh


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _listening(address: str) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, PORT), timeout=0.5):
        return True
    return False


@contextlib.contextmanager
def daemons(hosts: list[netns.Host]):
    """An sshd on each host for the block; yields the client side (`Ssh`). The servers and the
    job's keys are gone when the block ends (an error, Ctrl-C, SIGTERM raised by the
    launcher's handler included)."""
    reason = unavailable()
    if reason:
        raise SshError(reason)
    d = Path(tempfile.mkdtemp(prefix="ddlbench-ssh-"))
    made_privsep = not PRIVSEP_DIR.exists()
    procs: list[subprocess.Popen] = []
    try:
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        ssh = _write(d, hosts)
        for h in hosts:
            log = open(d / f"sshd-{h.hostname}.log", "wb")
            procs.append(subprocess.Popen(
                [*h.exec_prefix(), SSHD, "-D", "-e", "-f", str(d / "sshd_config"), "-o", f"ListenAddress={h.address}",
                 "-o", f"PidFile={d / f'sshd-{h.hostname}.pid'}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        for h, p in zip(hosts, procs):
            while not _listening(h.address):
                if p.poll() is not None or time.monotonic() > deadline:
                    tail = (d / f"sshd-{h.hostname}.log").read_text(errors="replace").strip().splitlines()[-1:]
                    raise SshError(f"sshd on {h.hostname} ({h.address}) did not start"
                                   f"{' (exit ' + str(p.returncode) + ')' if p.poll() is not None else ''}: "
                                   f"{tail[0] if tail else 'no output'}")
                time.sleep(0.05)
        yield ssh
    finally:
        stop(procs, hosts)
        shutil.rmtree(d, ignore_errors=True)
        if made_privsep:
            with contextlib.suppress(OSError):
                PRIVSEP_DIR.rmdir()


def stop(procs: list[subprocess.Popen], hosts: list[netns.Host]) -> None:
    """SIGTERM each listener, then SIGKILL; then every sshd process still in the hosts' network
    namespaces: a connection's server process runs in a session of its own, which outlives
    its listener while the client keeps the connection open."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in procs if p.poll() is None]
        for p in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
        for p in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=2)
    for h in hosts:
        for pid in servers_in(h):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def servers_in(host: netns.Host) -> list[int]:
    """Pids of the sshd processes (listeners and connections) in the host's network namespace."""
    out = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split()
    found = []
    for pid in out:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/exe") == SSHD:
                found.append(int(pid))
    return found
