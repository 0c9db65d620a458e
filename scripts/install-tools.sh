#!/usr/bin/env bash
# Installs every real component the tests talk to, idempotently:
#   Debian: prometheus, prometheus-alertmanager, postgresql, wrk, chromium (the run page's browser test)
#   Go-built into $AUTOCAPTURE_TOOLS/bin (default ~/.cache/autocapture-tools): jaeger,
#   versitygw and minio (S3 test servers; MinIO is AGPL: run as a test server, never imported)
# Safe to run again: each piece is skipped when already present.
set -euo pipefail

TOOLS="${AUTOCAPTURE_TOOLS:-$HOME/.cache/autocapture-tools}"
mkdir -p "$TOOLS/bin"
JAEGER_VERSION=v1.76.0
VERSITYGW_VERSION=v1.8.0
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
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# The Debian package starts system-wide daemons; tests run their own on chosen ports.
for svc in prometheus prometheus-alertmanager prometheus-node-exporter postgresql; do
  if command -v systemctl >/dev/null 2>&1; then systemctl stop "$svc" >/dev/null 2>&1 || true; fi
done

# Jaeger v2 cannot be `go install`ed (its go.mod has a replace): build it as a main module.
if [ ! -x "$TOOLS/bin/jaeger" ]; then
  log "building jaeger $JAEGER_VERSION (a few minutes, once per machine)"
  dir=$(go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { log "could not download jaeger"; exit 1; }
  src="$TOOLS/src/jaeger"
  rm -rf "$src"; mkdir -p "$TOOLS/src"; cp -r "$dir" "$src"; chmod -R u+w "$src"
  (cd "$src" && GOFLAGS=-mod=mod go build -o "$TOOLS/bin/jaeger.tmp" ./cmd/jaeger)
  mv "$TOOLS/bin/jaeger.tmp" "$TOOLS/bin/jaeger"
  rm -rf "$src"
fi

# S3 test servers: versitygw (checks signatures, small) and MinIO (what most users run).
go_install_tool() { # name module@version
  local name=$1 mod=$2
  if [ ! -x "$TOOLS/bin/$name" ]; then
    log "go install $mod (minutes, once per machine)"
    GOBIN="$TOOLS/bin" go install "$mod"
  fi
}
go_install_tool versitygw "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
go_install_tool minio "github.com/minio/minio@$MINIO_VERSION"

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
log "ready: prometheus=$(command -v prometheus) alertmanager=$(command -v prometheus-alertmanager) pg=$PG_BIN jaeger=$TOOLS/bin/jaeger versitygw=$TOOLS/bin/versitygw minio=$TOOLS/bin/minio"
