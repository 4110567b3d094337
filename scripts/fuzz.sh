#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a short time each (default 10s).
#
# Each package's test binary is built once, with the fuzzer's instrumentation, and runs each of
# its targets, as go test -fuzz would (in the package's directory, with go test's fuzz cache
# directory and default timeout): go test -fuzz would build and link the package again for
# every target, and the link of a large package took a few seconds of each target's turn.
#
# Usage:
#   scripts/fuzz.sh [FUZZTIME]          build, then fuzz every target (default 10s each)
#   scripts/fuzz.sh build DIR           only build the fuzz binaries into DIR
#   scripts/fuzz.sh run DIR FUZZTIME    only fuzz, with DIR's binaries
# FUZZWORKERS sets each target's number of fuzzing workers (-test.parallel; by default one per
# core): scripts/test.sh fuzzes with one, beside the heavy packages' tests.
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
mode=all
case ${1:-} in
build | run)
  mode=$1
  bins=$2
  fuzztime=${3:-10s}
  mkdir -p "$bins"
  ;;
*)
  fuzztime=${1:-10s}
  bins=$(mktemp -d)
  trap 'rm -rf "$bins"' EXIT
  ;;
esac
workers=()
[[ -z ${FUZZWORKERS:-} ]] || workers=(-test.parallel="$FUZZWORKERS")
fuzzcache=$("$go" env GOCACHE)/fuzz

# fuzz_one runs one target. Go's fuzzer sometimes ends a short run with "context deadline
# exceeded" and no failing input when the time runs out while a worker is busy; that run
# found nothing, so it is tried again (four times at most). A real failure writes its input
# under testdata/fuzz and fails at once.
fuzz_one() {
  local pkg=$1 target=$2 bin=$3 importpath=$4 out
  for attempt in 1 2 3 4 5; do
    # Minimizing each new interesting input may take up to a minute by default, which can
    # outlast a short -fuzztime.
    if out=$(cd "$pkg" && "$bin" -test.run='^$' -test.fuzz="^${target}\$" -test.fuzztime="$fuzztime" \
      -test.fuzzminimizetime=1s -test.fuzzcachedir="$fuzzcache/$importpath" -test.paniconexit0 -test.timeout=10m ${workers[@]+"${workers[@]}"} 2>&1); then
      printf '%s\n' "$out" | tail -n 2
      return 0
    fi
    printf '%s\n' "$out"
    if printf '%s' "$out" | grep -q 'Failing input written' ||
      ! printf '%s' "$out" | grep -q 'context deadline exceeded'; then
      return 1
    fi
    echo "fuzz: $pkg $target ended on the fuzzer's deadline without a failing input; again (attempt $attempt)"
  done
  return 1
}

files=$(git ls-files '*_test.go' 2>/dev/null | xargs grep -l '^func Fuzz' || true)
pkgs=$(for file in $files; do echo "./$(dirname "$file")"; done | sort -u)
# The binaries are built two at a time before any target runs, so that no build takes CPU
# from a target's fuzzing.
if [[ $mode != run ]]; then
  printf '%s\n' $pkgs | xargs -r -n 1 -P 2 sh -c 'exec "$0" test -c -fuzz=. -o "$1/$(echo "$2" | tr / _).test" "$2"' "$go" "$bins"
fi
[[ $mode != build ]] || exit 0
found=0
for file in $files; do
  pkg="./$(dirname "$file")"
  bin=$bins/$(echo "$pkg" | tr / _).test
  importpath=$("$go" list "$pkg")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    found=$((found + 1))
    echo "fuzz: $pkg $target ($fuzztime)"
    fuzz_one "$pkg" "$target" "$bin" "$importpath"
  done
done
echo "fuzz: $found targets passed"
