#!/usr/bin/env bash
# make test: every check of CI, in two phases, with each lane's time and the ten slowest tests
# at the end. They are the checks of make fmt-check, vet, lint, race, fuzz and bench-smoke, which
# make test ran one after another; here they overlap where they do not compete for the CPU that
# the heavy tests' deadlines assume.
#
# Phase 1 keeps both cores busy: the light packages' race tests (scripts/race.sh light) while
# gofmt, go vet and staticcheck run and the heavy packages' race test binaries, the fuzz binaries
# and the benchmark binaries are built. Nothing of it starts a daemon, a NATS cluster, a browser
# or a deadline-bound child, so a loaded CPU slows it down without making it fail.
#
# Phase 2 runs the heavy packages one at a time from their binaries (scripts/race.sh heavy).
# Their tests mostly wait (outages, restarts, scrapes, children): they used 169 s of CPU in 568 s
# (user + sys against wall time, /usr/bin/time -v), a third of one core. Beside them one lane
# fuzzes each target with a single worker (-test.parallel=1, about one core), so the heavy
# packages keep the other core. A heavy package never runs beside another heavy package, nor
# beside the benchmarks, which start daemons and clusters too: those run once the heavy packages
# are done, one package at a time (scripts/bench.sh).
#
# AIRLOCK_TEST_BEFORE_HEAVY, when set, is a command that must succeed before phase 2: .ci/run
# installs the packages that only the heavy tests use (chromium, cupsd, systemd, prometheus, the
# npm MCP clients) while phase 1 runs, and waits for them there.
#
# Usage: scripts/test.sh     (FUZZTIME, default 8s, is each target's fuzzing time)
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
export GO=$go
fuzztime=${FUZZTIME:-8s}
staticcheck=${STATICCHECK:-honnef.co/go/tools/cmd/staticcheck@v0.8.2}

work=$(mktemp -d)
lanes=()
# A lane that is still running when the script ends (a failure, ^C) is stopped with its children:
# each runs as its own process group (set -m).
cleanup() {
  for pid in "${lanes[@]}"; do
    kill -- "-$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# lane NAME CMD... starts CMD as a background lane whose output goes to a log of its own; finish
# prints it, with its time, when the lane is done.
declare -A lane_pid
lane() {
  local name=$1
  shift
  set -m # the lane gets a process group of its own
  (
    start=$SECONDS
    status=0
    "$@" >"$work/$name.log" 2>&1 || status=$?
    echo "$((SECONDS - start)) $status" >"$work/$name.end"
    exit "$status"
  ) &
  set +m
  lane_pid[$name]=$!
  lanes+=($!)
}

failed=()
# finish NAME waits for a lane, prints its output and its time, and records a failure.
finish() {
  local name=$1 secs=? status=killed
  wait "${lane_pid[$name]}" || true
  [[ ! -e $work/$name.end ]] || read -r secs status <"$work/$name.end"
  cat "$work/$name.log"
  if [[ $status != 0 ]]; then
    failed+=("$name")
    echo "test: $name FAILED after ${secs}s"
  else
    echo "test: $name ${secs}s"
  fi
}

# check runs gofmt's check, builds the benchmark binaries, runs go vet and staticcheck, each to
# the end, and fails if any failed. The benchmarks' build comes before go vet, which then finds
# the packages it needs compiled: two go commands that build the same package at once each
# compile it (on a fresh clone, minutes of the module's dependencies twice).
check() {
  local status=0 out
  out=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
  if [[ -n $out ]]; then
    echo "gofmt would change:"
    echo "$out"
    status=1
  fi
  ./scripts/bench.sh build "$work/bench" || status=1
  "$go" vet ./... || status=1
  "$go" run "$staticcheck" ./... || status=1
  return "$status"
}

report=$work/testreport
"$go" build -o "$report" ./scripts/testreport

echo "test: phase 1: gofmt, vet, staticcheck and the light packages' race tests; the heavy packages' race binaries, the fuzz and the benchmark binaries are built"
phase1=$SECONDS
lane check check
lane build-race ./scripts/race.sh build "$work/race"
lane build-fuzz ./scripts/fuzz.sh build "$work/fuzz"
light=$SECONDS
./scripts/race.sh light | tee "$work/light.json" | "$report" -slowest 0 || failed+=(race-light)
echo "test: race-light $((SECONDS - light))s"
finish check
finish build-race
finish build-fuzz
echo "test: phase 1 took $((SECONDS - phase1))s"

if [[ -n ${AIRLOCK_TEST_BEFORE_HEAVY:-} ]]; then
  waited=$SECONDS
  if ! bash -c "$AIRLOCK_TEST_BEFORE_HEAVY"; then
    # The heavy packages' tests would fail for want of their tools.
    echo "test: FAILED: AIRLOCK_TEST_BEFORE_HEAVY failed after $((SECONDS - waited))s; phase 2 did not run"
    exit 1
  fi
  echo "test: waited $((SECONDS - waited))s for AIRLOCK_TEST_BEFORE_HEAVY"
fi

echo "test: phase 2: the heavy packages' race tests one at a time, beside them fuzzing ($fuzztime a target, one worker); then every benchmark once"
phase2=$SECONDS
lane fuzz env FUZZWORKERS=1 ./scripts/fuzz.sh run "$work/fuzz" "$fuzztime"
heavy=$SECONDS
./scripts/race.sh heavy "$work/race" | tee "$work/heavy.json" | "$report" -slowest 0 || failed+=(race-heavy)
echo "test: race-heavy $((SECONDS - heavy))s"
finish fuzz
lane bench-smoke ./scripts/bench.sh run "$work/bench"
finish bench-smoke
echo "test: phase 2 took $((SECONDS - phase2))s"

cat "$work/light.json" "$work/heavy.json" | "$report" -only-slowest || true
if ((${#failed[@]} > 0)); then
  echo "test: FAILED: ${failed[*]} (${SECONDS}s in all)"
  exit 1
fi
echo "test: ok (${SECONDS}s in all)"
