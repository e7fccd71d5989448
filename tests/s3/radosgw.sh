#!/usr/bin/env bash
# A single-node Ceph cluster with an S3 gateway on 127.0.0.1, brought up from
# nothing in a temporary directory, for the object-store tests and benches.
#
#   radosgw.sh start DIR   start one monitor, one OSD (memstore: data in RAM,
#                          nothing on disk but logs) and radosgw (beast) on a
#                          free port; create a user and the bucket
#                          `shardpoint`; write DIR/env. A leftover DIR is
#                          stopped first. Done when a signed request with the
#                          new user's keys succeeds; each step is retried
#                          until a deadline (RADOSGW_START_TIMEOUT, default
#                          120 s per try). A start that fails (once in CI's
#                          ASan stage under load: the OSD never came up)
#                          says which step and why, prints its logs and is
#                          tried once more from nothing
#   radosgw.sh env DIR     print the exports (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
#                          AWS_SECRET_ACCESS_KEY, AWS_REGION, SHARDPOINT_S3_BUCKET,
#                          and the same gateway's TLS port: SHARDPOINT_S3_HTTPS_ENDPOINT
#                          with its throwaway CA, SHARDPOINT_S3_CA_BUNDLE) for `eval`
#   radosgw.sh stop DIR    stop exactly the processes `start` recorded in
#                          DIR/pids, then remove DIR
#
# Exit status 77 from `start` means the Ceph binaries are absent (ctest skips).
# Needs: ceph-mon, ceph-osd, radosgw, radosgw-admin, ceph (Debian: ceph-mon,
# ceph-osd, radosgw; scripts/setup.sh installs them).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|env|stop DIR" >&2; exit 2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
  [ -d "$dir" ] || return 0
  if [ -f "$dir/pids" ]; then
    # Everything lives in memory and in $dir: no clean shutdown is needed.
    # TERM all, give them a second, then KILL what is left.
    local pids
    pids=$(tac "$dir/pids")
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    for _ in $(seq 10); do
      local alive=0
      for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
      [ "$alive" = 0 ] && break
      sleep 0.1
    done
    for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
  fi
  rm -rf "$dir"
}

