#!/usr/bin/env bash
# Storage benchmark (not a test), against a private versitygw on loopback:
#   (a) a 1 GiB already-gzipped file: autocapture's storage path (bench/s3put:
#       sniff → pass through → hash → multipart, 8 MiB parts × 4) vs
#       `rclone copy` (Debian rclone: its defaults, 5 MiB chunks × 4, and with
#       8 MiB chunks and no MD5 pass, like for like) to the same bucket: wall time and peak RSS (getrusage of the child) side by side;
#   (b) 1 GiB of generated Chrome-trace-like JSON through the storage path with
#       compression gzip, zstd and none: bytes stored and wall time.
# Prints one table. Needs versitygw (scripts/install-tools.sh) and rclone
# (apt-get install rclone). Everything it writes goes to one temporary folder
# (about 3.2 GiB at the peak), removed on exit, as is the server it started.
#
# Usage: bench/storage.sh [size in MiB (1024)]
set -euo pipefail
cd "$(dirname "$0")/.."

MIB=${1:-1024}
TOOLS="${AUTOCAPTURE_TOOLS:-$HOME/.cache/autocapture-tools}"
VGW="$TOOLS/bin/versitygw"
[ -x "$VGW" ] || { echo "versitygw not installed: run scripts/install-tools.sh" >&2; exit 1; }
command -v rclone >/dev/null || { echo "rclone not installed: apt-get install -y rclone" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/autocapture-storage-bench-XXXXXX")
vgw_pid=""
cleanup() {
  if [ -n "$vgw_pid" ]; then kill "$vgw_pid" 2>/dev/null || true; wait "$vgw_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# measure CMD…: runs it, prints "<wall seconds> <peak RSS MiB>" of the child on fd 3.
measure() {
  python3 - "$@" 3>&1 1>&2 <<'PY'
import os, resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
wall = time.monotonic() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
if rc:
    sys.exit(rc)
os.write(3, f"{wall:.2f} {rss:.0f}\n".encode())
PY
}

echo "building bench/s3put…" >&2
go build -o "$work/s3put" ./bench/s3put

port=$(free_port)
endpoint="http://127.0.0.1:$port"
export AWS_ACCESS_KEY_ID="bench$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export AWS_SECRET_ACCESS_KEY="$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')"
mkdir -p "$work/vgw"
ROOT_ACCESS_KEY=$AWS_ACCESS_KEY_ID ROOT_SECRET_KEY=$AWS_SECRET_ACCESS_KEY \
  "$VGW" --port "127.0.0.1:$port" --health /health posix "$work/vgw" >"$work/vgw.log" 2>&1 &
vgw_pid=$!
for _ in $(seq 1 100); do curl -fs -o /dev/null "$endpoint/health" && break; sleep 0.1; done

# rclone talks to versitygw with these (no config file).
export RCLONE_CONFIG_VGW_TYPE=s3 RCLONE_CONFIG_VGW_PROVIDER=Other RCLONE_CONFIG_VGW_ENDPOINT=$endpoint \
  RCLONE_CONFIG_VGW_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID RCLONE_CONFIG_VGW_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \
  RCLONE_CONFIG_VGW_FORCE_PATH_STYLE=true RCLONE_CONFIG_VGW_REGION=us-east-1
# rclone 1.60's SDK fails on an AWS_CA_BUNDLE with its own transport
# ("unable to load custom CA bundle"): loopback http needs none.
rclone() { env -u AWS_CA_BUNDLE rclone "$@"; }
rclone mkdir vgw:bench

echo "making a ${MIB} MiB already-gzipped file…" >&2
head -c "$((MIB << 20))" /dev/urandom | gzip -1 >"$work/profile.gz"
gz_bytes=$(stat -c %s "$work/profile.gz")

rows=()
echo "(a) storage path…" >&2
read -r t rss < <(measure "$work/s3put" -endpoint "$endpoint" -bucket bench -key a/storage/profile.gz -file "$work/profile.gz")
rows+=("a  already-gzipped $MIB MiB  storage path (s3put)   $(printf '%8.2f s %7s MiB %12s bytes stored' "$t" "$rss" "$gz_bytes")")
echo "(a) rclone copy…" >&2
read -r t rss < <(measure env -u AWS_CA_BUNDLE rclone copy "$work/profile.gz" vgw:bench/a/rclone/)
stored=$(stat -c %s "$work/vgw/bench/a/rclone/profile.gz")
rows+=("a  already-gzipped $MIB MiB  rclone copy            $(printf '%8.2f s %7s MiB %12s bytes stored' "$t" "$rss" "$stored")")
# The same with our part size and without rclone's MD5 of the whole file
# before the upload (it stores it as X-Amz-Meta-Md5chksum): like for like.
read -r t rss < <(measure env -u AWS_CA_BUNDLE rclone copy --s3-chunk-size 8M --s3-upload-concurrency 4 --s3-disable-checksum \
  "$work/profile.gz" vgw:bench/a/rclone2/)
stored=$(stat -c %s "$work/vgw/bench/a/rclone2/profile.gz")
rows+=("a  already-gzipped $MIB MiB  rclone 8M, no md5      $(printf '%8.2f s %7s MiB %12s bytes stored' "$t" "$rss" "$stored")")
rm -f "$work/profile.gz"
rm -rf "$work/vgw/bench/a"

for c in gzip zstd none; do
  echo "(b) ${MIB} MiB JSON, compression $c…" >&2
  read -r t rss < <(measure "$work/s3put" -endpoint "$endpoint" -bucket bench -key "b/$c/trace.json" \
    -generate json -size "$((MIB << 20))" -compression "$c")
  stored=$(stat -c %s "$work/vgw/bench/b/$c/trace.json")
  rows+=("b  trace JSON $MIB MiB       compression $(printf '%-10s %8.2f s %7s MiB %12s bytes stored (%.1fx)' "$c" "$t" "$rss" "$stored" "$(python3 -c "print($((MIB << 20))/$stored)")")")
  rm -rf "$work/vgw/bench/b/$c"
done

echo
echo "storage benchmark: versitygw posix on loopback, $(nproc) cores, $(date -u +%Y-%m-%d)"
printf '%s\n' "${rows[@]}"
