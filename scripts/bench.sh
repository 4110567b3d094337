#!/usr/bin/env bash
# Runs every benchmark of the module once, so that a broken one fails CI: -benchtime 1x, and
# -short, with which the few whose fixed setup takes minutes shrink it (airlock-fs's 100 MiB
# search tree to 4 MiB, 20,000-call throughput figures to 640, BridgeStdio's c16 rounds from
# 160 calls to 16). It checks that each benchmark runs, not what it measures. One package at a
# time, each from a test binary built beforehand (go test -c), in its directory as go test
# runs it. The benchmarks are not race-built: under -race they took minutes more
# (internal/bus's 10 s became 73 s).
#
# Usage:
#   scripts/bench.sh              build, then run (make bench-smoke)
#   scripts/bench.sh build DIR    only build the test binaries of the packages with benchmarks
#   scripts/bench.sh run DIR      only run them
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
mode=all
case ${1:-} in
build | run)
  mode=$1
  bins=$2
  mkdir -p "$bins"
  ;;
*)
  bins=$(mktemp -d)
  trap 'rm -rf "$bins"' EXIT
  ;;
esac
pkgs=$(git ls-files '*_test.go' 2>/dev/null | xargs grep -l '^func Benchmark' | xargs -n 1 dirname | sort -u | sed 's|^|./|')
if [[ $mode != run ]]; then
  # go test -c names each binary after the last element of its import path; no two
  # packages of the module share one.
  "$go" test -c -o "$bins/" $pkgs
fi
[[ $mode != build ]] || exit 0
status=0
# As go test runs a test binary: stdin from /dev/null, and its GOROOT's bin first in PATH, so
# that a benchmark's go is the same.
PATH="$("$go" env GOROOT)/bin:$PATH"
for pkg in $pkgs; do
  start=$SECONDS
  if out=$(cd "$pkg" && "$bins/$(basename "$pkg").test" -test.run='^$' -test.bench=. -test.benchtime=1x -test.short \
    -test.paniconexit0 -test.timeout=10m </dev/null 2>&1); then
    echo "ok   $pkg $((SECONDS - start))s"
  else
    printf '%s\n' "$out"
    echo "FAIL $pkg $((SECONDS - start))s"
    status=1
  fi
done
exit "$status"
