package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// Claude Code (@anthropic-ai/claude-code, pinned in internal/mcp/testdata/clients with the
// other npm clients; make mcp-clients installs them) is the client a newcomer tries first.
// `claude mcp list` starts every configured stdio server, initializes it and prints whether
// it connected; it needs no login and no network for that, so the test runs the real thing.

// claudeTimeout bounds one run of claude: each takes about two seconds here.
const claudeTimeout = 2 * time.Minute

// claudeCommand returns claude's command line in a private HOME (where it keeps its
// configuration, ~/.claude.json), with the lock file's Node.js first on PATH and its
// non-essential network traffic (update checks, telemetry) off. It fails when the clients
// are not installed in CI (CI is set) and skips elsewhere, as internal/mcp's npm client tests
// do.
func claudeCommand(t *testing.T, ctx context.Context, home string, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "internal", "mcp", "testdata", "clients", "node_modules", ".bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"claude", "node"} {
		if _, err := os.Stat(filepath.Join(bin, n)); err != nil {
			msg := fmt.Sprintf("%s is not installed (run: make mcp-clients)", n)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "claude"), args...)
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "HOME" || name == "PATH" || strings.HasPrefix(name, "ANTHROPIC_") || strings.HasPrefix(name, "CLAUDE") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1")
	cmd.Dir = home
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

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
	ctx, cancel := context.WithTimeout(context.Background(), claudeTimeout)
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
		cmd := claudeCommand(t, ctx, home, line[1:]...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(line, " "), err, b)
		}
	}
	add("airlock-work", d.Socket)
	add("airlock-nodaemon", filepath.Join(root, "none.sock"))

	out, err := claudeCommand(t, ctx, home, "mcp", "list").CombinedOutput()
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

	// The health check's connection is over: its session's grant is revoked.
	deadline := time.Now().Add(waitTimeout)
	for {
		b, err := exec.Command(daemontest.Binary(t, "airlock-fs"), "grants", "--json", "--admin-socket", d.Socket+".fs/admin.sock").Output()
		if err != nil {
			t.Fatalf("airlock-fs grants: %v", err)
		}
		var l struct {
			Grants []json.RawMessage `json:"grants"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Grants) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the health check's grant is still live after %v:\n%s", waitTimeout, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