# Says why, with the end of every log, and exits 1 (the caller stops DIR).
fail() {
  echo "radosgw.sh: $1; logs in $dir/log:" >&2
  for f in "$dir"/log/*; do echo "== $f" >&2; tail -n 5 "$f" >&2; done
  exit 1
}

print_env() {
  cat "$dir/env"
}

start() {
  for b in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool curl openssl; do
    command -v "$b" >/dev/null || { echo "radosgw.sh: $b not installed (scripts/setup.sh installs it)" >&2; exit 77; }
  done
  local try rc
  for try in 1 2; do
    stop
    set +e
    (set -e; start_once)
    rc=$?
    set -e
    if [ "$rc" = 0 ]; then print_env; return 0; fi
    echo "radosgw.sh: start try $try failed ($rc)" >&2
  done
  stop
  return "$rc"
}

start_once() {
  # Each try has a deadline for the whole start (RADOSGW_START_TIMEOUT, s).
  deadline=$((SECONDS + ${RADOSGW_START_TIMEOUT:-120}))
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  mkdir -p "$dir/run" "$dir/log" "$dir/mon" "$dir/osd0" "$dir/rgw"
  : > "$dir/pids"
  local fsid mon_port rgw_port tls_port conf
  fsid=$(uuidgen)
  mon_port=$(free_port)
  rgw_port=$(free_port)
  tls_port=$(free_port)
  make_tls "$dir/tls"
  conf="$dir/ceph.conf"
  cat > "$conf" <<CONF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$mon_port
public addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
# The monitor refuses to start when its disk has under 5% free (seen on a CI
# disk at 95% with 13 GiB left); this throwaway cluster keeps its data in
# memory (memstore) and its monitor store is a few MB, so the guard is off.
mon data avail crit = 0
mon data avail warn = 0
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = 8589934592
osd data = $dir/osd\$id
mon data = $dir/mon
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port ssl_endpoint=127.0.0.1:$tls_port ssl_certificate=$dir/tls/server.pem ssl_private_key=$dir/tls/server.key
rgw data = $dir/rgw
rgw thread pool size = 64
rgw dns name = localhost
CONF
  export CEPH_CONF="$conf"
  monmaptool --create --clobber --fsid "$fsid" --addv a "[v1:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" -i a -f >>"$dir/log/mon.out" 2>&1 &
  echo $! >> "$dir/pids"
  local osd_uuid
  osd_uuid=$(uuidgen)
  timeout 60 ceph -c "$conf" osd new "$osd_uuid" >/dev/null || fail "ceph osd new failed"
  ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$dir/log/osd.out" 2>&1
  ceph-osd -c "$conf" -i 0 -f >>"$dir/log/osd.out" 2>&1 &
  echo $! >> "$dir/pids"
  radosgw -c "$conf" -n client.rgw -f >>"$dir/log/rgw.out" 2>&1 &
  echo $! >> "$dir/pids"
  # The gateway answers once its pools exist (it creates them on start).
  wait_for "the gateway to answer on port $rgw_port" \
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$rgw_port/" >/dev/null
  local out key secret
  out=$(timeout 60 radosgw-admin -c "$conf" user create --uid=shardpoint --display-name=shardpoint) ||
    fail "radosgw-admin user create failed"
  key=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["keys"][0]["access_key"])' <<<"$out")
  secret=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["keys"][0]["secret_key"])' <<<"$out")
  cat > "$dir/env" <<ENV
export AWS_ENDPOINT_URL=http://127.0.0.1:$rgw_port
export AWS_ACCESS_KEY_ID=$key
export AWS_SECRET_ACCESS_KEY=$secret
export AWS_REGION=us-east-1
export SHARDPOINT_S3_BUCKET=shardpoint
export SHARDPOINT_S3_HTTPS_ENDPOINT=https://127.0.0.1:$tls_port
export SHARDPOINT_S3_CA_BUNDLE=$dir/tls/ca.pem
ENV
  # The bucket every test and bench may use (each also makes its own as it
  # needs), then a signed read of it: the start is done only when a real
  # request with the new user's keys succeeds (a just-created user may be
  # refused for a moment: retried until the deadline).
  wait_for "creating bucket shardpoint (a signed PUT)" \
    signed PUT "http://127.0.0.1:$rgw_port/shardpoint" >/dev/null
  wait_for "listing bucket shardpoint (a signed GET)" \
    signed GET "http://127.0.0.1:$rgw_port/shardpoint?list-type=2" >/dev/null
  wait_for "listing bucket shardpoint over https (the CA given)" \
    signed GET "https://127.0.0.1:$tls_port/shardpoint?list-type=2" --cacert "$dir/tls/ca.pem" >/dev/null
}

# make_tls DIR: a throwaway CA (DIR/ca.pem) and a server certificate it signs
# for 127.0.0.1 and localhost (DIR/server.pem, DIR/server.key): the https://
# port of the same gateway. EC keys: milliseconds to make.
make_tls() {
  mkdir -p "$1"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=shardpoint test CA" -keyout "$1/ca.key" -out "$1/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=127.0.0.1" -keyout "$1/server.key" -out "$1/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$1/ext.cnf"
  openssl x509 -req -in "$1/server.csr" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial \
    -days 2 -extfile "$1/ext.cnf" -out "$1/server.pem" 2>/dev/null
}

# curl METHOD URL signed with the new user's keys ($key, $secret); succeeds on
# HTTP 2xx. (curl signs SigV4 but needs the payload hash given: that of the
# empty body.)
signed() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X "$1" \
    --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "${@:3}" "$2")
  echo "$code"
  [[ "$code" == 2* ]]
}

# wait_for WHAT CMD...: runs CMD every 0.2 s until it succeeds (printing its
# last output) or the try's deadline ($deadline, SECONDS) passes: then fails
# naming WHAT and CMD's last output. A daemon that exits meanwhile (seen under
# load: the OSD aborts on "wrong fsid") fails the try at once.
wait_for() {
  local what=$1 last="" i pid names=(mon osd radosgw)
  shift
  while :; do
    if last=$("$@" 2>&1); then echo "$last"; return 0; fi
    i=0
    while read -r pid; do
      kill -0 "$pid" 2>/dev/null || fail "${names[$i]} (pid $pid) exited while waiting for $what"
      i=$((i + 1))
    done < "$dir/pids"
    [ "$SECONDS" -lt "$deadline" ] ||
      fail "$what did not succeed within ${RADOSGW_START_TIMEOUT:-120} s (last answer: '${last:-none}')"
    sleep 0.2
  done
}

case "$cmd" in
  start) start ;;
  env) print_env ;;
  stop) stop ;;
  *) echo "usage: $0 start|env|stop DIR" >&2; exit 2 ;;
esac
