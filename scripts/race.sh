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
"${GO:-go}" test -race -count=1 -p 1 -json "$@" ./... | "${GO:-go}" run ./scripts/testreport
