#!/usr/bin/env bash
# Webhook receipt → first verdict recorded (the preliminary one, from the PromQL
# snapshot) and → refined verdict recorded (triage over the scrape too), as
# distributions over 20 runs (a benchmark, not a test): e2e's BenchmarkWebhookToVerdict starts the real stack on 127.0.0.1
# (vllmsim in the overload scenario, Prometheus with the shipped rules,
# Alertmanager, Jaeger, the daemon with the shipped queue-deep playbook minus its
# cooldown), POSTs 20 alerts to the webhook, 4 in flight, and times each from
# its POST to the run's first verdict (verdicts[0].at), the triage step's
# finished_at and the run's finished_at. Prints p50/p90/p99 (p99 of 20 is the
# max) and the step durations that make them up. Takes ~2 min.
#
# Usage: bench/verdict.sh [extra go test flags…]
set -euo pipefail
cd "$(dirname "$0")/.."

out=$(go test ./e2e -run '^$' -bench '^BenchmarkWebhookToVerdict$' -benchtime 1x -count 1 -timeout 15m -v "$@" 2>&1) || {
  echo "$out" >&2
  exit 1
}
echo "$out" | grep -E 'webhook → |step durations|^BenchmarkWebhookToVerdict' | sed -E 's/^ +//'
