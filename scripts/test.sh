#!/usr/bin/env bash
# Runs every test, as CI does: installs and checks the real components the
# integration tests start (Prometheus, Alertmanager, PostgreSQL, Jaeger), checks
# formatting and vet, then runs the whole suite with the race detector.
# Usage: scripts/test.sh [extra go test flags]
set -euo pipefail
cd "$(dirname "$0")/.."

export AUTOCAPTURE_TOOLS="${AUTOCAPTURE_TOOLS:-$HOME/.cache/autocapture-tools}"
bash scripts/install-tools.sh
export PATH="$AUTOCAPTURE_TOOLS/bin:$PATH"

echo "== nothing reads the team's shared/ folder"
# A user's clone has no ../shared: tests read committed copies under testdata/.
if git grep -nE '\.\./([.][.]/)*shared/' -- ':!scripts/test.sh'; then
  echo "the lines above point at ../shared, which a user's clone does not have"; exit 1
fi

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...

echo "== go test"
# -p 2: these machines have 2 cores; integration tests start real servers.
go test -race -count=1 -p 2 -timeout 25m "$@" ./...
