#!/usr/bin/env bash
# Installs every Debian package shardpoint needs. Idempotent: skips apt when
# everything is already installed.
set -euo pipefail
PKGS=(build-essential cmake g++ libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev
      nlohmann-json3-dev libcli11-dev libopenmpi-dev openmpi-bin libmpich-dev mpich
      pybind11-dev python3-dev python3-setuptools python3-wheel python3-venv python3-pip
      python3-build pkg-config dpkg-dev
      python3-numpy python3-torch python3-mpi4py python3-pytest fio clang-format
      sshfs openssh-server  # sshfs + sshd: python/tests/test_network_fs.py mounts a loopback sshfs
      mypy                  # python/tests/test_typing.py type-checks the package and a user script
      ccache                # scripts/test.sh: the pip and MPICH builds reuse the main build's objects
      libcurl4-openssl-dev libssl-dev  # the S3 client (src/objstore): HTTP and SigV4's HMAC-SHA256
      ceph-mon ceph-osd radosgw        # tests/s3/radosgw.sh: a real S3 server (Ceph radosgw) for the tests
      curl                             # tests/s3/radosgw.sh makes the test bucket; bench/s3_bench.py's raw-curl peer
      openssl                          # tests/s3/radosgw.sh: the throwaway CA and certificate of the https port
      python3-boto3 s3cmd)             # bench/s3_bench.py: the peers shardpoint is measured against
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
