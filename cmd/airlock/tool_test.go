package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestToolSaysItWaitsForApproval: airlock tool, held at the gate because the session's policy
// asks about writes, says so on stderr while it waits, naming the request and the commands
// that decide it; approved, the write runs and the command succeeds. Before, it hung silently
// for up to the approval timeout, and whoever ran it had to guess at airlock approvals.
func TestToolSaysItWaitsForApproval(t *testing.T) {
	t.Parallel()
	daemontest.Binary(t, "airlock-fs") // beside airlockd, where it runs it from
	d := startDaemon(t)
	work := t.TempDir()
	cli(t, d.Socket, "", "session", "open", "w", "--generation", "1", "--cwd", work,
		"--fs-ops", "fs.read,fs.write", "--policy", "ask-writes").wantCode(t, exitOK)

	cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", d.Socket,
		"tool", "w", "fs.write", "--generation", "1", "--arg", "path=a.txt", "--arg", "content=approved")
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := regexp.MustCompile("airlock: waiting for the operator's approval until [0-9:]+ \\(session policy rule 1 .*\\): airlock approve ([0-9a-f]+), or airlock deny ([0-9a-f]+)\n")
	var m []string
	waitFor(t, "airlock tool to say it waits for approval", func() bool {
		m = waiting.FindStringSubmatch(stderr.String())
		return m != nil
	})
	if m[1] != m[2] {
		t.Errorf("the line names two requests: %q", m[0])
	}
	var l struct {
		Approvals []pendingView `json:"approvals"`
	}
	decode(t, envelopeOf(t, cli(t, d.Socket, "", "approvals", "--json").wantCode(t, exitOK), "approvals", true).Data, &l)
	if len(l.Approvals) != 1 || l.Approvals[0].ID != m[1] || l.Approvals[0].Path != "a.txt" {
		t.Fatalf("the queue %+v, the line names %s", l.Approvals, m[1])
	}
	cli(t, d.Socket, "", "approve", m[1]).wantCode(t, exitOK)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("airlock tool after the approval: %v\n%s", err, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(work, "a.txt")); err != nil || string(b) != "approved" {
		t.Errorf("a.txt %q, %v", b, err)
	}
	if n := strings.Count(stderr.String(), "waiting for the operator's approval"); n != 1 {
		t.Errorf("said %d times that it waits:\n%s", n, stderr)
	}
}
