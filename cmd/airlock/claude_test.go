package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// Claude Code (@anthropic-ai/claude-code, pinned in internal/mcp/testdata/clients with the
// other npm clients; make mcp-clients installs them) is the client a newcomer tries first.
// `claude mcp list` starts every configured stdio server, initializes it and prints whether
// it connected; it needs no login and no network for that, so the test runs the real thing.

// TestClaudeCodeMCPList: the `claude mcp add` line that `airlock mcp config --client claude`
// prints, pasted into Claude Code, gives a server that `claude mcp list` reports connected;
// the health check's connection ends, and with it the session's grant. The same line aimed at
// a socket with no daemon behind it reports a failure that names the command starting the
// daemon, so the check tells the two apart.
func TestClaudeCodeMCPList(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Claude Code (Node.js) against the real binaries")
	}
	daemontest.Binary(t, "airlock-fs") // airlockd runs the one beside it
	d := daemontest.Start(t, daemontest.Options{})
	airlock := daemontest.Binary(t, "airlock")
	root := daemontest.ShortDir(t)
	work, home := filepath.Join(root, "work"), filepath.Join(root, "home")
	for _, dir := range []string{work, home} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()

	add := func(name, socket string) {
		t.Helper()
		out, err := exec.Command(airlock, "--socket", socket, "mcp", "config", "--dir", work, "--client", "claude").Output()
		if err != nil {
			t.Fatalf("airlock mcp config: %v", err)
		}
		line := strings.Fields(string(out))
		if len(line) < 5 || strings.Join(line[:3], " ") != "claude mcp add" || line[4] != "--" {
			t.Fatalf("airlock mcp config --client claude printed %q, want a claude mcp add line", out)
		}
		line[3] = name
		cmd := claudeCode.command(t, ctx, home, line[1:]...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(line, " "), err, b)
		}
	}
	add("airlock-work", d.Socket)
	add("airlock-nodaemon", filepath.Join(root, "none.sock"))

	out, err := claudeCode.command(t, ctx, home, "mcp", "list").CombinedOutput()
	t.Logf("claude mcp list:\n%s", out)
	if err != nil {
		t.Fatalf("claude mcp list: %v", err)
	}
	// Connected, or failed with the error that names the command starting the daemon (Claude
	// Code prints it with the socket paths replaced by [redacted]).
	for name, want := range map[string][]string{"airlock-work": {"✔ Connected"}, "airlock-nodaemon": {"✘ Failed to connect", "daemon_unreachable", "start it with"}} {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `: .* - (.+)$`).FindSubmatch(out)
		if m == nil || !strings.HasPrefix(string(m[1]), want[0]) {
			t.Errorf("claude mcp list did not report %s as %q", name, want[0])
			continue
		}
		for _, w := range want[1:] {
			if !strings.Contains(string(m[1]), w) {
				t.Errorf("claude mcp list on %s: %q, want it to contain %q", name, m[1], w)
			}
		}
	}

	// The health check's connection is over: its session is gone, and its grant revoked.
	waitMCPSessionOpenedAndGone(t, d, realExe(t, airlock))
}
