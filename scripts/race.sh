#!/usr/bin/env bash
# Runs every package's tests with -race, in two groups, and lists the ten slowest tests at the
# end (scripts/testreport; the output of a failed test stays in the log whole).
#
# The light packages, whose tests start no daemon, NATS server, browser, cupsd or
# deadline-bound child, run side by side (go test's default -p, one per core). Every other
# package runs alone (-p 1): several start real daemons, NATS clusters and Chromium, and side
# by side on a 2-core machine they starve each other's children of the CPU that the tests'
# start and call deadlines assume. A new package is heavy until it is listed here as light.
#
# Usage: scripts/race.sh [go test flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
# The race runtime sleeps a second (ThreadSanitizer's atexit_sleep_ms) before a program that
# succeeded exits, so that other threads may still report; every race-built airlockd,
# airlock-fs and adapter a test stops, and every test binary, paid it (internal/mcp 117 → 62 s
# and internal/daemon 116 → 49 s without it). A race is still reported, and still fails the
# run, when it happens; 50 ms is left for a report in progress at exit. A GORACE of the
# caller's comes after, and wins.
export GORACE="atexit_sleep_ms=50${GORACE:+ $GORACE}"
go=${GO:-go}
light=(
  ./cmd/airlockd
  ./internal/audit
  ./internal/bench
  ./internal/capadapter
  ./internal/hint
  ./internal/visible
  ./internal/expiry
  ./internal/fsadapter
  ./internal/fsadapter/fsops
  ./internal/fsadapter/server
  ./internal/metrics
  ./internal/gate
  ./internal/model
  ./internal/model/modeltest
  ./internal/ndjson
  ./internal/ownersock
  ./internal/paths
  ./internal/policy
  ./internal/protocol
  ./internal/room
  ./internal/session
  ./internal/store
  ./internal/tooladapter
  ./internal/transcript
  ./internal/trywrite
  ./internal/turn
  ./scripts/testreport
)
module=$("$go" list -m)
heavy=()
while IFS= read -r pkg; do
  rel=./${pkg#"$module"/}
  [[ " ${light[*]} " == *" $rel "* ]] || heavy+=("$rel")
done < <("$go" list ./...)

bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
{
  status=0
  # -p 1 would also compile the heavy packages' tests one at a time (on a fresh clone, minutes
  # of -race builds of NATS, the MCP SDK and chromedp): they are built into the cache beside
  # the light run. Only the cache counts; the heavy run reports any build error.
  "$go" test -race -c -o "$bins/" "${heavy[@]}" >/dev/null 2>&1 &
  build=$!
  "$go" test -race -count=1 -json "$@" "${light[@]}" || status=1
  wait "$build" || true
  "$go" test -race -count=1 -p 1 -json "$@" "${heavy[@]}" || status=1
  exit "$status"
} | "$go" run ./scripts/testreport
