package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Claude Code (@anthropic-ai/claude-code, pinned in internal/mcp/testdata/clients with the
// other npm clients; make mcp-clients installs them) is the client a newcomer tries first.
// `claude mcp list` starts every configured stdio server, initializes it and prints whether
// it connected; it needs no login and no network for that, so the test runs the real thing.

// TestClaudeCodeMCPList: the `claude mcp add` line that `airlock mcp config --client claude`
// prints, pasted into a shell in the home directory, stores airlock's command and arguments
// exactly (a DIR that needs quoting, --caps=0x10), and `claude mcp list` reports the --dir
// server connected; the health check's connection ends, and with it the session and its
// grant. The same line aimed at a socket with no daemon behind it reports a failure that
// names the command starting the daemon, so the check tells the two apart.
func TestClaudeCodeMCPList(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Claude Code (Node.js) against the real binaries")
	}
	claudeCode.binDir(t)
	d, airlock, root, work, home := mcpClientSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()

	servers := configuredServers(d, root, work)
	for _, srv := range servers {
		line := configLine(t, airlock, srv.socket, work, "claude", "claude mcp add "+srv.name+" -- ", append([]string{"--name", srv.name}, srv.flags...)...)
		if b, err := claudeCode.shell(t, ctx, home, line).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, b)
		}
	}
	// `claude mcp add` keeps a server in ~/.claude.json, under the directory it ran in (its
	// default scope, local).
	b, err := os.ReadFile(filepath.Join(home, ".claude.json"))
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Projects map[string]struct {
			MCPServers map[string]struct {
				Type    string   `json:"type"`
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"mcpServers"`
		} `json:"projects"`
	}
	decode(t, b, &config)
	for _, srv := range servers {
		s, ok := config.Projects[home].MCPServers[srv.name]
		if !ok || s.Type != "stdio" || s.Command != realExe(t, airlock) || !slices.Equal(s.Args, srv.argv) {
			t.Errorf("claude stored %s as %s %q %q, want stdio %q %q", srv.name, s.Type, s.Command, s.Args, realExe(t, airlock), srv.argv)
		}
	}

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
