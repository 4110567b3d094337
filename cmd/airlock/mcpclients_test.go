package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

// The coding agents a newcomer tries, as npm packages pinned in internal/mcp/testdata/clients
// (make mcp-clients installs them): Claude Code (claude_test.go), Gemini CLI and Codex. Each
// test pastes the line that `airlock mcp config --client NAME` prints into the real CLI, in a
// private HOME, and has the CLI start the server against a real airlockd; none needs a login
// or the network.

// npmClient is one of those CLIs: its command in node_modules/.bin, the variables of the
// caller's environment it must not see (its credentials and configuration overrides, which
// would make the run the caller's rather than the test's), and the variables that turn its
// network-using features off.
type npmClient struct {
	bin  string
	drop func(name string) bool
	env  []string
}

var (
	claudeCode = npmClient{
		bin: "claude",
		drop: func(n string) bool {
			return strings.HasPrefix(n, "ANTHROPIC_") || strings.HasPrefix(n, "CLAUDE")
		},
		env: []string{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"},
	}
	// Gemini CLI also reads its settings file, which geminiSettings writes, for its update
	// checks and usage statistics. GEMINI_CLI_TRUST_WORKSPACE is its documented way to trust
	// the working directory without the trust dialog (docs/cli/trusted-folders.md, "Headless
	// and automated environments"): folder trust is on by default in 0.61, and `gemini mcp
	// list` does not start a stdio server in an untrusted folder.
	geminiCLI = npmClient{
		bin: "gemini",
		drop: func(n string) bool {
			return strings.HasPrefix(n, "GEMINI_") || strings.HasPrefix(n, "GOOGLE_")
		},
		env: []string{"GEMINI_TELEMETRY_ENABLED=false", "GEMINI_CLI_TRUST_WORKSPACE=true"},
	}
	// Codex's update check and analytics are off in the config.toml that codexConfig writes.
	codexCLI = npmClient{
		bin: "codex",
		drop: func(n string) bool {
			return strings.HasPrefix(n, "OPENAI_") || strings.HasPrefix(n, "CODEX_")
		},
	}
)

// clientTimeout bounds one test's runs of a client: each run takes one to a few seconds here.
const clientTimeout = 2 * time.Minute

// binDir is node_modules/.bin of the pinned clients. It fails the test when c or the lock
// file's Node.js is not installed in CI (CI is set) and skips it elsewhere, as internal/mcp's
// npm client tests do.
func (c npmClient) binDir(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "internal", "mcp", "testdata", "clients", "node_modules", ".bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{c.bin, "node"} {
		if _, err := os.Stat(filepath.Join(bin, n)); err != nil {
			msg := fmt.Sprintf("%s is not installed (run: make mcp-clients)", n)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return bin
}

// command returns the client's command line with args, run in home as its HOME and working
// directory, with the lock file's Node.js and clients first on PATH.
func (c npmClient) command(t *testing.T, ctx context.Context, home string, args ...string) *exec.Cmd {
	t.Helper()
	bin := c.binDir(t)
	return c.in(exec.CommandContext(ctx, filepath.Join(bin, c.bin), args...), bin, home)
}

// shell returns a shell running line, a line as a person pastes it into a terminal, in the
// client's environment (so its first word finds the pinned client).
func (c npmClient) shell(t *testing.T, ctx context.Context, home, line string) *exec.Cmd {
	t.Helper()
	return c.in(exec.CommandContext(ctx, "/bin/sh", "-c", line), c.binDir(t), home)
}

func (c npmClient) in(cmd *exec.Cmd, bin, home string) *exec.Cmd {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "HOME" || name == "PATH" || c.drop(name) {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(append(env, "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH")), c.env...)
	cmd.Dir = home
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// mcpClientSetup starts airlockd (with the airlock-fs beside it) and makes a DIR whose name
// needs shell quoting and a private HOME, under one short directory.
func mcpClientSetup(t *testing.T) (d *daemontest.Daemon, airlock, root, work, home string) {
	t.Helper()
	daemontest.Binary(t, "airlock-fs") // airlockd runs the one beside it
	d = daemontest.Start(t, daemontest.Options{})
	airlock = daemontest.Binary(t, "airlock")
	root = daemontest.ShortDir(t)
	work, home = filepath.Join(root, "work dir's"), filepath.Join(root, "home")
	for _, dir := range []string{work, home} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if work, err = filepath.EvalSymlinks(work); err != nil {
		t.Fatal(err)
	}
	return d, airlock, root, work, home
}

// configLine is the line `airlock mcp config --client client` prints for socket and work,
// after checking that it starts with prefix.
func configLine(t *testing.T, airlock, socket, work, client, prefix string, flags ...string) string {
	t.Helper()
	out, err := exec.Command(airlock, append([]string{"--socket", socket, "mcp", "config", "--dir", work, "--client", client}, flags...)...).Output()
	if err != nil {
		t.Fatalf("airlock mcp config: %v", err)
	}
	line := strings.TrimSuffix(string(out), "\n")
	if !strings.HasPrefix(line, prefix) || strings.Contains(line, "\n") {
		t.Fatalf("airlock mcp config --client %s printed %q, want one line starting %q", client, out, prefix)
	}
	return line
}

// realExe is the path of the executable at p as /proc names it (and airlock mcp config
// prints it): symbolic links resolved.
func realExe(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitMCPSessionOpenedAndGone waits until the audit journal of d holds a successful open of
// an airlock mcp --dir session by the airlock executable exe (so the client did start the
// server, and the server reached the daemon), and then until no such session is left in the
// catalog and airlock-fs lists no grant (the client's connection ended, and with it the
// session and its grant).
func waitMCPSessionOpenedAndGone(t *testing.T, d *daemontest.Daemon, exe string) {
	t.Helper()
	waitFor(t, "the audit journal to record the client's airlock mcp session", func() bool {
		r := cli(t, d.Socket, "", "audit", "--dir", filepath.Join(d.StateDir, "audit"), "--json").wantCode(t, exitOK)
		for l := range strings.Lines(r.stdout) {
			var rec struct {
				Actor struct {
					Exe     string `json:"exe"`
					Session string `json:"session"`
				} `json:"actor"`
				Target struct {
					Op string `json:"op"`
				} `json:"target"`
				Outcome string `json:"outcome"`
			}
			decode(t, []byte(l), &rec)
			if rec.Target.Op == "session.open" && rec.Outcome == "ok" && rec.Actor.Exe == exe && strings.HasPrefix(rec.Actor.Session, "mcp-") {
				return true
			}
		}
		return false
	})
	waitFor(t, "the client's airlock mcp session to be gone", func() bool {
		return !slices.ContainsFunc(sessionIDs(t, d.Socket), func(id string) bool { return strings.HasPrefix(id, "mcp-") })
	})
	waitFor(t, "the session's grant to be revoked", func() bool {
		b, err := exec.Command(daemontest.Binary(t, "airlock-fs"), "grants", "--json", "--admin-socket", d.Socket+".fs/admin.sock").Output()
		if err != nil {
			t.Fatalf("airlock-fs grants: %v", err)
		}
		var l struct {
			Grants []json.RawMessage `json:"grants"`
		}
		decode(t, b, &l)
		return len(l.Grants) == 0
	})
}

// configuredServer is one server a test adds to a client: its name, the socket and flags
// given to airlock mcp config, and the argv that the client must store for it.
type configuredServer struct {
	name, socket string
	flags, argv  []string
}

// configuredServers are the two servers each client test adds: the --dir server of d, under
// a built-in policy, and one on a socket with no daemon behind it, which also names a
// capability id that Gemini CLI's argument parser (yargs) reads as a number when it is a word
// of its own, and --reopen-for 0, to show that every argument is stored as airlock printed it.
func configuredServers(d *daemontest.Daemon, root, work string) []configuredServer {
	none := filepath.Join(root, "none.sock")
	return []configuredServer{
		{name: "airlock-work", socket: d.Socket, flags: []string{"--policy", "ask-writes"},
			argv: []string{"--socket", d.Socket, "mcp", "--dir", work, "--policy", "ask-writes"}},
		{name: "airlock-nodaemon", socket: none, flags: []string{"--caps", "0x10", "--reopen-for", "0"},
			argv: []string{"--socket", none, "mcp", "--dir", work, "--caps=0x10", "--reopen-for=0s"}},
	}
}

// geminiSettings writes the user settings of Gemini CLI 0.61 in home that turn off its
// update checks and usage statistics (docs/reference/configuration.md); `gemini mcp add
// --scope user` adds its server to the same file.
func geminiSettings(t *testing.T, home string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(home, ".gemini"), 0o700); err != nil {
		t.Fatal(err)
	}
	settings := `{"general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
 "privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false}}`
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestGeminiCLIMCPList: the `gemini mcp add` line that `airlock mcp config --client gemini`
// prints, pasted into a shell in the home directory, stores airlock's command and arguments
// exactly, and `gemini mcp list`, which starts every stdio server and initializes it, reports
// the --dir server connected; airlockd saw the session open, and it and its grant are gone
// once the check's connection ends. The same line aimed at a socket with no daemon behind it
// is reported disconnected. `gemini mcp list` needs no login and no network for that (run
// under unshare -n it prints the same); it needs a trusted working directory, which the
// test's environment gives.
func TestGeminiCLIMCPList(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Gemini CLI (Node.js) against the real binaries")
	}
	geminiCLI.binDir(t)
	d, airlock, root, work, home := mcpClientSetup(t)
	geminiSettings(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()

	servers := configuredServers(d, root, work)
	for _, srv := range servers {
		line := configLine(t, airlock, srv.socket, work, "gemini", "gemini mcp add ", append([]string{"--name", srv.name}, srv.flags...)...)
		if b, err := geminiCLI.shell(t, ctx, home, line).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, b)
		}
	}
	b, err := os.ReadFile(filepath.Join(home, ".gemini", "settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	var settings struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
		Privacy struct {
			UsageStatisticsEnabled *bool `json:"usageStatisticsEnabled"`
		} `json:"privacy"`
	}
	decode(t, b, &settings)
	if settings.Privacy.UsageStatisticsEnabled == nil || *settings.Privacy.UsageStatisticsEnabled {
		t.Fatalf("gemini mcp add lost the settings that turn usage statistics off:\n%s", b)
	}
	for _, srv := range servers {
		s, ok := settings.MCPServers[srv.name]
		if !ok || s.Command != realExe(t, airlock) || !slices.Equal(s.Args, srv.argv) {
			t.Errorf("gemini stored %s as %q %q, want %q %q", srv.name, s.Command, s.Args, realExe(t, airlock), srv.argv)
		}
	}

	out, err := geminiCLI.command(t, ctx, home, "mcp", "list").CombinedOutput()
	t.Logf("gemini mcp list:\n%s", out)
	if err != nil {
		t.Fatalf("gemini mcp list: %v", err)
	}
	for name, want := range map[string]string{"airlock-work": "Connected", "airlock-nodaemon": "Disconnected"} {
		m := regexp.MustCompile(`(?m)^. ` + regexp.QuoteMeta(name) + `: .* \(stdio\) - (\S+)$`).FindSubmatch(out)
		if m == nil || string(m[1]) != want {
			t.Errorf("gemini mcp list did not report %s as %s", name, want)
		}
	}
	waitMCPSessionOpenedAndGone(t, d, realExe(t, airlock))
}

// codexConfig writes the config.toml of Codex 0.171 in home that turns off its update check
// at startup and its analytics; `codex mcp add` adds its servers to the same file.
func codexConfig(t *testing.T, home string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(home, ".codex"), 0o700); err != nil {
		t.Fatal(err)
	}
	config := "check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n"
	if err := os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
}

// appServerMaxLine bounds one line that the Codex app server writes: its answer to
// mcpServerStatus/list holds every tool's schemas.
const appServerMaxLine = 8 << 20

// TestCodexMCPAdd: the `codex mcp add` line that `airlock mcp config --client codex` prints,
// pasted into a shell, stores airlock's command and arguments exactly (`codex mcp get
// --json`). `codex mcp list` only reads the configuration; what starts and initializes the
// configured servers without a model or a login is the app server (`codex app-server`, the
// JSON-RPC protocol of Codex's IDE extension, on stdio): its mcpServerStatus/list connects to
// each server and returns its serverInfo and tools, or the error it failed with. The --dir
// server answers as airlock with its tools, airlockd saw the session open, and it and its
// grant are gone once the app server has exited; the server on a socket with no daemon fails
// with daemon_unreachable and the command that starts the daemon.
func TestCodexMCPAdd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Codex against the real binaries")
	}
	codexCLI.binDir(t)
	d, airlock, root, work, home := mcpClientSetup(t)
	codexConfig(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()

	for _, srv := range configuredServers(d, root, work) {
		line := configLine(t, airlock, srv.socket, work, "codex", "codex mcp add "+srv.name+" -- ", append([]string{"--name", srv.name}, srv.flags...)...)
		if b, err := codexCLI.shell(t, ctx, home, line).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, b)
		}
		out, err := codexCLI.command(t, ctx, home, "mcp", "get", srv.name, "--json").Output()
		if err != nil {
			t.Fatalf("codex mcp get %s: %v", srv.name, err)
		}
		var got struct {
			Enabled   bool `json:"enabled"`
			Transport struct {
				Type    string   `json:"type"`
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"transport"`
		}
		decode(t, out, &got)
		if !got.Enabled || got.Transport.Type != "stdio" || got.Transport.Command != realExe(t, airlock) || !slices.Equal(got.Transport.Args, srv.argv) {
			t.Errorf("codex stored %s as %s, want stdio %q %q", srv.name, out, realExe(t, airlock), srv.argv)
		}
	}
	if b, err := os.ReadFile(filepath.Join(home, ".codex", "config.toml")); err != nil || !strings.HasPrefix(string(b), "check_for_update_on_startup = false\n") {
		t.Fatalf("codex mcp add lost the update setting (%v):\n%s", err, b)
	}

	status := codexMCPServerStatus(t, ctx, home)
	if s := status["airlock-work"]; s.ServerInfo == nil || s.ServerInfo.Name != "airlock" || s.ToolsError != nil ||
		s.Tools["fs_read"] == nil || s.Tools["fs_write"] == nil {
		t.Errorf("the app server's status of airlock-work: %+v", s)
	}
	if s := status["airlock-nodaemon"]; s.ServerInfo != nil || s.ToolsError == nil ||
		!strings.Contains(*s.ToolsError, mcp.CodeDaemonUnreachable) || !strings.Contains(*s.ToolsError, "start it with") {
		t.Errorf("the app server's status of airlock-nodaemon: %+v", s)
	}
	waitMCPSessionOpenedAndGone(t, d, realExe(t, airlock))
}

// codexServerStatus is what the Codex app server says of one configured MCP server.
type codexServerStatus struct {
	ServerInfo *struct {
		Name string `json:"name"`
	} `json:"serverInfo"`
	Tools      map[string]json.RawMessage `json:"tools"`
	ToolsError *string                    `json:"toolsError"`
}

// codexMCPServerStatus runs `codex app-server` on stdio in home, initializes it, asks
// mcpServerStatus/list for every configured server's tools, closes its stdin once it has the
// answer, and waits for it to exit. It answers nothing still pending when stdin closes, so
// stdin stays open until then.
func codexMCPServerStatus(t *testing.T, ctx context.Context, home string) map[string]codexServerStatus {
	t.Helper()
	cmd := codexCLI.command(t, ctx, home, "app-server")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 0, 64<<10), appServerMaxLine)
	// call sends one request and returns its result, skipping the notifications between.
	call := func(id int, method string, params any) json.RawMessage {
		t.Helper()
		req, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
		if _, err := stdin.Write(append(req, '\n')); err != nil {
			t.Fatalf("codex app-server: %s: %v\n%s", method, err, stderr.String())
		}
		for lines.Scan() {
			var msg struct {
				ID     *int            `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			decode(t, lines.Bytes(), &msg)
			if msg.ID == nil || *msg.ID != id {
				continue
			}
			if msg.Error != nil {
				t.Fatalf("codex app-server: %s: %s", method, msg.Error)
			}
			return msg.Result
		}
		t.Fatalf("codex app-server: no answer to %s (%v)\n%s", method, lines.Err(), stderr.String())
		return nil
	}
	call(1, "initialize", map[string]any{"clientInfo": map[string]string{"name": "airlock-test", "version": "1"}})
	if _, err := stdin.Write([]byte(`{"method":"initialized"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	var page struct {
		Data []struct {
			Name string `json:"name"`
			codexServerStatus
		} `json:"data"`
		NextCursor *string `json:"nextCursor"`
	}
	decode(t, call(2, "mcpServerStatus/list", map[string]any{"detail": "toolsAndAuthOnly"}), &page)
	stdin.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(stdout, appServerMaxLine))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("codex app-server: %v\n%s", err, stderr.String())
	}
	if page.NextCursor != nil {
		t.Fatalf("mcpServerStatus/list returned a partial page")
	}
	status := map[string]codexServerStatus{}
	for _, s := range page.Data {
		status[s.Name] = s.codexServerStatus
	}
	return status
}
