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
# Usage:
#   scripts/race.sh [go test flags...]   both groups, as make race runs them
#   scripts/race.sh light                the light packages' events (go test -json) on stdout
#   scripts/race.sh build DIR            the heavy packages' race test binaries into DIR
#   scripts/race.sh heavy DIR            the heavy packages' events, one package at a time, from
#                                        DIR's binaries (no link on the way)
# scripts/test.sh (make test) uses the last three; light and heavy print go test -json events
# for scripts/testreport.
set -euo pipefail
cd "$(dirname "$0")/.."
# The race runtime sleeps a second (ThreadSanitizer's atexit_sleep_ms) before a program that
# succeeded exits, so that other threads may still report; every race-built airlockd,
# airlock-fs and adapter a test stops, and every test binary, paid it (internal/mcp 117 → 62 s
# and internal/daemon 116 → 49 s without it). A race is still reported, and still fails the
# run, when it happens; 50 ms is left for a report in progress at exit. A GORACE of the
# caller's comes after, and wins.
case ${GORACE:-} in
atexit_sleep_ms=50*) ;;
*) export GORACE="atexit_sleep_ms=50${GORACE:+ $GORACE}" ;;
esac
go=${GO:-go}
light=(
  ./cmd/airlockd
  ./internal/audit
  ./internal/bench
  ./internal/capadapter
  ./internal/hint
  ./internal/loopback
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
tested=" " # the packages that have test files, and so a test binary
while read -r pkg has; do
  rel=./${pkg#"$module"/}
  [[ " ${light[*]} " == *" $rel "* ]] || heavy+=("$rel")
  [[ -z $has ]] || tested+="$rel "
done < <("$go" list -f '{{.ImportPath}} {{if or .TestGoFiles .XTestGoFiles}}tests{{end}}' ./...)

# binary DIR PKG is the path of PKG's test binary in DIR, as go test -c -o DIR/ names it (the
# last element of the import path: the module has no two packages that share it).
binary() {
  echo "$1/$(basename "$2").test"
}

# run_heavy DIR runs each heavy package's binary in its directory, as go test does, through
# test2json: the events of go test -json, with go test's default timeout.
run_heavy() {
  local dir=$1 pkg bin status=0 goroot
  goroot=$("$go" env GOROOT)
  for pkg in "${heavy[@]}"; do
    [[ $tested == *" $pkg "* ]] || continue
    bin=$(binary "$dir" "$pkg")
    if [[ ! -x $bin ]]; then
      # Its build failed (the build's own output says why).
      echo "FAIL	$module/${pkg#./} [no test binary]"
      status=1
      continue
    fi
    # As go test runs it: stdin from /dev/null, and its GOROOT's bin first in PATH, so that a
    # test's go is the same.
    (cd "$pkg" && PATH="$goroot/bin:$PATH" "$go" tool test2json -t -p "$module/${pkg#./}" "$bin" -test.v=test2json \
      -test.count=1 -test.paniconexit0 -test.timeout=10m </dev/null) || status=1
  done
  return "$status"
}

case ${1:-} in
light)
  exec "$go" test -race -count=1 -json "${light[@]}"
  ;;
build)
  exec "$go" test -race -c -o "$2/" "${heavy[@]}"
  ;;
heavy)
  run_heavy "$2"
  exit
  ;;
esac

bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
{
  status=0
  # -p 1 would also compile the heavy packages' tests one at a time (on a fresh clone, minutes
  # of -race builds of NATS, the MCP SDK and chromedp): they are built beside the light run,
  # and run from the binaries. A build error fails the run.
  "$go" test -race -c -o "$bins/" "${heavy[@]}" >"$bins/build.log" 2>&1 &
  build=$!
  "$go" test -race -count=1 -json "$@" "${light[@]}" || status=1
  if ! wait "$build"; then
    cat "$bins/build.log" >&2
    status=1
  fi
  if (($# == 0)); then
    run_heavy "$bins" || status=1
  else
    # Flags of the caller's (-run, -v…) are go test's: the heavy packages go through go test.
    "$go" test -race -count=1 -p 1 -json "$@" "${heavy[@]}" || status=1
  fi
  exit "$status"
} | "$go" run ./scripts/testreport
