#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a short time each (default 10s).
# Usage: scripts/fuzz.sh [FUZZTIME]
set -euo pipefail
fuzztime=${1:-10s}
cd "$(dirname "$0")/.."
found=0
while IFS= read -r file; do
  pkg="./$(dirname "$file")"
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    found=$((found + 1))
    echo "fuzz: $pkg $target ($fuzztime)"
    # Minimizing each new interesting input may take up to a minute by default, which can
    # outlast a short -fuzztime and fail the run with "context deadline exceeded".
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 1s "$pkg"
  done
done < <(git ls-files '*_test.go' 2>/dev/null | xargs grep -l '^func Fuzz' || true)
echo "fuzz: $found targets passed"
