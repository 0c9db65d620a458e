#!/usr/bin/env bash
# Profile analysis benchmark (not a test): torchtrace.Analyze on a generated
# gzipped Kineto trace of a vLLM worker (32 layers, TP=2: GEMM, FlashAttention 3,
# NCCL, vllm:: elementwise kernels, cpu_op/cuda_runtime/python_function
# events, ac2g flows; ~15x gzip ratio, like real traces). Reports throughput
# of uncompressed JSON, wall time and peak RSS (/usr/bin/time -v and the
# process's own VmHWM), and the machine's load while it ran.
#
# The trace is generated once and kept (TRACE=path to reuse or relocate it,
# KEEP=0 to remove it after).
#
# Usage: bench/profile.sh [gzipped size in MiB (1024)]
set -euo pipefail
cd "$(dirname "$0")/.."

MIB=${1:-1024}
TRACE=${TRACE:-${TMPDIR:-/tmp}/autocapture-profile-bench-${MIB}m.pt.trace.json.gz}
bin=$(mktemp -d "${TMPDIR:-/tmp}/autocapture-profile-bench-XXXXXX")
cleanup() {
  rm -rf "$bin"
  if [ "${KEEP:-1}" = 0 ]; then rm -f "$TRACE"; fi
}
trap cleanup EXIT

go build -o "$bin/tracebench" ./torchtrace/internal/cmd/tracebench
if [ ! -s "$TRACE" ]; then
  "$bin/tracebench" gen -out "$TRACE" -gz-bytes $((MIB * 1024 * 1024))
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
/usr/bin/time -v "$bin/tracebench" analyze "$TRACE" 2>"$bin/time.txt"
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E 'Maximum resident set size|Elapsed \(wall|User time|System time' "$bin/time.txt"
