package validate

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// The test binary re-executes itself as an adapter, with the mode in argv: adapters get an
// allowlisted environment only, so a variable could not select it.
const (
	adapterArg = "airlock-validate-test-adapter"
	faultArg   = "airlock-validate-test-fault"
)

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == adapterArg {
		// syscall.Exit skips the race detector's exit-time sleep, which would make a clean
		// exit on stdin close miss StdinCloseBound.
		syscall.Exit(testAdapter(os.Args[2]))
	}
	if len(os.Args) == 3 && os.Args[1] == faultArg {
		syscall.Exit(RunFaultAdapter(os.Args[2], os.Stdin, os.Stdout))
	}
	goleak.VerifyTestMain(daemontest.Main(m))
}

func self(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err = filepath.EvalSymlinks(exe)
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// testConfig runs the test adapter in mode, without fault probes.
func testConfig(t testing.TB, mode string) Config {
	return Config{Command: self(t), Args: []string{adapterArg, mode}, Action: "set_level", ActionArgs: json.RawMessage(`{"level":3}`)}
}

// faultConfig returns the test binary's fault adapters.
func faultConfig(t testing.TB) func(string) (string, []string) {
	exe := self(t)
	return func(mode string) (string, []string) { return exe, []string{faultArg, mode} }
}

// trackChildren records every child started until the test ends, then checks that each was
// reaped and its process group is gone.
func trackChildren(t *testing.T) {
	var mu sync.Mutex
	var children []*capclient.Client
	onSpawn = func(c *capclient.Client) {
		mu.Lock()
		children = append(children, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		onSpawn = nil
		mu.Lock()
		defer mu.Unlock()
		if len(children) == 0 {
			t.Error("no child was started")
		}
		for _, c := range children {
			select {
			case <-c.Done():
			default:
				t.Errorf("child %d was not reaped", c.PID())
				continue
			}
			if err := syscall.Kill(-c.PID(), 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("process group %d is still alive: %v", c.PID(), err)
			}
		}
	})
}

const lightDescriptor = `{"capabilityId":"test_light","title":"Test light","version":"1","observe":true,"actions":[` +
	`{"name":"set_level","title":"Set level","input":{"type":"object","properties":{"level":"number","label":"string"},"required":["level"]}},` +
	`{"name":"flip","title":"Flip","input":{"type":"object","properties":{}}}]}`

// testAdapter is a strict, conforming adapter of test_light, unless mode names the one rule
// it breaks:
//
//	good                 conforms to every probe
//	accept-args          never answers invalid_args
//	url-result           observe returns a URL
//	no-exit              ignores stdin close
//	describe-differs     describe returns another title than list
//	sensitive            lists a descriptor with an "endpoint" property
//	slow-observe         answers observe after 20 s
//	big-result           observe returns 5,000 bytes
//	version-result       answers a wrong protocolVersion with a result
//	version-other-id     answers a wrong protocolVersion with invalid_request and the id
//	                     "invalid" (as Free4Chat's CUPS adapter does), then keeps serving
//	version-other-id-exit  the same answer, then exits
//	version-other-result answers a wrong protocolVersion with a result and the id "invalid"
//	no-unsupported-*     answers the probe of that code with invalid_request
//	no-unknown-capability
//	amp-titles           lists titles of 64 "&", a descriptor within 1024 bytes as written
//	                     and over it as the runtime measures it (& escaped as \u0026)
//	exit-status          on stdin close, complains on stderr and exits with status 3
//	crash-observe        on observe, complains on stderr and exits with status 1
func testAdapter(mode string) int {
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	out := bufio.NewWriter(os.Stdout)
	send := func(v map[string]any) {
		v["protocolVersion"] = 1
		enc := json.NewEncoder(out) // writes & as it is, as other languages do
		enc.SetEscapeHTML(false)
		enc.Encode(v)
		out.Flush()
	}
	desc := lightDescriptor
	switch mode {
	case "sensitive":
		desc = strings.Replace(desc, `"label":"string"`, `"endpoint":"string"`, 1)
	case "amp-titles":
		desc = strings.NewReplacer(`"Test light"`, `"`+strings.Repeat("&", 64)+`"`, `"Set level"`, `"`+strings.Repeat("&", 64)+`"`,
			`"Flip"`, `"`+strings.Repeat("&", 64)+`"`).Replace(desc)
	}
	level := 0.0
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			switch mode {
			case "no-exit":
				time.Sleep(time.Hour)
			case "exit-status":
				os.Stderr.WriteString("cleanup failed: lost the device\n")
				return 3
			}
			return 0
		}
		var req struct {
			ProtocolVersion int             `json:"protocolVersion"`
			ID              string          `json:"id"`
			Method          string          `json:"method"`
			CapabilityID    string          `json:"capabilityId"`
			Action          string          `json:"action"`
			Args            json.RawMessage `json:"args"`
		}
		if json.Unmarshal(line, &req) != nil || req.ID == "" {
			send(map[string]any{"id": "?", "error": map[string]any{"code": "invalid_request"}})
			continue
		}
		fail := func(code string) { send(map[string]any{"id": req.ID, "error": map[string]any{"code": code}}) }
		ok := func(r any) { send(map[string]any{"id": req.ID, "result": r}) }
		if req.ProtocolVersion != 1 {
			switch mode {
			case "version-result":
				ok([]any{})
			case "version-other-id", "version-other-id-exit":
				send(map[string]any{"id": "invalid", "error": map[string]any{"code": "invalid_request"}})
				if mode == "version-other-id-exit" {
					return 0
				}
			case "version-other-result":
				send(map[string]any{"id": "invalid", "result": []any{}})
			default:
				fail("invalid_request")
			}
			continue
		}
		switch req.Method {
		case "list", "describe", "observe", "invoke":
		default:
			if mode == "no-unsupported-method" {
				fail("invalid_request")
			} else {
				fail("unsupported_method")
			}
			continue
		}
		if req.Method == "list" {
			ok([]json.RawMessage{json.RawMessage(desc)})
			continue
		}
		if req.CapabilityID != "test_light" {
			if mode == "no-unknown-capability" {
				fail("invalid_request")
			} else {
				fail("unknown_capability")
			}
			continue
		}
		switch req.Method {
		case "describe":
			if mode == "describe-differs" {
				ok(json.RawMessage(strings.Replace(desc, "Test light", "Other light", 1)))
			} else {
				ok(json.RawMessage(desc))
			}
		case "observe":
			switch mode {
			case "url-result":
				ok(map[string]any{"note": "see https://example.com/x"})
			case "big-result":
				ok(map[string]any{"blob": strings.Repeat("a", 5000)})
			case "crash-observe":
				os.Stderr.WriteString("observe crashed: no device\n")
				return 1
			case "slow-observe":
				time.Sleep(20 * time.Second)
				ok(map[string]any{"level": level})
			default:
				ok(map[string]any{"level": level})
			}
		case "invoke":
			var args map[string]json.RawMessage
			valid := json.Unmarshal(req.Args, &args) == nil && args != nil
			switch req.Action {
			case "set_level":
				var l float64
				raw, has := args["level"]
				valid = valid && has && json.Unmarshal(raw, &l) == nil
				if lb, has := args["label"]; has {
					var s string
					valid = valid && json.Unmarshal(lb, &s) == nil
				}
				for k := range args {
					valid = valid && (k == "level" || k == "label")
				}
				if !valid && mode != "accept-args" {
					fail("invalid_args")
					continue
				}
				level = l
				ok(map[string]any{"level": level})
			case "flip":
				if (!valid || len(args) > 0) && mode != "accept-args" {
					fail("invalid_args")
					continue
				}
				ok(true)
			default:
				if mode == "no-unsupported-action" {
					fail("invalid_request")
				} else {
					fail("unsupported_action")
				}
			}
		}
	}
}

// buildLamp builds examples/adapters/go-lamp without -race: a race-built binary sleeps a second
// when it exits with status 0, which would miss StdinCloseBound.
func buildLamp(t *testing.T) string {
	t.Helper()
	return buildAdapter(t, "./examples/adapters/go-lamp")
}

// buildAdapter builds the adapter's main package at pkg (relative to the module root).
func buildAdapter(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}
