#!/usr/bin/env bash
# Idle daemon figures (not a test): the binary's size, built as the Dockerfile
# builds it (CGO_ENABLED=0, -trimpath, -ldflags "-s -w"), and `autocapture
# serve` on its embedded defaults (SQLite, local storage, the shipped
# playbooks, loopback) left idle: resident memory and CPU over a quiet minute.
# Everything goes to one temporary folder, removed on exit with the daemon.
#
# Usage: bench/idle.sh [seconds idle (60)]
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${1:-60}
work=$(mktemp -d "${TMPDIR:-/tmp}/autocapture-idle-bench-XXXXXX")
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$work/autocapture" ./cmd/autocapture
size=$(stat -c %s "$work/autocapture")

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$work/autocapture" serve --storage.path="$work/data" --web.listen-address="127.0.0.1:$port" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null || { echo "daemon not ready:"; cat "$work/log"; exit 1; }
sleep 5 # past start-up: migrations, playbook load, first reaper and sweeper ticks

ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks)
sleep "$SECS"
t1=$(ticks)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")

printf 'binary (static, stripped, linux/%s): %.1f MiB (%d bytes)\n' "$(go env GOARCH)" "$(echo "$size/1048576" | bc -l)" "$size"
printf 'idle serve, after %ss: RSS %.1f MiB (peak %.1f MiB), CPU %.2f%% of one core\n' "$SECS" \
  "$(echo "$rss/1024" | bc -l)" "$(echo "$hwm/1024" | bc -l)" "$(echo "($t1-$t0)*100/$hz/$SECS" | bc -l)"
