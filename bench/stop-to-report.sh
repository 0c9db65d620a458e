#!/usr/bin/env bash
# stop_profile answered → the profile step's reply in the Slack thread, over 6
# captures (a benchmark, not a test): e2e's BenchmarkStopToReport starts the
# real stack (vllmsim in the unexplained scenario on its own 127.0.0.x with an
# armed profiler, a real `autocapture agent` on that address's :9101, MinIO,
# Prometheus, Alertmanager, the daemon with the shipped vllm-profile step minus
# its cooldown and `when`, threads to the strict Slack stand-in) and frames the
# sim 6 times back to back. Prints p50/max and its parts (collect via the agent,
# analysis, S3 upload and report; then outbox and Slack). Takes ~1 min.
#
# Usage: bench/stop-to-report.sh [extra go test flags…]
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(go test ./e2e -run '^$' -bench '^BenchmarkStopToReport$' -benchtime 1x -count 1 -timeout 10m -v "$@" 2>&1) || {
  echo "$out" >&2
  exit 1
}
echo "$out" | grep -E 'stop_profile answered|stop answered →|the profile step:|^BenchmarkStopToReport' | sed -E 's/^ +//'
