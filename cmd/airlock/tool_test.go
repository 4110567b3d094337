package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
)

func TestToolArguments(t *testing.T) {
	a := &app{}
	raw, err := a.toolArguments(argFlags{"path=src/a.go", "maxBytes=4096", "overwrite=true", `quoted="x"`})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(raw, &got)
	if got["path"] != "src/a.go" || got["maxBytes"] != 4096.0 || got["overwrite"] != true || got["quoted"] != `"x"` {
		t.Fatalf("arguments %s", raw)
	}
	for _, bad := range []argFlags{{"novalue"}, {"=x"}, {"a=1", "a=2"}} {
		if _, err := a.toolArguments(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	a.stdin = strings.NewReader(` {"path":"."} `)
	if raw, err := a.toolArguments(nil); err != nil || string(raw) != `{"path":"."}` {
		t.Fatalf("stdin arguments: %s %v", raw, err)
	}
	a.stdin = strings.NewReader(`[1]`)
	if _, err := a.toolArguments(nil); err == nil {
		t.Fatal("a JSON array on stdin accepted")
	}
	a.stdin = strings.NewReader(`{"content":"` + strings.Repeat("x", maxArgumentsBytes) + `"}`)
	if _, err := a.toolArguments(nil); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized stdin arguments: %v", err)
	}
}

func TestToolAndDescriptorCommands(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	cli := func(stdin string, args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"--socket", d.Socket}, args...), strings.NewReader(stdin), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	cwd := t.TempDir()
	if code, _, errOut := cli("", "session", "open", "plain", "--generation", "1", "--cwd", cwd); code != 0 {
		t.Fatalf("open: %s", errOut)
	}
	if code, _, errOut := cli("", "tool", "plain", "fs.stat", "--generation", "1", "--arg", "path=."); code != 1 || !strings.Contains(errOut, "adapter_operation_denied") {
		t.Fatalf("tool on a session without tools: %d %s", code, errOut)
	}
	// A descriptor bound to another host is refused by the daemon, and the CLI never prints
	// the handle it read.
	handle := strings.Repeat("h", 43)
	desc := `{"protocolVersion":"1.0","adapterId":"fs","adapterVersion":"1.0.0","endpoint":{"transport":"unix","path":"/tmp/none.sock"},` +
		`"binding":{"hostInstanceId":"elsewhere","sessionId":"tooled","generation":1,"capabilityHandle":"` + handle + `"},"operations":["fs.read"],` +
		`"limits":{"maxRequestBytes":1048576,"maxResponseBytes":1048576,"maxConcurrentRequests":4,"maxQueuedRequests":16,"requestTimeoutMs":30000,"maxIdempotencyKeys":256,"idempotencyTtlMs":3600000}}`
	file := filepath.Join(t.TempDir(), "d.json")
	os.WriteFile(file, []byte(desc), 0o600)
	for _, src := range []struct{ stdin, flag string }{{"", file}, {desc, "-"}} {
		code, out, errOut := cli(src.stdin, "session", "open", "tooled", "--generation", "1", "--cwd", cwd, "--descriptor", src.flag, "--json")
		if code != 1 || !strings.Contains(errOut, "tool_adapter_binding_mismatch") {
			t.Fatalf("open with a stale descriptor (%s): %d %s", src.flag, code, errOut)
		}
		if strings.Contains(out+errOut, handle) {
			t.Fatal("the capability handle was printed")
		}
	}
	if code, _, _ := cli("[]", "session", "open", "x", "--generation", "1", "--cwd", cwd, "--descriptor", "-"); code != 2 {
		t.Fatalf("a descriptor that is not an object: exit %d", code)
	}
}
