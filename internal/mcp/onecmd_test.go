package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/hint"
	"github.com/airlockhq/airlock/internal/mcp"
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
	cs, cmd, _ := connectDirWatched(t, e, extra...)
	return cs, cmd
}

// connectDirWatched is connectDir that also returns the server's stderr, to wait on.
func connectDirWatched(t *testing.T, e *env, extra ...string) (*sdk.ClientSession, *exec.Cmd, *daemontest.SyncBuffer) {
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
	return cs, cmd, stderr
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
	names := toolNames(t, cs)
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

// startMCP starts airlock mcp --dir on e.root with extra flags and no client, with stdin held
// open until the test ends, and returns the process, its exit and its stderr. At the end of the
// test it closes stdin and sends SIGTERM (which stop a stdio and an --http server), and kills
// the process if it has not exited within 30 s, waiting for it either way.
func startMCP(t *testing.T, e *env, extra ...string) (*exec.Cmd, <-chan struct{}, *daemontest.SyncBuffer) {
	t.Helper()
	cmd := exec.Command(daemontest.Binary(t, "airlock"), append([]string{"--socket", e.d.Socket, "mcp", "--dir", e.root}, extra...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("airlock mcp stderr:\n%s", stderr.String())
		}
	})
	return cmd, exited, stderr
}

// waitExit waits for the server started by startMCP to exit, and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}) int {
	t.Helper()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatal("airlock mcp serves on")
	}
	return cmd.ProcessState.ExitCode()
}

// startHint matches the sentence that names the command starting a daemon on socket.
func startHint(socket string) *regexp.Regexp {
	return regexp.MustCompile("start it with `" + `\S*airlockd --socket ` + regexp.QuoteMeta(socket) + " &`")
}

