#!/usr/bin/env bash
# Install OpenSSH's server and client (Debian/Ubuntu, as root), for horovodrun and mpirun across
# an emulated cluster's hosts (launch/sshd.py starts one sshd per host for a launch, with keys of
# its own; ddlbench starts and configures no system sshd, though on a machine run by systemd
# Debian's package enables and starts one itself). Exit 3: it cannot be installed here (said why).
set -euo pipefail
if [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then exit 0; fi
[ "$(id -u)" = 0 ] || { echo "sshd.sh: installing openssh-server needs root" >&2; exit 3; }
command -v apt-get >/dev/null || { echo "sshd.sh: installing openssh-server needs apt-get" >&2; exit 3; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null && apt-get install -y -qq openssh-server openssh-client >/dev/null
