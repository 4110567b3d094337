# airlock — make targets. `make run` starts the daemon on its defaults; `make test` is what CI runs.
GO       ?= go
BIN      := bin
FUZZTIME ?= 10s
# make test fuzzes each target with one worker (beside the heavy packages' tests) for this long.
TEST_FUZZTIME ?= 8s
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build run test fmt-check vet lint race fuzz bench-smoke bench bench-fs bench-turns bench-observe bench-mcp bench-mcp-ts bench-rooms bench-fabric mcp-clients clean

all: build

# The binaries, and the Go example adapter the README's room walkthrough registers.
build:
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/adapters/go-lamp

# Start airlockd in the foreground on the default socket and state directory.
run: build
	./$(BIN)/airlockd

# Every check below (fmt-check, vet, lint, race, fuzz with TEST_FUZZTIME a target, bench-smoke),
# overlapped where they do not compete for the CPU the heavy tests' deadlines assume, with
# each lane's time and the ten slowest tests at the end: scripts/test.sh says how.
test:
	GO=$(GO) FUZZTIME=$(TEST_FUZZTIME) STATICCHECK=$(STATICCHECK) ./scripts/test.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint:
	$(GO) run $(STATICCHECK) ./...

# The light packages side by side, then one at a time those that start daemons, NATS clusters,
# Chromium or deadline-bound children (scripts/race.sh says why); the ten slowest tests at the end.
race:
	GO=$(GO) ./scripts/race.sh

# A short pass of every fuzz target over its committed corpus and fresh inputs.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# Every benchmark of the module once (-benchtime 1x, -short), so that a broken one fails CI;
# scripts/bench.sh says what -short shrinks. BenchmarkMCPFilesystem needs the npm clients (make
# mcp-clients, which .ci/run runs first) and BenchmarkFabricInvoke the loopback addresses
# 127.0.0.2-4.
bench-smoke:
	GO=$(GO) ./scripts/bench.sh

# Each bench target runs within the daemon's limits as it sets them: a benchmark that connects
# more than 16 clients from its own process (the per-process share against floods, past which
# its idle connections are evicted) raises the share in its own daemon config, and says so.

# Round trips through airlockd against bare-socket baselines measured in the same run
# (InvokeTool's 64 clients: the share raised to 64).
bench:
	$(GO) test -run '^$$' -bench 'StatusRoundTrip|InvokeTool' -benchtime 20000x ./internal/daemon/

# airlock-fs through airlockd against a two-hop echo, cat, grep and rg (1–2 minutes; needs grep;
# 64 clients: the share raised with the total to 256).
bench-fs:
	$(GO) test -run '^$$' -bench FSThroughDaemon -benchtime 2s ./cmd/airlock-fs/

# Durable wake admission (fsync'd, 1 and 64 clients: the share raised to 64) and a restart over
# 4,096 sessions.
bench-turns:
	$(GO) test -run '^$$' -bench WakeAdmission -benchtime 4000x ./internal/daemon/
	$(GO) test -run '^$$' -bench Recovery -benchtime 5x ./internal/daemon/

# observe through airlockd against a stdio echo and an MCP Go SDK tools/call (one client each:
# the default limits).
bench-observe:
	$(GO) test -run '^$$' -bench ObserveRoundTrip -benchtime 5000x ./internal/bench/

# The real MCP clients and the reference filesystem server, pinned in package-lock.json (needs npm).
mcp-clients:
	npm ci --prefix internal/mcp/testdata/clients --no-audit --no-fund --loglevel=error

# airlock mcp's fs tools against @modelcontextprotocol/server-filesystem, one go-sdk client, and
# both servers' answers to the 2025 advisories of the reference (1–3 minutes; each bridge is a
# process of its own, with at most 16 connections: the default limits).
bench-mcp: mcp-clients
	$(GO) test -run '^$$' -bench '^BenchmarkMCPFilesystem$$' -benchtime 1000x ./internal/mcp/

# make bench-mcp's rows, a listing of 20 entries and a 4 KiB write and edit, with the
# TypeScript SDK's client.
bench-mcp-ts: mcp-clients
	$(GO) test -run '^$$' -bench '^BenchmarkMCPFilesystemTS$$' -benchtime 300x ./internal/mcp/

# A room invoke from one daemon's socket through the bus to another's adapter, against a bare
# NATS request/reply on the same embedded server and a local invokeCapability (the default
# limits).
bench-rooms:
	$(GO) test -run '^$$' -bench RoomInvoke -benchtime 3000x ./internal/bench/

# A room invoke across a three-node TLS cluster (127.0.0.2-4) against a bare NATS request on the
# same path, then 200 hosts in 20 rooms in one process (invokes/s, heap per host).
bench-fabric:
	$(GO) test -run '^$$' -bench FabricInvoke -benchtime 3000x ./internal/bus/
	$(GO) test -run '^$$' -bench FabricRooms -benchtime 4000x ./internal/bus/

clean:
	rm -rf $(BIN)
