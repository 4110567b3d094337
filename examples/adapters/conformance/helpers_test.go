package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/validate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(daemontest.Main(m))
}

// harnessTimeout bounds one whole harness run (every probe, a few fresh children each).
const harnessTimeout = 60 * time.Second

// adapterFile returns the absolute path of file in the example adapter dir
// (examples/adapters/dir); the tests run in examples/adapters/conformance.
func adapterFile(t testing.TB, dir, file string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// runtimeBinary returns the absolute path of the interpreter name (python3, node), or skips
// the test when it is not installed. printSelf is a script argument that prints the
// interpreter's own executable: a version-manager shim (pyenv, nvm) is resolved to the real
// binary, so the adapter starts without the shim's latency and with the reduced environment
// an adapter gets.
func runtimeBinary(t testing.TB, name string, printSelf ...string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (not in PATH): skipping its example adapter", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, printSelf...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", p, strings.Join(printSelf, " "), err)
	}
	exe := strings.TrimSpace(string(out))
	if !filepath.IsAbs(exe) {
		t.Fatalf("%s reports its executable as %q", name, exe)
	}
	return exe
}

func python3(t testing.TB) string {
	return runtimeBinary(t, "python3", "-c", "import sys; print(sys.executable)")
}

func node(t testing.TB) string {
	return runtimeBinary(t, "node", "-p", "process.execPath")
}

// conform runs the conformance harness against cfg and fails the test unless every probe
// passes. The fault probes (which test the runtime, not the adapter) are not run. With -v,
// every probe's outcome is logged.
func conform(t *testing.T, cfg validate.Config) validate.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), harnessTimeout)
	defer cancel()
	rep := validate.RunCapability(ctx, cfg)
	for _, p := range rep.Probes {
		status := "PASS"
		switch {
		case !p.Pass:
			status = "FAIL"
		case p.Skipped:
			status = "SKIP"
		}
		t.Logf("%s %s: %s", status, p.Name, p.Detail)
	}
	if !rep.Pass {
		t.Fatalf("the conformance harness failed %d probe(s) of %s %s", rep.Failed, cfg.Command, strings.Join(cfg.Args, " "))
	}
	for _, name := range []string{validate.ProbeList, validate.ProbeDescribe, validate.ProbeObserve,
		validate.ProbeUnknownCapability, validate.ProbeProtocolVersion, validate.ProbeStdinClose} {
		if p, ok := rep.Probe(name); !ok || p.Skipped {
			t.Errorf("probe %s did not run: %+v", name, p)
		}
	}
	if cfg.Action != "" {
		if p, ok := rep.Probe(validate.ProbeInvoke); !ok || p.Skipped {
			t.Errorf("probe invoke did not run: %+v", p)
		}
	}
	return rep
}

// startAdapter starts the adapter through the runtime's own client (the startup handshake
// included) and stops it when the test ends.
func startAdapter(t *testing.T, command string, args ...string) *capclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := capclient.Start(ctx, command, args, capclient.ClientOptions{})
	if err != nil {
		t.Fatalf("start %s: %v", command, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("stop the adapter: %v", err)
		}
		<-c.Done()
		if t.Failed() {
			for _, l := range c.Logs() {
				t.Logf("adapter stderr: %s", l)
			}
		}
	})
	return c
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// observe observes id and decodes the result into v.
func observe(t *testing.T, c *capclient.Client, id string, v any) []byte {
	t.Helper()
	raw, err := c.Observe(callCtx(t), id)
	if err != nil {
		t.Fatalf("observe %s: %v", id, err)
	}
	decode(t, raw, v)
	return raw
}

// invoke invokes id.action with args and decodes the result into v.
func invoke(t *testing.T, c *capclient.Client, id, action, args string, v any) []byte {
	t.Helper()
	raw, err := c.Invoke(callCtx(t), id, action, json.RawMessage(args))
	if err != nil {
		t.Fatalf("invoke %s.%s %s: %v", id, action, args, err)
	}
	decode(t, raw, v)
	return raw
}

func decode(t *testing.T, raw []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

// descriptorsJSON is the encoding of everything the adapter projected at startup.
func descriptorsJSON(t *testing.T, c *capclient.Client) []byte {
	t.Helper()
	b, err := json.Marshal(c.Descriptors())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertHidden fails the test when any of secrets occurs in one of the projected texts.
func assertHidden(t *testing.T, secrets []string, projected ...[]byte) {
	t.Helper()
	for _, p := range projected {
		for _, s := range secrets {
			if s != "" && bytes.Contains(p, []byte(s)) {
				t.Errorf("projected %s reveals %q", p, s)
			}
		}
	}
}

// writeJSON writes v to dir/name, readable by its owner only, and returns the path.
func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
