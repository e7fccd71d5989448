#!/usr/bin/env bash
# A real network filesystem on loopback, for the benchmarks (docs/performance.md
# lists it; its runs: bench/results/history.md#a-real-network-filesystem-sshfs-on-loopback): an sshd of its own on
# 127.0.0.1 serves EXPORT over SFTP and sshfs (FUSE) mounts it at MOUNT. Every
# read, write, fsync and rename is a request over a TCP connection, answered by
# the server process, as on NFS; the kernel's page cache sits on the client side.
#
#   scripts/sshfs_mount.sh up EXPORT MOUNT [PORT=22922]
#   scripts/sshfs_mount.sh down MOUNT
#
# Needs root (FUSE mount, sshd), /dev/fuse, and the Debian packages sshfs and
# openssh-server (apt-get install -y sshfs openssh-server). Keys, config and
# the server's pid live in MOUNT.sshd/ next to the mount point, removed by down.
# The cipher is aes128-gcm (AES-NI), compression off, so that the link costs
# little CPU beside the two cores' other work.
set -euo pipefail

die() { echo "sshfs_mount: $*" >&2; exit 1; }

up() {
  local export=$1 mount=$2 port=${3:-22922}
  local state="${mount%/}.sshd"
  command -v sshfs >/dev/null || die "sshfs is not installed (apt-get install -y sshfs)"
  [ -x /usr/sbin/sshd ] || die "sshd is not installed (apt-get install -y openssh-server)"
  [ -e /dev/fuse ] || die "/dev/fuse is missing: this kernel cannot mount FUSE filesystems"
  mountpoint -q "$mount" && die "$mount is already a mount point"
  mkdir -p "$export" "$mount" /run/sshd
  rm -rf "$state" && mkdir -m 700 "$state"
  ssh-keygen -q -t ed25519 -N '' -f "$state/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$state/client_key"
  cp "$state/client_key.pub" "$state/authorized_keys"
  cat > "$state/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $state/host_key
PidFile $state/sshd.pid
AuthorizedKeysFile $state/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
EOF
  /usr/sbin/sshd -f "$state/sshd_config" -E "$state/sshd.log" ||
    die "sshd did not start (port $port taken? see $state/sshd.log)"
  for _ in $(seq 50); do [ -s "$state/sshd.pid" ] && break; sleep 0.1; done
  sshfs -p "$port" \
    -o "IdentityFile=$state/client_key,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null" \
    -o "Ciphers=aes128-gcm@openssh.com,Compression=no,LogLevel=ERROR" \
    "root@127.0.0.1:$(realpath "$export")" "$mount" ||
    { kill "$(cat "$state/sshd.pid")" 2>/dev/null || true; die "sshfs mount failed"; }
  echo "sshfs_mount: $export served over SFTP on 127.0.0.1:$port, mounted at $mount"
}

down() {
  local mount=$1
  local state="${mount%/}.sshd"
  if mountpoint -q "$mount"; then fusermount3 -u "$mount" 2>/dev/null || umount "$mount"; fi
  if [ -s "$state/sshd.pid" ]; then kill "$(cat "$state/sshd.pid")" 2>/dev/null || true; fi
  rm -rf "$state"
}

case "${1:-}" in
  up) [ $# -ge 3 ] || die "usage: $0 up EXPORT MOUNT [PORT]"; up "$2" "$3" "${4:-22922}" ;;
  down) [ $# -eq 2 ] || die "usage: $0 down MOUNT"; down "$2" ;;
  *) die "usage: $0 up EXPORT MOUNT [PORT] | down MOUNT" ;;
esac
