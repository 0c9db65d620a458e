#!/usr/bin/env bash
# Runs every test, as CI does: installs and checks the real components the
# integration tests start (Prometheus, Alertmanager, PostgreSQL, Jaeger), checks
# formatting and vet, then runs the whole suite with the race detector.
# With --quick: gofmt, vet and go test -short, which needs only Go and
# installs nothing (tests that need a real component skip; CI never does this);
# it leaves out e2e/deploy, a module of its own (the manifests' checks).
# Usage: scripts/test.sh [--quick] [extra go test flags]
set -euo pipefail
cd "$(dirname "$0")/.."

check_format() {
  echo "== gofmt"
  local unformatted
  unformatted=$(gofmt -l $(git ls-files '*.go'))
  if [ -n "$unformatted" ]; then
    echo "gofmt would change:"; echo "$unformatted"; exit 1
  fi
  echo "== go vet"
  go vet ./...
}

if [ "${1:-}" = --quick ]; then
  shift
  check_format
  echo "== go test -short"
  # The packages whose tests wait longest start first, beside the builds of
  # the rest, as in the full run below.
  mod=$(go list -m)
  first="$mod/runner/lifecycle $mod/runner $mod/runner/outbox $mod/capture/triage $mod/capture/profile"
  start=$SECONDS
  # -vet=off: go vet above ran every analyzer, and go test would run its
  # subset again over every package and its dependencies (a minute of CPU
  # on an empty build cache).
  # -p twice the cores: the longest packages wait on leases and frames while
  # the others link.
  # shellcheck disable=SC2046 # word splitting of the package list is meant
  go test -short -vet=off -p "$((2 * $(nproc)))" "$@" $first $(go list ./... | grep -vxF -f <(tr ' ' '\n' <<<"$first"))
  echo "== the quick loop passed in $((SECONDS - start)) s (go test -short); the full suite: scripts/test.sh"
  echo "== e2e/deploy (the manifests' checks, a module of its own) is left out here; the full suite runs it"
  exit 0
fi

export AUTOCAPTURE_TOOLS="${AUTOCAPTURE_TOOLS:-$HOME/.cache/autocapture-tools}"
bash scripts/install-tools.sh
export PATH="$AUTOCAPTURE_TOOLS/bin:$PATH"

echo "== nothing reads the team's shared/ folder"
# A user's clone has no ../shared: tests that need real third-party data take its
# folder from AUTOCAPTURE_FIXTURES (internal/testkit/fixtures), which only .ci/run sets.
if git grep -nE '\.\./([.][.]/)*shared/' -- ':!scripts/test.sh' ':!.ci/run'; then
  echo "the lines above point at ../shared, which a user's clone does not have"; exit 1
fi

check_format
echo "== go vet (e2e/deploy, its own module)"
go -C e2e/deploy vet ./...

echo "== go test"
# The browser tests keep their screenshots here (the run page at 1280 and 390
# px, the page opened from a Slack link), for CI to keep with the run.
export AUTOCAPTURE_TEST_ARTIFACTS="${AUTOCAPTURE_TEST_ARTIFACTS:-$PWD/.ci-artifacts}"
mkdir -p "$AUTOCAPTURE_TEST_ARTIFACTS"
# -p 3 on these 2-core machines: the longest packages mostly wait (leases,
# frames, a killed replica's takeover), and with -p 2 the cores sat idle
# for much of the run once checkptr was off for SQLite (below).
# The tests named in NORACE read real third-party data (torchtrace's Kineto
# traces) or walk a large table of signals through pure functions: one
# goroutine, CPU-bound, nothing for the race detector to see, and ten times
# slower under it (torchtrace: 16 s plain, 170 s with -race). They run in
# the second pass, without -race; every other test runs with it.
NORACE_TESTS='TestRealTraces|TestPublishedFigures|TestClassifyRealNames|TestEvidenceNeverContradictsTheSignals'
NORACE="^(${NORACE_TESTS})\$"
# The packages that hold them, found here so a test that moves goes on running
# (go test -run matching nothing passes): each must be found exactly once.
norace_pkgs=$(git grep -lE "^func (${NORACE_TESTS})\(" -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's|^|./|')
found=$(git grep -hoE "^func (${NORACE_TESTS})\(" -- '*_test.go' | sort -u | wc -l)
if [ "$found" -ne "$(tr '|' '\n' <<<"$NORACE_TESTS" | wc -l)" ]; then
  echo "NORACE names $(tr '|' ' ' <<<"$NORACE_TESTS"); only $found of them exist as test functions"; exit 1
