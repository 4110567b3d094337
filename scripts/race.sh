#!/usr/bin/env bash
# Runs every package's tests with -race and lists the ten slowest tests at the end
# (scripts/testreport; the output of a failed test stays in the log whole).
#
# One package at a time: several packages start real daemons, NATS clusters and Chromium, and
# run side by side on a 2-core machine they starve each other's children of the CPU that the
# tests' start and call deadlines assume.
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
"${GO:-go}" test -race -count=1 -p 1 -json "$@" ./... | "${GO:-go}" run ./scripts/testreport