// lostForGood waits until the server of cs logs that its session is lost for good, and returns
// what a call answers then, which must be an error: airlock's error and the text. The tools
// stay listed.
func lostForGood(t *testing.T, cs *sdk.ClientSession, stderr *daemontest.SyncBuffer) (wireError, string) {
	t.Helper()
	stderr.Wait(t, "the loss for good", regexp.MustCompile(`level=ERROR msg="the session is lost for good: every call answers why until the client closes stdin"`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": "kept.txt"}})
	if err != nil || !r.IsError {
		t.Fatalf("a call after the loss for good: %v %+v", err, r)
	}
	if len(toolNames(t, cs)) == 0 {
		t.Fatal("no tools listed after the loss for good")
	}
	return airlockError(t, r), text(r)
}

// closeExit closes the client of the server cmd (which waits for it to exit) and returns its
// exit code.
func closeExit(t *testing.T, cs *sdk.ClientSession, cmd *exec.Cmd) int {
	t.Helper()
	cs.Close() // its error is the exit's
	if cmd.ProcessState == nil {
		t.Fatal("airlock mcp did not exit when its client closed")
	}
	return cmd.ProcessState.ExitCode()
}

// TestDirDaemonRestart: with --reopen-for 0, when the daemon is killed under it, airlock mcp
// --dir gives up at once: every call answers daemon_unreachable, not retryable, with the
// command that starts the daemon, until the client closes stdin, and then it exits 69; the
// next daemon holds neither the session nor a grant.
func TestDirDaemonRestart(t *testing.T) {
	daemontest.Binary(t, "airlock-fs")
	dir := daemontest.ShortDir(t)
	opts := daemontest.Options{Socket: filepath.Join(dir, "d.sock"), StateDir: filepath.Join(dir, "state")}
	e := startEnvWith(t, opts)
	cs, cmd, stderr := connectDirWatched(t, e, "--reopen-for", "0")
	e.d.Kill9()
	we, msg := lostForGood(t, cs, stderr)
	if we.Code != mcp.CodeDaemonUnreachable || we.Retryable || !strings.Contains(msg, "the session and its grant are gone") || !startHint(opts.Socket).MatchString(msg) {
		t.Fatalf("a call after the loss: %+v, text %q", we, msg)
	}
	if code := closeExit(t, cs, cmd); code != 69 {
		t.Fatalf("airlock mcp exit %d, want 69", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, "the session and its grant are gone") || !startHint(opts.Socket).MatchString(msg) ||
		strings.Contains(msg, "opening it again") {
		t.Fatalf("stderr:\n%s", msg)
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
	cs2, _ := connectDir(t, e2)
	if gs := e2.managedGrants(t); len(gs) != 1 {
		t.Fatalf("grants of the new daemon: %v", gs)
	}
	cs2.Close()
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

func toolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
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
	return names
}

// TestDirReopensAfterRestart: airlock mcp --dir survives its daemon stopping (SIGTERM) or
// dying (SIGKILL) and a new one starting on the same socket and state directory. In the gap a
// call answers daemon_unreachable, retryable, with its hint and Hold's message; once the
// server logs that it reopened its session, the same MCP session reads the file written
// before, with the same tools (none was taken away and put back); the new daemon holds exactly that session, under
// the same id, and one grant of it, and both end when the client goes.
func TestDirReopensAfterRestart(t *testing.T) {
	for _, killed := range []bool{false, true} {
		name := "stopped"
		if killed {
			name = "killed"
		}
		t.Run(name, func(t *testing.T) {
			daemontest.Binary(t, "airlock-fs")
			dir := daemontest.ShortDir(t)
			opts := daemontest.Options{Socket: filepath.Join(dir, "d.sock"), StateDir: filepath.Join(dir, "state")}
			e := startEnvWith(t, opts)
			cs, cmd, stderr := connectDirWatched(t, e, "--log-level", "info")
			callTool(t, cs, "fs_write", map[string]any{"path": "kept.txt", "content": "before the restart\n"})
			if got := text(callTool(t, cs, "fs_read", map[string]any{"path": "kept.txt"})); got != "before the restart\n" {
				t.Fatalf("fs_read: %q", got)
			}
			ids := e.sessionIDs(t)
			if len(ids) != 1 {
				t.Fatalf("sessions: %v", ids)
			}
			id, tools := ids[0], toolNames(t, cs)

			if killed {
				e.d.Kill9()
			} else {
				e.d.Stop()
			}
			stderr.Wait(t, "the warning", regexp.MustCompile(`level=WARN msg="airlockd closed the connection that held the session \(it stopped or restarted\); opening it again" session=`+id))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": "kept.txt"}})
			if err != nil || !r.IsError {
				t.Fatalf("a call in the gap: %v %+v", err, r)
			}
			// Hold's message, not the unheld bridge's "cannot reach airlockd", which the same
			// code and hint would also pass.
			if we := airlockError(t, r); we.Code != mcp.CodeDaemonUnreachable || !we.Retryable || we.Hint != hint.For(mcp.CodeDaemonUnreachable) ||
				!strings.Contains(text(r), "\n"+we.Hint) || !strings.Contains(text(r), "airlock mcp is opening session "+id+" again") {
				t.Fatalf("a call in the gap: %+v, text %q", we, text(r))
			}

			e2 := startEnvWith(t, opts)
			stderr.Wait(t, "the reopen", regexp.MustCompile(`level=WARN msg="session reopened" session=`+id))
			if got := text(callTool(t, cs, "fs_read", map[string]any{"path": "kept.txt"})); got != "before the restart\n" {
				t.Fatalf("fs_read after the reopen: %q", got)
			}
			if got := toolNames(t, cs); !slices.Equal(got, tools) {
				t.Fatalf("tools after the reopen %v, before %v", got, tools)
			}
			if log := stderr.String(); strings.Contains(log, "tools removed") || strings.Count(log, "level=WARN") != 2 { // the loss and the reopen
				t.Fatalf("stderr:\n%s", log)
			}
			if ids := e2.sessionIDs(t); !slices.Equal(ids, []string{id}) {
				t.Fatalf("sessions after the reopen: %v, want [%s]", ids, id)
			}
			if gs := e2.managedGrants(t); len(gs) != 1 || gs[0]["sessionId"] != id || gs[0]["root"] != e.root {
				t.Fatalf("grants after the reopen: %v", gs)
			}

			if err := cs.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
				t.Fatalf("airlock mcp after stdin closed: %v", cmd.ProcessState)
			}
			if gs, ids := e2.managedGrants(t), e2.sessionIDs(t); len(gs) != 0 || len(ids) != 0 {
				t.Fatalf("after the client went: grants %v, sessions %v", gs, ids)
			}
		})
	}
}

// TestDirReopenGivesUp: when no daemon comes back within --reopen-for, airlock mcp --dir gives
// up: every call answers why (daemon_unreachable, not retryable) and how to start a daemon on
// its socket, until the client closes stdin; then it exits 69, with the same on stderr.
func TestDirReopenGivesUp(t *testing.T) {
	daemontest.Binary(t, "airlock-fs")
	e := startDirEnv(t)
	cs, cmd, stderr := connectDirWatched(t, e, "--reopen-for", "1s")
	e.d.Stop()
	we, text := lostForGood(t, cs, stderr)
	gaveUp := "back within 1s (transport: cannot connect to airlockd at " + e.d.Socket
	if we.Code != mcp.CodeDaemonUnreachable || we.Retryable || !strings.Contains(text, "airlockd did not take session mcp-") ||
		!strings.Contains(text, gaveUp) || !startHint(e.d.Socket).MatchString(text) {
		t.Fatalf("a call after giving up: %+v, text %q", we, text)
	}
	// The hint, chosen by the code alone, also fits this answer, which is not retryable: it
	// said only to wait and call again, then to have airlockd started, after which every
	// call still failed, as this server had given up.
	if !strings.Contains(we.Hint, "not retryable") || !strings.Contains(we.Hint, "restart this MCP server") {
		t.Errorf("the hint %q does not say what to do once the server gave up", we.Hint)
	}
	if code := closeExit(t, cs, cmd); code != 69 {
		t.Fatalf("airlock mcp exit %d, want 69\n%s", code, stderr.String())
	}
	msg := stderr.String()
	if !strings.Contains(msg, "opening it again") || !regexp.MustCompile(`(?m)^airlock: .*airlockd did not take session mcp-`).MatchString(msg) ||
		!strings.Contains(msg, gaveUp) || !startHint(e.d.Socket).MatchString(msg) {
		t.Fatalf("stderr:\n%s", msg)
	}
}

// TestDirReopenRefused: a DIR removed while the daemon was down is a refusal that retrying
// cannot fix: airlock mcp --dir gives up at once when the new daemon refuses it, every call
// answering the daemon's error until the client closes stdin, and then exits 1; the new
// daemon holds no session and no grant.
func TestDirReopenRefused(t *testing.T) {
	daemontest.Binary(t, "airlock-fs")
	dir := daemontest.ShortDir(t)
	opts := daemontest.Options{Socket: filepath.Join(dir, "d.sock"), StateDir: filepath.Join(dir, "state")}
	e := startEnvWith(t, opts)
	cs, cmd, stderr := connectDirWatched(t, e)
	e.d.Stop()
	stderr.Wait(t, "the warning", regexp.MustCompile(`opening it again`))
	if err := os.RemoveAll(e.root); err != nil {
		t.Fatal(err)
	}
	e2 := startEnvWith(t, opts)
	// airlockd mints the grant first: its airlock-fs refuses a root that is gone.
	if we, text := lostForGood(t, cs, stderr); we.Code != "root_invalid" || we.Retryable {
		t.Fatalf("a call after the refusal: %+v, text %q", we, text)
	}
	if code := closeExit(t, cs, cmd); code != 1 {
		t.Fatalf("airlock mcp exit %d, want 1\n%s", code, stderr.String())
	}
	msg := stderr.String()
	if !strings.Contains(msg, `msg="airlockd refused to open the session again"`) || !regexp.MustCompile(`(?m)^airlock: root_invalid: `).MatchString(msg) ||
		strings.Count(msg, "opening it again") != 1 {
		t.Fatalf("stderr:\n%s", msg)
	}
	if gs, ids := e2.managedGrants(t), e2.sessionIDs(t); len(gs) != 0 || len(ids) != 0 {
		t.Fatalf("after the refusal: grants %v, sessions %v", gs, ids)
	}
}

// TestDirReopensOverHTTP: airlock mcp --dir --http keeps its MCP session across a daemon
// restart as on stdio, and closes the reopened session when it is stopped.
func TestDirReopensOverHTTP(t *testing.T) {
	daemontest.Binary(t, "airlock-fs")
	dir := daemontest.ShortDir(t)
	opts := daemontest.Options{Socket: filepath.Join(dir, "d.sock"), StateDir: filepath.Join(dir, "state")}
	e := startEnvWith(t, opts)
	os.WriteFile(filepath.Join(e.root, "kept.txt"), []byte("over http\n"), 0o600)
	cmd, exited, stderr := startMCP(t, e, "--http", "127.0.0.1:0", "--log-level", "info")
	served := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/mcp)\n(?:.*\n)*?airlock mcp: bearer token \(shown once\): (\S+)\n`)
	m := served.FindStringSubmatch(stderr.Wait(t, "the URL and the token", served))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: m[1],
		HTTPClient: &http.Client{Transport: bearer{m[2], http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := text(callTool(t, cs, "fs_read", map[string]any{"path": "kept.txt"})); got != "over http\n" {
		t.Fatalf("fs_read: %q", got)
	}
	id := e.sessionIDs(t)[0]

	e.d.Stop()
	e2 := startEnvWith(t, opts)
	stderr.Wait(t, "the reopen", regexp.MustCompile(`level=WARN msg="session reopened" session=`+id))
	if got := text(callTool(t, cs, "fs_read", map[string]any{"path": "kept.txt"})); got != "over http\n" {
		t.Fatalf("fs_read after the reopen: %q", got)
	}
	if ids := e2.sessionIDs(t); !slices.Equal(ids, []string{id}) {
		t.Fatalf("sessions after the reopen: %v, want [%s]", ids, id)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, cmd, exited); code != 0 {
		t.Fatalf("airlock mcp exit %d after SIGTERM", code)
	}
	if gs, ids := e2.managedGrants(t), e2.sessionIDs(t); len(gs) != 0 || len(ids) != 0 {
		t.Fatalf("after airlock mcp stopped: grants %v, sessions %v", gs, ids)
	}
}

// TestDirSixteenCallsAtOnce: a --dir server given 16 calls at once (writes that wait for the
// operator under ask-writes, each holding a daemon connection while it waits) stays within the
// daemon's share of one process, the connection that holds its session included: the calls
// past its connections wait for one instead of failing, and every call succeeds once
// approved. (With a connection for each of the 16 besides the session's, one went to the
// daemon's control band and failed daemon_unreachable.)
func TestDirSixteenCallsAtOnce(t *testing.T) {
	e := startDirEnv(t)
	cs, _ := connectDir(t, e, "--policy", "ask-writes")
	const n = 16
	results := make(chan *sdk.CallToolResult, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // ends with the test, failed or not
			defer cancel()
			r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_write", Arguments: map[string]any{
				"path": fmt.Sprintf("f%02d.txt", i), "content": "x"}})
			if err != nil {
				r = &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}
			}
			results <- r
		}()
	}
	decided := map[string]bool{}
	for done, deadline := 0, time.Now().Add(45*time.Second); done < n; {
		select {
		case r := <-results:
			if r.IsError {
				t.Fatalf("a call failed: %s", text(r))
			}
			done++
			continue
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls done", done, n)
		}
		for _, id := range pendingApprovals(t, e) {
			if !decided[id] {
				decided[id] = true
				if r := call(t, e.c, client.Command{Operation: "decideApproval", Payload: map[string]any{"approvalId": id, "approve": true}}); !r.OK {
					t.Fatalf("decide %s: %v", id, r.Err())
				}
			}
		}
	}
	if strings.Contains(e.d.Stderr(), "every connection is busy") {
		t.Fatalf("airlock mcp passed its share of connections:\n%s", e.d.Stderr())
	}
}

// TestDirNotADirectory: a --dir that is not a directory (gone, a file, or "~/…" from a
// client's configuration, which runs no shell) is told to a client on stdio as the error of
// its requests, as a refused open is; stderr says the same, and the exit, when the client
// closes stdin, is the usage error's 2.
func TestDirNotADirectory(t *testing.T) {
	dir := daemontest.ShortDir(t)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	bin := daemontest.Binary(t, "airlock")
	sock := filepath.Join(dir, "none.sock") // never reached: the directory is checked first
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(dir, "gone"), `usage: --dir \S+/gone: no such file or directory`},
		{file, `usage: --dir \S+/file is not a directory`},
		{"~/nowhere-" + filepath.Base(dir), `usage: --dir \S+/~/nowhere-\S+: no such file or directory \(a client's configuration runs no shell, so ~ is not expanded`},
	} {
		want := regexp.MustCompile(c.want)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
			&sdk.CommandTransport{Command: exec.Command(bin, "--socket", sock, "mcp", "--dir", c.dir)}, nil)
		cancel()
		if err == nil || !want.MatchString(err.Error()) {
			t.Fatalf("--dir %s: connect: %v", c.dir, err)
		}
		cmd := exec.Command(bin, "--socket", sock, "mcp", "--dir", c.dir)
		stderr := &daemontest.SyncBuffer{}
		cmd.Stderr = stderr
		cmd.Stdin = strings.NewReader("")
		cmd.Run()
		if cmd.ProcessState.ExitCode() != 2 || !want.MatchString(stderr.String()) {
			t.Fatalf("--dir %s: exit %d, stderr:\n%s", c.dir, cmd.ProcessState.ExitCode(), stderr.String())
		}
	}
}

// TestDirSurvivesFSAdapterRestart: when the airlock-fs that airlockd runs dies (SIGKILL here;
// a crash alike), airlockd restarts it and grants the sessions it had minted grants for their
// directories again, so that the same MCP session works again without the client or airlock mcp
// doing anything: airlock mcp --dir (its session, lifetime connection) and a bridge of an
// operator's session (airlock mcp --session; an open with --fs-ops). Until then a call answers
// fs_adapter_unavailable, retryable, with its hint, never adapter_session_closed ("ended for
// good", which it answered before); afterwards airlock-fs holds one new grant of the session and
// DIR, and when the session ends (the client goes; the operator closes it) no session and no
// grant remain.
func TestDirSurvivesFSAdapterRestart(t *testing.T) {
	for _, form := range []string{"dir", "session"} {
		t.Run(form, func(t *testing.T) {
			e := startDirEnv(t)
			os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
			var callRead func() *sdk.CallToolResult
			var end func()
			switch form {
			case "dir":
				cs, cmd := connectDir(t, e)
				callRead = func() *sdk.CallToolResult {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": "notes.txt"}})
					if err != nil {
						t.Fatalf("fs_read: %v", err)
					}
					return r
				}
				end = func() {
					if err := cs.Close(); err != nil {
						t.Fatalf("close: %v", err)
					}
					if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
						t.Fatalf("airlock mcp after stdin closed: %v", cmd.ProcessState)
					}
				}
			case "session":
				if r := call(t, e.c, client.Command{Operation: "open", SessionID: "op", Generation: gen(1), Payload: map[string]any{
					"cwd": e.root, "session": map[string]any{"mode": "memory"},
					"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
						"contextFiles": "none", "tools": map[string]any{"mode": "airlock-fs", "operations": []string{"fs.read", "fs.list"}}},
				}}); !r.OK {
					t.Fatalf("managed open: %v", r.Err())
				}
				cn := e.connect(t, mcp.Config{SessionID: "op", Generation: 1})
				callRead = func() *sdk.CallToolResult { return cn.call(t, "fs_read", map[string]any{"path": "notes.txt"}) }
				end = func() {
					if r := call(t, e.c, client.Command{Operation: "close", SessionID: "op", Generation: gen(1),
						Payload: map[string]any{"retainSession": false}}); !r.OK {
						t.Fatalf("close: %v", r.Err())
					}
				}
			}
			if r := callRead(); r.IsError || text(r) != "hello\n" {
				t.Fatalf("fs_read before: %s", text(r))
			}
			before := e.managedGrants(t)
			ids := e.sessionIDs(t)
			if len(before) != 1 || len(ids) != 1 || before[0]["sessionId"] != ids[0] {
				t.Fatalf("before: grants %v, sessions %v", before, ids)
			}

			e.d.KillManagedFS(t)
			waitFor(t, "fs_read to work again", func() bool {
				r := callRead()
				if !r.IsError {
					if text(r) != "hello\n" {
						t.Fatalf("fs_read after the restart: %q", text(r))
					}
					return true
				}
				if we := airlockError(t, r); we.Code != "fs_adapter_unavailable" || !we.Retryable || we.Hint != hint.For(we.Code) {
					t.Fatalf("a call in the gap: %+v", we)
				}
				return false
			})
			gs := e.managedGrants(t)
			if len(gs) != 1 || gs[0]["sessionId"] != ids[0] || gs[0]["root"] != e.root || gs[0]["connected"] != true ||
				gs[0]["grantId"] == before[0]["grantId"] {
				t.Fatalf("grants after the restart: %v, before %v", gs, before)
			}
			if got := e.sessionIDs(t); !slices.Equal(got, ids) {
				t.Fatalf("sessions after the restart: %v, before %v", got, ids)
			}

			end()
			waitFor(t, "the session and its grant to end", func() bool {
				return len(e.managedGrants(t)) == 0 && len(e.sessionIDs(t)) == 0
			})
		})
	}
}