fi
# The longest packages first: go test starts packages in the order given, and
# with the alphabetical order runner began 12 minutes in and ran alone at the
# end. Measured 2026-12-04 under -race, warm, -parallel 4: e2e/daemon 426 s
# (345 s of it the replica-killing tests, which run one at a time), e2e 263,
# runner 245, capture 73, cmd/autocapture 66, capture/triage 55.
mod=$(go list -m)
slow="$mod/e2e/daemon $mod/runner/lifecycle $mod/runner $mod/runner/outbox $mod/e2e $mod/capture/triage $mod/capture $mod/cmd/autocapture"
# e2e/deploy runs whole in the no-race pass: its tests read the manifests and
# the Dockerfile and start processes (promtool, Prometheus, the daemon binary,
# which testenv builds without -race anyway); they start no goroutine of their
# own, so the race detector has nothing of ours to watch there, and a race
# build of what only they link (k8s.io/api, kustomize, buildkit, compose-go)
# was minutes of a fresh machine's run. It is a module of its own, so
# `go list ./...` here does not name it.
pkgs="$slow $(go list ./... | grep -vxF -f <(tr ' ' '\n' <<<"$slow"))"
# The no-race pass and the fuzz targets run beside the race pass, whose
# system tests wait on frames, scrapes and leases: with 2 at a time per
# package (the default -parallel, GOMAXPROCS) the 2 cores were 40-90 % idle
# for most of it, hence -parallel 4 below. The CPU-bound no-race tests
# (~25 s) run at nice 19 and take what is left. The fuzz targets run at once,
# at normal priority, while the race pass is still linking its test binaries:
# at nice 19 they were starved. Their "execs:" line understates: a worker
# reports its count when a batch or the minimizing of a new input ends, and
# what it ran since is not added when the time runs out (FuzzParse printed
# 25 while its worker, minimizing, ran ~18,000 inputs/s).
bgdir=$(mktemp -d)
# e2e/deploy first, at normal priority: its tests wait on the processes they
# start, which would inherit a nice 19.
# shellcheck disable=SC2086 # word splitting of the package list is meant
# Both run whatever the first gives; the pass fails if either did.
(rc=0
  go -C e2e/deploy test -count=1 -p 1 -timeout 10m "$@" . >"$bgdir/norace.log" 2>&1 || rc=1
  nice -n 19 go test -count=1 -p 1 -timeout 20m -run "$NORACE" "$@" $norace_pkgs >>"$bgdir/norace.log" 2>&1 || rc=1
  echo "$rc" >"$bgdir/norace.rc") &
norace_pid=$!

