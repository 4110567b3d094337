package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestAdapterProposalsCommand: airlock adapter proposals lists agents' proposals, every one
// or one session generation's, as a table and as JSON; --session without --generation is a
// usage error.
func TestAdapterProposalsCommand(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	d := daemontest.Start(t, daemontest.Options{})
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "counter.py"), []byte(daemontest.CounterAdapter), 0o600); err != nil {
		t.Fatal(err)
	}
	cli(t, d.Socket, "", "session", "open", "agent", "--generation", "1", "--cwd", cwd, "--mode", "memory",
		"--policy", writePolicy(t, `{"default":"allow","proposals":"allow"}`)).wantCode(t, exitOK)
	if r := cli(t, d.Socket, "", "session", "show", "agent").wantCode(t, exitOK); !strings.Contains(r.stdout, "; adapter proposals allowed") {
		t.Fatalf("session show:\n%s", r.stdout)
	}
	r := cli(t, d.Socket, "", "adapter", "proposals").wantCode(t, exitOK)
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("no proposals: %q", r.stdout)
	}
	g := int64(1)
	resp, err := d.Dial().Call(context.Background(), client.Command{Operation: "proposeAdapter", SessionID: "agent", Generation: &g,
		Payload: map[string]any{"proposal": map[string]any{"name": "counter", "command": "python3", "args": []string{"counter.py"}, "capabilities": []string{"agent_counter"}}}})
	if err != nil || !resp.OK {
		t.Fatalf("proposeAdapter: %v %v", err, resp.Err())
	}
	r = cli(t, d.Socket, "", "adapter", "proposals").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "counter  pending_run  agent/1") || !strings.Contains(r.stdout, filepath.Join(cwd, "counter.py")) {
		t.Fatalf("adapter proposals:\n%s", r.stdout)
	}
	r = cli(t, d.Socket, "", "adapter", "proposals", "--session", "other", "--generation", "1", "--json").wantCode(t, exitOK)
	if env := envelopeOf(t, r, "adapter proposals", true); strings.Join(strings.Fields(string(env.Data)), "") != `{"proposals":[]}` {
		t.Fatalf("another session's: %s", env.Data)
	}
	cli(t, d.Socket, "", "adapter", "proposals", "--session", "agent").wantCode(t, exitUsage)
}
