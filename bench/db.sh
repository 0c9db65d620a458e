#!/usr/bin/env bash
# Run-store benchmark (not a test): the statements every replica runs all the
# time, on a store already holding N runs (98% finished, 1% queued with a live
# job, 1% running under a live lease), on SQLite and on testenv's PostgreSQL
# (fsync off: commits cost more on a durable cluster; AUTOCAPTURE_BENCH_DATABASE_URL
# adds one of your own, empty). Ops: one reaper tick (nothing to resume), one
# Accept of a 20-alert batch of new runs, one claim with its playbook slot
# count, one list page (50) by alertname, one seen-before read (the 50 latest
# runs of an alert on its instance or its model: the thread's "3rd time this
# week" line). Target: each under 10 ms at 100k.
# It is runner's BenchmarkAtScale; prints ms/op per store, op and size.
#
# Usage: bench/db.sh [sizes (1000,10000,100000)] [benchtime (1s)]
# A cheap smoke (~5 s): bench/db.sh 1000 1x
#
# Measured 2026-12-01, 2 cores (AMD EPYC), `bench/db.sh` (ms/op, benchtime 1s):
#   store     op        1000   10000  100000
#   sqlite    reap      0.04    0.11    1.93
#   sqlite    accept    2.40    2.29    3.80
#   sqlite    claim     0.27    0.37    2.99
#   sqlite    list      0.28    0.38    0.35
#   postgres  reap      0.13    0.22    1.29
#   postgres  accept    5.25    1.93    1.96
#   postgres  claim     0.42    2.63    1.68
#   postgres  list      0.22    0.22    0.24
# Measured 2026-12-06, the same 2 cores shared with five other builds (so the
# older ops read several times their quiet figures above), `bench/db.sh 100000`:
#   sqlite    list 0.90   seen 0.75      postgres  list 0.88   seen 0.41
# The seen read is two index range reads (instance or model_name, alertname,
# created_at) that stop at 50 rows each: about what a list page costs.
# The reap tick grows with the queued runs (1% of N: one primary-key lookup
# of river_job each), the claim's slot count with the running ones (1% of N
# here, far more than runs.max_concurrent x replicas in practice).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cache/autocapture-tools/bin:$PATH"

SIZES=${1:-1000,10000,100000}
BENCHTIME=${2:-1s}

out=$(AUTOCAPTURE_BENCH_RUNS=$SIZES go test -run '^$' -bench '^BenchmarkAtScale$' \
  -benchtime "$BENCHTIME" -timeout 30m ./runner/ 2>&1) || { echo "$out" >&2; exit 1; }
echo "$out" | awk -v sizes="$SIZES" '
  $1 ~ /^BenchmarkAtScale\// && $4 == "ns/op" {
    split($1, p, "/"); store = p[2]; n = substr(p[3], 6); op = p[4]; sub(/-[0-9]+$/, "", op)
    ms[store, op, n] = $3 / 1e6
    if (!(store in seen)) { seen[store] = 1; stores[++ns] = store }
  }
  END {
    k = split(sizes, sz, ","); split("reap accept claim list seen", ops, " ")
    printf "%-13s %-7s", "store", "op"; for (i = 1; i <= k; i++) printf " %8s", sz[i]; print "   (ms/op)"
    for (s = 1; s <= ns; s++) for (o = 1; o <= 5; o++) {
      printf "%-13s %-7s", stores[s], ops[o]
      for (i = 1; i <= k; i++) { v = ms[stores[s], ops[o], sz[i]]; if (v == "") printf " %8s", "-"; else printf " %8.2f", v }
      print ""
    }
  }'