// TestFailureAnswersEveryRequest: when airlock mcp cannot start (no daemon on the socket; a
// --dir open the daemon refuses, here an operation that is none), every request on stdio
// gets airlock's error, -32603 with the reason (and, for a daemon out of reach, the command
// that starts one), until the client closes stdin; then the exit is 69 or 1. Under 2025-11-25
// only initialize got it: the go-sdk answered each later request "method … is invalid during
// session initialization" (code 0), ahead of the failure server's middleware. Under
// 2026-07-28 too; a line that is not JSON is answered -32700 and the rest still are.
func TestFailureAnswersEveryRequest(t *testing.T) {
	e := startDirEnv(t)
	bin := daemontest.Binary(t, "airlock")
	none := filepath.Join(daemontest.ShortDir(t), "none.sock")
	starts := []struct {
		name string
		args []string
		exit int
		want *regexp.Regexp
	}{
		{"no daemon", []string{"--socket", none, "mcp", "--session", "s", "--generation", "1"}, 69,
			regexp.MustCompile(`^airlock mcp: daemon_unreachable: .*` + regexp.QuoteMeta(none) + `.*start it with `)},
		{"a refused open", []string{"--socket", e.d.Socket, "mcp", "--dir", e.root, "--ops", "fs.bogus"}, 1,
			regexp.MustCompile(`^airlock mcp: unsupported_tool_operation: operations must be`)},
	}
	revisions := map[string][]string{
		"2025-11-25": {
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
			`{oops`,
			`{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"fs_read","arguments":{"path":"a"}}}`,
			`{"jsonrpc":"2.0","id":4,"method":"ping"}`,
		},
		"2026-07-28": {
			`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + metaEnvelope + `}}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + metaEnvelope + `}}`,
			`{oops`,
			`{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{` + metaEnvelope + `,"name":"fs_read","arguments":{"path":"a"}}}`,
			`{"jsonrpc":"2.0","id":4,"method":"tools/list"}`,
		},
	}
	for _, s := range starts {
		for rev, lines := range revisions {
			t.Run(s.name+"/"+rev, func(t *testing.T) {
				cmd := exec.Command(bin, s.args...)
				cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
				var stdout, stderr strings.Builder
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				cmd.Run()
				if code := cmd.ProcessState.ExitCode(); code != s.exit {
					t.Fatalf("exit %d, want %d\nstderr:\n%s", code, s.exit, stderr.String())
				}
				var answered []string
				parseErrors := 0
				for line := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
					var r struct {
						ID    json.RawMessage `json:"id"`
						Error *struct {
							Code    int             `json:"code"`
							Message string          `json:"message"`
							Data    json.RawMessage `json:"data"`
						} `json:"error"`
					}
					if json.Unmarshal([]byte(line), &r) != nil || r.Error == nil {
						t.Fatalf("stdout line %s", line)
					}
					if string(r.ID) == "null" && r.Error.Code == -32700 {
						parseErrors++
						continue
					}
					if r.Error.Code != -32603 || !s.want.MatchString(r.Error.Message) || !strings.Contains(string(r.Error.Data), `"retryable":`) {
						t.Fatalf("request %s: %s", r.ID, line)
					}
					answered = append(answered, string(r.ID))
				}
				if !slices.Equal(answered, []string{"1", "2", `"three"`, "4"}) || parseErrors != 1 {
					t.Fatalf("answered %v and %d parse errors, want each request once, in order, and one\nstdout:\n%s", answered, parseErrors, stdout.String())
				}
			})
		}
	}
}