fuzz_all() {
  # Every Fuzz function of the repo, each for a bounded time. A crasher is
  # written under the package's testdata/fuzz/ and fails the run.
  # Each package's instrumented test binary is built first, one package at a
  # time (go test -c -fuzz): -fuzz instruments every package the test binary
  # links (handlers' links ~800), and separate go processes do not share a
  # compile that is in progress, so on an empty build cache the five targets
  # started at once compiled the same ~800 packages up to five times over.
  # Then the targets run together from those binaries, one fuzzing worker
  # each (-test.parallel 1), as go test would run them (in the package's
  # folder, its corpus cache under $GOCACHE/fuzz): one after another they took
  # 104 s on the 2-core machine, together about a third of that, with the same
  # 15 s each. Go 1.26's coordinator can report a bare "context deadline
  # exceeded" as the time runs out with no failing input (golang/go#75804,
  # fixed in Go 1.27): that alone is not a failure.
  local fuzzdir pids=() failed=0 pkg dir targets bin target log entry pid rest name cache
  fuzzdir=$(mktemp -d)
  cache="$(go env GOCACHE)/fuzz"
  while read -r pkg dir; do
    targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' || true)
    [ -n "$targets" ] || continue
    bin="$fuzzdir/${pkg##*/}.test"
    if ! go test -c -fuzz . -o "$bin" "$pkg" >"$fuzzdir/build.log" 2>&1; then
      echo "$pkg: building its fuzz binary FAILED"; cat "$fuzzdir/build.log"; failed=1; continue
    fi
    for target in $targets; do
      log="$fuzzdir/${pkg##*/}.$target.log"
      (cd "$dir" && exec "$bin" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime 15s \
        -test.parallel 1 -test.timeout 10m -test.fuzzcachedir "$cache/$pkg") </dev/null >"$log" 2>&1 &
      pids+=("$!:$log:$pkg $target")
    done
  done < <(go list -f '{{.ImportPath}} {{.Dir}}' ./...)
  for entry in "${pids[@]}"; do
    pid=${entry%%:*} rest=${entry#*:}
    log=${rest%%:*} name=${rest#*:}
    if wait "$pid"; then
      echo "$name: $(grep 'execs:' "$log" | tail -n 1)"
    elif grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
      echo "$name: stopped by the fuzztime race (golang/go#75804), no failing input"
    else
      echo "$name: FAILED"; cat "$log"; failed=1
    fi
  done
  rm -rf "$fuzzdir"
  return "$failed"
}
(fuzz_all_rc=0; bash -c "$(declare -f fuzz_all); fuzz_all" >"$bgdir/fuzz.log" 2>&1 || fuzz_all_rc=$?
  echo "$fuzz_all_rc" >"$bgdir/fuzz.rc") &
fuzz_pid=$!

# A failure's own lines are printed again at the end: CI keeps only the tail
# of a long output, and a failed system test's component logs (Prometheus',
# the replicas') fill it, hiding which test failed and why.
out=$(mktemp)
summarise() {
  echo "== what failed (its lines from the output above; t+ schedule lines left out)"
  grep -E -- '^\s*--- FAIL|^(FAIL|panic:)|^\s+[a-z_0-9]+_test\.go:[0-9]+: ' "$out" | grep -vE 't\+ *[0-9.]+s \(' | head -n 300
  rm -f "$out"
  kill "$norace_pid" "$fuzz_pid" 2>/dev/null || true
  exit 1
}
# longest lists the packages of a go test log that took longest: the order
# of $slow above, and where the next cut in the suite's time lies.
longest() {
  grep -E '^ok\s' "$1" | awk -F'\t' '{print "  " $3 "\t" $2}' | sort -rn -k1 | head -n 8 || true
}
# -race turns on checkptr, which checks every unsafe.Pointer conversion:
# modernc.org's SQLite is C translated to Go, all pointer arithmetic, and
# those checks were most of the CPU of our SQLite tests. They are off there
# only; the race detector still watches that code, and checkptr ours.
CHECKPTR_OFF='-gcflags=modernc.org/...=-d=checkptr=0'
start=$SECONDS
# shellcheck disable=SC2086 # word splitting of the package list is meant
go test -race "$CHECKPTR_OFF" -count=1 -p 3 -parallel 4 -timeout 25m -skip "$NORACE" "$@" $pkgs 2>&1 | tee "$out" || summarise
echo "== the race pass took $((SECONDS - start)) s; its longest packages:"
longest "$out"

echo "== go test, no race (e2e/deploy; $(tr '|' ' ' <<<"$NORACE_TESTS"))"
wait "$norace_pid" || true
cat "$bgdir/norace.log" | tee "$out"
[ "$(cat "$bgdir/norace.rc" 2>/dev/null)" = 0 ] || summarise
rm -f "$out"

echo "== go fuzz (15s per target, all targets at once)"
wait "$fuzz_pid" || true
cat "$bgdir/fuzz.log"
[ "$(cat "$bgdir/fuzz.rc" 2>/dev/null)" = 0 ] || { echo "a fuzz target failed (above)"; exit 1; }
rm -rf "$bgdir"
echo "== all tests passed in $SECONDS s"
