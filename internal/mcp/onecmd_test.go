package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// These tests run the one-command path, airlock mcp --dir, with real binaries: airlockd runs
// the real airlock-fs beside it (built first, so that it is there) and mints the grant.

// managedGrants lists the live grants of the airlock-fs that the daemon of e runs, on its
// private admin socket.
func (e *env) managedGrants(t *testing.T) []map[string]any {
	t.Helper()
	out, err := exec.Command(daemontest.Binary(t, "airlock-fs"), "grants", "--json", "--admin-socket", e.d.Socket+".fs/admin.sock").Output()
	if err != nil {
		t.Fatalf("airlock-fs grants: %v", err)
	}
	var l struct {
		Grants []map[string]any `json:"grants"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatal(err)
	}
	return l.Grants
}

// sessionIDs lists the daemon's session catalog.
func (e *env) sessionIDs(t *testing.T) []string {
	t.Helper()
	var l struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
		} `json:"sessions"`
	}
	if err := call(t, e.c, client.Command{Operation: "listSessions", Payload: map[string]any{}}).Decode(&l); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range l.Sessions {
		ids = append(ids, s.SessionID)
	}
	return ids
}

// startDirEnv is startEnv with airlock-fs built beside airlockd.
func startDirEnv(t *testing.T) *env {
	t.Helper()
	daemontest.Binary(t, "airlock-fs")
	return startEnv(t)
}

// connectDir starts airlock mcp --dir on e.root with extra flags and connects a go-sdk client.
func connectDir(t *testing.T, e *env, extra ...string) (*sdk.ClientSession, *exec.Cmd) {
	t.Helper()
	args := append([]string{"--socket", e.d.Socket, "mcp", "--dir", e.root}, extra...)
	cmd := exec.Command(daemontest.Binary(t, "airlock"), args...)
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("airlock mcp stderr:\n%s", stderr.String())
		}
	})
	return cs, cmd
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r.IsError {
		t.Fatalf("%s: %s", name, text(r))
	}
	return r
}

// TestDirOneCommand: airlock mcp --dir DIR gives a go-sdk client the six fs tools on DIR
// (write and edit included) under a grant the daemon minted, in a session of its own; when
// the client goes away (stdin closed), the session is gone from the catalog and the grant
// from airlock-fs.
func TestDirOneCommand(t *testing.T) {
	e := startDirEnv(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
	cs, cmd := connectDir(t, e)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if want := []string{"fs_edit", "fs_edit_preview", "fs_find", "fs_head", "fs_list", "fs_list_sorted", "fs_read", "fs_read_many", "fs_search", "fs_stat", "fs_tail", "fs_tree", "fs_write"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	if got := text(callTool(t, cs, "fs_read", map[string]any{"path": "notes.txt"})); got != "hello\n" {
		t.Fatalf("fs_read: %q", got)
	}
	callTool(t, cs, "fs_write", map[string]any{"path": "new.txt", "content": "one\n"})
	callTool(t, cs, "fs_edit", map[string]any{"path": "new.txt", "edits": []any{map[string]any{"oldText": "one", "newText": "two"}}})
	if b, _ := os.ReadFile(filepath.Join(e.root, "new.txt")); string(b) != "two\n" {
		t.Fatalf("new.txt after write and edit: %q", b)
	}
	if l := text(callTool(t, cs, "fs_list", map[string]any{"path": "."})); !strings.Contains(l, "new.txt") || !strings.Contains(l, "notes.txt") {
		t.Fatalf("fs_list: %q", l)
	}
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": "../outside"}})
	if err != nil || !r.IsError {
		t.Fatalf("a path outside DIR: %v %+v", err, r)
	}

	gs := e.managedGrants(t)
	ids := e.sessionIDs(t)
	if len(gs) != 1 || gs[0]["connected"] != true || gs[0]["root"] != e.root || len(ids) != 1 || gs[0]["sessionId"] != ids[0] ||
		!regexp.MustCompile(`^mcp-[0-9a-f]{12}$`).MatchString(ids[0]) {
		t.Fatalf("while serving: grants %v, sessions %v", gs, ids)
	}

	if err := cs.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		t.Fatalf("airlock mcp after stdin closed: %v", cmd.ProcessState)
	}
	// airlock mcp closed the session before it exited: nothing to wait for.
	if gs, ids := e.managedGrants(t), e.sessionIDs(t); len(gs) != 0 || len(ids) != 0 {
		t.Fatalf("after the client went: grants %v, sessions %v", gs, ids)
	}
}

// TestDirKilled: airlock mcp --dir killed with SIGKILL cannot close anything itself; the
// daemon sees the connection that opened the session close, and ends the session and its
// grant. --ops narrows the tools.
func TestDirKilled(t *testing.T) {
	e := startDirEnv(t)
	cs, cmd := connectDir(t, e, "--ops", "fs.read,fs.list")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil || len(lt.Tools) != 7 { // fs_read, fs_list and the five composed from them
		t.Fatalf("tools with --ops fs.read,fs.list: %v %v", lt, err)
	}
	if len(e.managedGrants(t)) != 1 {
		t.Fatal("no grant while serving")
	}
	cmd.Process.Kill()
	waitFor(t, "the killed server's session and grant to end", func() bool {
		return len(e.managedGrants(t)) == 0 && len(e.sessionIDs(t)) == 0
	})
}

// TestDirDaemonRestart: when the daemon stops under it, airlock mcp --dir stops serving tools
// that are gone and exits 69; the next daemon holds neither the session nor a grant.
func TestDirDaemonRestart(t *testing.T) {
	daemontest.Binary(t, "airlock-fs")
	dir := daemontest.ShortDir(t)
	opts := daemontest.Options{Socket: filepath.Join(dir, "d.sock"), StateDir: filepath.Join(dir, "state")}
	e := startEnvWith(t, opts)
	// Started without a client: it opens its session before it reads a request, and stdin
	// held open keeps it serving.
	cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", e.d.Socket, "mcp", "--dir", e.root)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitFor(t, "the session's grant", func() bool {
		out, err := exec.Command(daemontest.Binary(t, "airlock-fs"), "grants", "--admin-socket", e.d.Socket+".fs/admin.sock").Output()
		return err == nil && strings.Count(string(out), "\n") == 2 // the header and one grant
	})
	e.d.Kill9()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("airlock mcp serves on without its daemon")
	}
	if code := cmd.ProcessState.ExitCode(); code != 69 {
		t.Fatalf("airlock mcp exit %d, want 69", code)
	}
	e2 := startEnvWith(t, opts)
	if ids := e2.sessionIDs(t); len(ids) != 0 {
		t.Fatalf("sessions after the restart: %v", ids)
	}
	// The old airlock-fs went with its daemon (its admin socket, if left, answers nothing),
	// and the new daemon's, started by a new open, holds only that open's grant.
	if out, err := exec.Command(daemontest.Binary(t, "airlock-fs"), "grants", "--admin-socket", opts.Socket+".fs/admin.sock").CombinedOutput(); err == nil {
		t.Fatalf("an airlock-fs answers after its daemon was killed:\n%s", out)
	}
	cs, _ := connectDir(t, e2)
	if gs := e2.managedGrants(t); len(gs) != 1 {
		t.Fatalf("grants of the new daemon: %v", gs)
	}
	cs.Close()
}

// TestMCPConfig: airlock mcp config prints, for each client, a configuration whose command and
// arguments are absolute and name the daemon's socket; the mcpServers entry, run with an
// environment as bare as a desktop launcher's (no XDG_RUNTIME_DIR, no AIRLOCK_SOCKET, no
// HOME, another working directory), serves DIR.
func TestMCPConfig(t *testing.T) {
	e := startDirEnv(t)
	bin := daemontest.Binary(t, "airlock")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--socket", e.d.Socket, "mcp", "config", "--dir", e.root}, args...)...)
		cmd.Dir = filepath.Dir(e.root)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mcp config %v: %v", args, err)
		}
		return string(out)
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(run()), &cfg); err != nil {
		t.Fatal(err)
	}
	srv, ok := cfg.MCPServers["airlock-work"]
	if !ok || len(cfg.MCPServers) != 1 {
		t.Fatalf("servers: %+v", cfg.MCPServers)
	}
	if !filepath.IsAbs(srv.Command) || !slices.Equal(srv.Args, []string{"--socket", e.d.Socket, "mcp", "--dir", e.root}) {
		t.Fatalf("server: %+v", srv)
	}
	args := " --socket " + e.d.Socket + " mcp --dir " + e.root + "\n"
	for client, want := range map[string]string{"claude": "claude mcp add airlock-work -- " + srv.Command + args,
		"codex": "codex mcp add airlock-work -- " + srv.Command + args, "gemini": "gemini mcp add --scope user airlock-work " + srv.Command + " --" + args} {
		if got := run("--client", client); got != want {
			t.Errorf("%s: %q, want %q", client, got, want)
		}
	}
	if got := run("--client", "claude", "--name", "w", "--ops", "fs.read"); !strings.HasSuffix(got, " --ops=fs.read\n") || !strings.HasPrefix(got, "claude mcp add w -- /") {
		t.Errorf("with --name and --ops: %q", got)
	}

	// The entry as a client would run it, with almost nothing in its environment.
	cmd := exec.Command(srv.Command, srv.Args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("the configured server: %v", err)
	}
	defer cs.Close()
	os.WriteFile(filepath.Join(e.root, "a.txt"), []byte("configured\n"), 0o600)
	if got := text(callTool(t, cs, "fs_read", map[string]any{"path": "a.txt"})); got != "configured\n" {
		t.Fatalf("fs_read: %q", got)
	}
}

// TestDirDaemonNotRunning: with no daemon on the socket, airlock mcp does not just exit: a
// client's first request (initialize) is answered with an error that names the socket and the
// command that starts the daemon there, as the go-sdk client and the MCP Inspector (the
// TypeScript SDK) show it; stderr says the same, and the exit is 69.
func TestDirDaemonNotRunning(t *testing.T) {
	dir := daemontest.ShortDir(t)
	sock := filepath.Join(dir, "none.sock")
	bin := daemontest.Binary(t, "airlock")
	want := regexp.MustCompile(`cannot connect to airlockd at ` + regexp.QuoteMeta(sock) + `.*start it with ` + "`" + `\S*airlockd --socket ` + regexp.QuoteMeta(sock))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&sdk.CommandTransport{Command: exec.Command(bin, "--socket", sock, "mcp", "--dir", dir)}, nil)
	if err == nil || !want.MatchString(err.Error()) {
		t.Fatalf("go-sdk connect: %v", err)
	}
	// A client that closes at once: stderr and the exit code.
	cmd := exec.Command(bin, "--socket", sock, "mcp", "--dir", dir)
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	err = cmd.Run()
	if cmd.ProcessState.ExitCode() != 69 || !want.MatchString(strings.ReplaceAll(stderr.String(), "\n", " ")) {
		t.Fatalf("%v, stderr:\n%s", err, stderr.String())
	}

	npmBin(t, "mcp-inspector")
	out, code := inspector(t, bin, "--socket", sock, "mcp", "--dir", dir, "--method", "tools/list")
	if msg, _ := path(out, "error", "message").(string); code == 0 || !want.MatchString(msg) || !strings.Contains(msg, "daemon_unreachable") {
		t.Fatalf("inspector: exit %d, %v", code, out)
	}
}
