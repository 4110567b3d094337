# airlock — make targets. `make run` starts the daemon on its defaults; `make test` is what CI runs.
GO       ?= go
BIN      := bin
FUZZTIME ?= 10s
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build run test fmt-check vet lint race fuzz bench clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Start airlockd in the foreground on the default socket and state directory.
run: build
	./$(BIN)/airlockd

test: fmt-check vet lint race fuzz

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint:
	$(GO) run $(STATICCHECK) ./...

race:
	$(GO) test -race -count=1 ./...

# A short pass of every fuzz target over its committed corpus and fresh inputs.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 20000x ./internal/daemon/

# airlock-fs through airlockd against a two-hop echo, cat, grep and rg (1–2 minutes; needs grep).
.PHONY: bench-fs
bench-fs:
	$(GO) test -run '^$$' -bench FSThroughDaemon -benchtime 2s ./cmd/airlock-fs/

clean:
	rm -rf $(BIN)
