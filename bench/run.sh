#!/usr/bin/env bash
# Webhook intake benchmark (not a test): drives POST /hooks/alertmanager with wrk
# and 20-alert bodies whose fingerprints are all new (bench/webhook.lua), against
#   1. the daemon on SQLite (the embedded default),
#   2. the daemon on a private PostgreSQL 15 cluster (fsync on: durable),
#   3. a do-nothing net/http server decoding the same JSON (bench/ceiling): the ceiling.
# Prints accepted alerts/s (from the daemon's own autocapture_alerts_total) and
# wrk's p50/p99 ack latency, twice per daemon: paced near the target rate (each
# connection waits PACE ms between webhooks), then flat out (paced first: the
# flat-out phase leaves a backlog of runs that would compete with it). Each
# daemon line also gives the daemon's CPU per accepted alert (its own
# process_cpu_seconds_total over the phase, the runs it executed meanwhile
# included): on shared cores the rates follow the machine's other load, the
# CPU per alert much less, so it is what tells two builds apart.
# Everything listens on 127.0.0.1 and is stopped on exit.
#
# Usage: bench/run.sh [duration (15s)] [connections (4)] [wrk threads (2)]
# AUTOCAPTURE_BIN=path drives that binary instead of building this tree's, so
# two trees' builds can be measured interleaved in one session (their figures
# are only comparable side by side: the machine's other load moves them).
# Target on 2 cores: 1,000 alerts/s sustained, p99 ack < 50 ms.
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${1:-15s}
CONNS=${2:-4}
THREADS=${3:-2}
PER=20
TOKEN=bench-token
# 4 connections x 1000/(70 ms + ack) ≈ 50 webhooks/s ≈ 1,000 alerts/s.
PACE=${BENCH_PACE_MS:-70}

work=$(mktemp -d /tmp/autocapture-bench-XXXXXX)
chmod 755 "$work"
pids=()
pgdata=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  if [ -n "$pgdata" ]; then runuser -u postgres -- "$PGBIN/pg_ctl" -D "$pgdata" -m fast stop >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 1 200); do curl -fs -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
metric() { { curl -fs "$1/metrics" || true; } | awk -v s="$2" '$1 == s { print $2 }'; }

echo "building…" >&2
bin=${AUTOCAPTURE_BIN:-}
if [ -z "$bin" ]; then
  go build -o "$work/autocapture" ./cmd/autocapture
  bin="$work/autocapture"
fi
go build -o "$work/ceiling" ./bench/ceiling

# start_daemon NAME [database url]: starts `autocapture serve` and sets $url.
start_daemon() {
  local name=$1 db=${2:-} port dir
  port=$(free_port); dir="$work/$name"; mkdir -p "$dir"
  cat >"$dir/config.yaml" <<EOF
web:
  listen_address: 127.0.0.1:$port
  auth: {bearer_token: $TOKEN}
storage: {path: "$dir"}
database: {url: "$db"}
prometheus: {url: "http://127.0.0.1:$(free_port)"}
notify: {console: {enabled: false}}
EOF
  "$bin" serve --config.file "$dir/config.yaml" >"$dir/stdout.log" 2>"$dir/stderr.log" &
  pids+=($!)
  url="http://127.0.0.1:$port"
  wait_http "$url/-/ready"
}

# drive NAME URL DELAY_MS: runs wrk and prints one result line.
drive() {
  local name=$1 target=$2 pace=$3 before after cpu0 cpu1 cpu out secs rps p50 p99 non2xx accepted
  before=$(metric "$target" 'autocapture_alerts_total{outcome="accepted"}'); before=${before:-0}
  cpu0=$(metric "$target" process_cpu_seconds_total)
  out=$(BENCH_NONCE=$(printf '%04x' $((RANDOM))) BENCH_TOKEN=$TOKEN BENCH_DELAY_MS=$pace \
    wrk -t"$THREADS" -c"$CONNS" -d"$DUR" --latency -s bench/webhook.lua "$target")
  echo "$out" >"$work/$name.wrk"
  after=$(metric "$target" 'autocapture_alerts_total{outcome="accepted"}'); after=${after:-0}
  cpu1=$(metric "$target" process_cpu_seconds_total)
  secs=$(echo "$out" | awk '/requests in/ { sub(/s,$/, "", $4); print $4 }')
  rps=$(echo "$out" | awk '/^Requests\/sec/ { print $2 }')
  p50=$(echo "$out" | awk '$1 == "50%" { print $2 }')
  p99=$(echo "$out" | awk '$1 == "99%" { print $2 }')
  non2xx=$(echo "$out" | awk '/Non-2xx/ { print $5 }'); non2xx=${non2xx:-0}
  cpu=""
  if [ "$name" = ceiling ]; then
    accepted=$(awk -v r="$rps" -v n=$PER 'BEGIN { printf "%.0f", r * n }')
  else
    accepted=$(awk -v a="$after" -v b="$before" -v s="$secs" 'BEGIN { printf "%.0f", (a - b) / s }')
    if [ -n "$cpu0" ] && [ -n "$cpu1" ]; then
      cpu=$(awk -v c0="$cpu0" -v c1="$cpu1" -v a="$after" -v b="$before" \
        'BEGIN { if (a > b) printf "   cpu %.3f ms/alert", (c1 - c0) * 1000 / (a - b) }')
    fi
  fi
  [ "$pace" -gt 0 ] && name="$name paced"
  printf '%-16s %8s req/s %8s alerts/s accepted   p50 %8s   p99 %8s   non-2xx %s%s\n' \
    "$name" "$rps" "$accepted" "$p50" "$p99" "$non2xx" "$cpu"
}

echo "wrk: $THREADS threads, $CONNS connections, $DUR per target, $PER alerts per webhook, fresh fingerprints" >&2

start_daemon sqlite
drive sqlite "$url" "$PACE"
drive sqlite "$url" 0

PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pgdata="$work/pg/data"; mkdir -p "$work/pg"; chown postgres "$work/pg"
pgport=$(free_port)
runuser -u postgres -- "$PGBIN/initdb" -D "$pgdata" -U postgres -A trust -E UTF8 --locale=C >/dev/null
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$pgdata" -l "$work/pg/log" -w \
  -o "-k $work/pg -p $pgport -c listen_addresses=127.0.0.1 -c max_connections=100" start >/dev/null
start_daemon postgres "postgres://postgres@127.0.0.1:$pgport/postgres?sslmode=disable"
drive postgres "$url" "$PACE"
drive postgres "$url" 0

cport=$(free_port)
"$work/ceiling" --web.listen-address "127.0.0.1:$cport" &
pids+=($!)
wait_http "http://127.0.0.1:$cport/-/healthy"
drive ceiling "http://127.0.0.1:$cport" 0