// TestDirClientGoneEndsItsCalls: a client that exits closes both ends of airlock mcp's stdio.
// With a call still waiting for the operator's approval (ask-writes), airlock mcp sees that
// stdout has no reader left and ends at once, exit 0: the call is cancelled, its approval
// request withdrawn, nothing written, and the session and its grant are gone. It waited for the
// call until the drain deadline (40 s), during which the operator could still approve a
// write for a client long gone, and then died of SIGPIPE writing the deadline's answer.
func TestDirClientGoneEndsItsCalls(t *testing.T) {
	e := startDirEnv(t)
	cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", e.d.Socket, "mcp", "--dir", e.root, "--policy", "ask-writes")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("airlock mcp stderr:\n%s", stderr.String())
		}
	})
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"gone","version":"1"}}}`+"\n")
	if line, err := bufio.NewReader(r).ReadString('\n'); err != nil || !strings.Contains(line, `"id":0,"result"`) {
		t.Fatalf("initialize: %q, %v", line, err)
	}
	io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs_write","arguments":{"path":"late.txt","content":"x"}}}`+"\n")
	waitFor(t, "the write's approval request", func() bool { return len(pendingApprovals(t, e)) == 1 })

	start := time.Now()
	r.Close()
	stdin.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("airlock mcp: %v, want exit 0", err)
		}
	case <-time.After(mcp.StdinDrainTimeout / 2):
		t.Fatalf("airlock mcp still runs %v after its client went", time.Since(start))
	}
	if ids := pendingApprovals(t, e); len(ids) != 0 {
		t.Fatalf("approval requests left: %v", ids)
	}
	if _, err := os.Stat(filepath.Join(e.root, "late.txt")); !os.IsNotExist(err) {
		t.Fatalf("late.txt: %v, want it never written", err)
	}
	if ids := e.sessionIDs(t); len(ids) != 0 {
		t.Fatalf("sessions left: %v", ids)
	}
	if gs := e.managedGrants(t); len(gs) != 0 {
		t.Fatalf("grants left: %v", gs)
	}
}
