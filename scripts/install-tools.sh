#!/usr/bin/env bash
# Installs every real component the tests talk to, idempotently:
#   Debian: prometheus, prometheus-alertmanager, postgresql, wrk, chromium (the run page's browser test)
#   Go-built into $AUTOCAPTURE_TOOLS/bin (default ~/.cache/autocapture-tools): jaeger,
#   versitygw and minio (S3 test servers; MinIO is AGPL: run as a test server, never imported),
#   helm (lints and renders deploy/helm/autocapture)
# Safe to run again: each piece is skipped when already present.
set -euo pipefail

TOOLS="${AUTOCAPTURE_TOOLS:-$HOME/.cache/autocapture-tools}"
mkdir -p "$TOOLS/bin"
JAEGER_VERSION=v1.76.0
VERSITYGW_VERSION=v1.8.0
HELM_VERSION=v4.3.2
# MinIO publishes no semver tags to the module proxy; this pseudo-version is what
# @latest resolved to on 2026-12-01. Pinned so every machine tests the same server.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

log() { printf '[install-tools] %s\n' "$*" >&2; }

need_apt=()
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need_apt+=(prometheus-alertmanager)
command -v amtool >/dev/null || need_apt+=(prometheus-alertmanager)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
command -v wrk >/dev/null || need_apt+=(wrk)
command -v chromium >/dev/null || need_apt+=(chromium)
# On a fresh machine the pieces are fetched and built side by side: apt's
# download and unpacking, and each Go tool's module download, wait on the
# network or the disk while another tool's compile keeps the CPUs busy (one
# after another, the fetches left the 2 cores idle ~2 of the ~7 minutes).
# Each piece logs to its own file, shown when it fails; the script waits for
# all and fails if any did.
logs=$(mktemp -d)
pids=()
bg() { # name command...: runs the command in the background, logged
  local name=$1; shift
  log "$name: started in the background"
  ("$@") >"$logs/$name.log" 2>&1 &
  pids+=("$!:$name")
}
apt_install() {
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
}
if [ ${#need_apt[@]} -gt 0 ]; then bg apt apt_install; fi
# The modules' own dependencies (the root's and e2e/deploy's), for go vet and
# the tests that follow.
bg gomod bash -c 'cd "$1/.." && go mod download && go -C e2e/deploy mod download' _ "$(dirname "$0")"

# The tools are test servers: built without symbol tables or DWARF (-s -w),
# which nobody reads here and which are a large part of linking binaries this
# size.
tool_ldflags='-s -w'
# Jaeger v2 cannot be `go install`ed (its go.mod has a replace): build it as a main module.
build_jaeger() {
  log "building jaeger $JAEGER_VERSION (a few minutes, once per machine)"
  local dir src
  dir=$(go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { log "could not download jaeger"; return 1; }
  src="$TOOLS/src/jaeger"
  rm -rf "$src"; mkdir -p "$TOOLS/src"; cp -r "$dir" "$src"; chmod -R u+w "$src"
  (cd "$src" && GOFLAGS=-mod=mod go build -ldflags="$tool_ldflags" -o "$TOOLS/bin/jaeger.tmp" ./cmd/jaeger)
  mv "$TOOLS/bin/jaeger.tmp" "$TOOLS/bin/jaeger"
  rm -rf "$src"
}
if [ ! -x "$TOOLS/bin/jaeger" ]; then bg jaeger build_jaeger; fi

# S3 test servers: versitygw (checks signatures, small) and MinIO (what most users run).
go_install_tool() { # name module@version
  local name=$1 mod=$2
  log "go install $mod (minutes, once per machine)"
  GOBIN="$TOOLS/bin" go install -ldflags="$tool_ldflags" "$mod"
}
[ -x "$TOOLS/bin/versitygw" ] || bg versitygw go_install_tool versitygw "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
[ -x "$TOOLS/bin/minio" ] || bg minio go_install_tool minio "github.com/minio/minio@$MINIO_VERSION"
# The chart's tests run the real helm (lint --strict, template); its go.mod has no replace.
[ -x "$TOOLS/bin/helm" ] || bg helm go_install_tool helm "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"

failed=0
for entry in "${pids[@]}"; do
  if wait "${entry%%:*}"; then
    log "${entry#*:}: done (${SECONDS} s into the install)"
  else
    log "${entry#*:} FAILED:"; cat "$logs/${entry#*:}.log" >&2; failed=1
  fi
done
rm -rf "$logs"
[ "$failed" = 0 ] || exit 1
# The Debian package starts system-wide daemons; tests run their own on chosen ports.
for svc in prometheus prometheus-alertmanager prometheus-node-exporter postgresql; do
  if command -v systemctl >/dev/null 2>&1; then systemctl stop "$svc" >/dev/null 2>&1 || true; fi
done

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
log "ready: prometheus=$(command -v prometheus) alertmanager=$(command -v prometheus-alertmanager) pg=$PG_BIN jaeger=$TOOLS/bin/jaeger versitygw=$TOOLS/bin/versitygw minio=$TOOLS/bin/minio helm=$TOOLS/bin/helm"
