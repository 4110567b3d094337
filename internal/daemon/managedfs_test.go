package daemon_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// managedEnv is a real airlockd with the real airlock-fs beside it, which it runs itself.
type managedEnv struct {
	d    *daemontest.Daemon
	c    *client.Client
	fs   string // the airlock-fs binary
	root string
}

// invoke sends invokeTool of op on path to generation 1 of session, with idempotency key key.
func (e *managedEnv) invoke(t *testing.T, session, key, op, path string) *client.Response {
	t.Helper()
	gen := int64(1)
	return call(t, e.c, client.Command{Operation: "invokeTool", SessionID: session, Generation: &gen,
		Payload: map[string]any{"toolCallId": key, "operation": op, "arguments": map[string]any{"path": path}}})
}

func startManaged(t *testing.T, opts daemontest.Options) *managedEnv {
	t.Helper()
	// Built first, so that it is beside airlockd, where the daemon looks for it.
	fsBin := daemontest.Binary(t, "airlock-fs")
	d := daemontest.Start(t, opts)
	e := &managedEnv{d: d, c: d.Dial(), fs: fsBin, root: filepath.Join(daemontest.ShortDir(t), "work")}
	if err := os.Mkdir(e.root, 0o700); err != nil {
		t.Fatal(err)
	}
	return e
}

// grantInfo is what airlock-fs grants --json lists of a grant.
type grantInfo struct {
	GrantID    string `json:"grantId"`
	SessionID  string `json:"sessionId"`
	Generation int64  `json:"generation"`
	Connected  bool   `json:"connected"`
}

// grants lists the live grants of the daemon's airlock-fs, on its private admin socket.
func (e *managedEnv) grants(t *testing.T) []grantInfo {
	t.Helper()
	out, err := exec.Command(e.fs, "grants", "--json", "--admin-socket", e.d.Socket+".fs/admin.sock").Output()
	if err != nil {
		t.Fatalf("airlock-fs grants: %v", err)
	}
	var l struct {
		Grants []grantInfo `json:"grants"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatal(err)
	}
	return l.Grants
}

func managedOpen(session string, generation int64, cwd string, ops ...string) client.Command {
	return client.Command{Operation: "open", SessionID: session, Generation: &generation, Payload: map[string]any{
		"cwd": cwd, "session": map[string]any{"mode": "memory"},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": map[string]any{"mode": "airlock-fs", "operations": ops}},
	}}
}

func sessionsOf(gs []grantInfo) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.SessionID+"/"+strconv.FormatInt(g.Generation, 10))
	}
	slices.Sort(out)
	return out
}

// TestManagedGrantLifetimes: an open of tools mode "airlock-fs" gets a grant of its cwd that
// the daemon minted from its own airlock-fs, and the grant lives exactly as long as the
// generation: a close, a delete and a replacing open revoke it; an open that fails after the
// mint, and one that reuses the generation, leave no grant of their own behind.
func TestManagedGrantLifetimes(t *testing.T) {
	e := startManaged(t, daemontest.Options{})
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
	expect := func(what string, want ...string) {
		t.Helper()
		if got := sessionsOf(e.grants(t)); !slices.Equal(got, want) {
			t.Fatalf("%s: grants of %v, want %v", what, got, want)
		}
	}

	if r := call(t, e.c, managedOpen("a", 1, e.root, "fs.read", "fs.write")); !r.OK {
		t.Fatalf("managed open: %s", show(r))
	}
	gs := e.grants(t)
	if len(gs) != 1 || !gs[0].Connected || !regexp.MustCompile(`^d-`).MatchString(gs[0].GrantID) {
		t.Fatalf("grants after the open: %+v", gs)
	}
	gen := int64(1)
	r := call(t, e.c, client.Command{Operation: "invokeTool", SessionID: "a", Generation: &gen,
		Payload: map[string]any{"toolCallId": "c1", "operation": "fs.read", "arguments": map[string]any{"path": "notes.txt"}}})
	if !r.OK {
		t.Fatalf("fs.read through the managed grant: %s", show(r))
	}

	// The same open again reuses the generation's connection: the grant minted for it goes.
	if r := call(t, e.c, managedOpen("a", 1, e.root, "fs.read", "fs.write")); !r.OK {
		t.Fatalf("reuse: %s", show(r))
	}
	expect("after a reuse", "a/1")
	// Another policy for the same generation fails after the mint: no grant left.
	if r := call(t, e.c, managedOpen("a", 1, e.root, "fs.read")); r.OK || r.Error.Code != "session_policy_conflict" {
		t.Fatalf("conflicting open: %s", show(r))
	}
	expect("after a failed open", "a/1")
	// A refused operation and a cwd the adapter cannot open are refused by the mint.
	if r := call(t, e.c, managedOpen("b", 1, e.root, "fs.delete")); r.OK || r.Error.Code != "unsupported_tool_operation" {
		t.Fatalf("unknown operation: %s", show(r))
	}
	if r := call(t, e.c, managedOpen("b", 1, filepath.Join(e.root, "missing"), "fs.read")); r.OK || r.Error.Code != "root_invalid" ||
		r.Error.Details["field"] != "payload.cwd" {
		t.Fatalf("missing cwd: %s", show(r))
	}
	expect("after refused mints", "a/1")

	// A newer generation replaces the old one, and the old grant.
	if r := call(t, e.c, managedOpen("a", 2, e.root, "fs.read")); !r.OK {
		t.Fatalf("generation 2: %s", show(r))
	}
	expect("after a replacing open", "a/2")
	// A close keeps the record but ends the grant.
	gen = 2
	if r := call(t, e.c, client.Command{Operation: "close", SessionID: "a", Generation: &gen, Payload: map[string]any{}}); !r.OK {
		t.Fatalf("close: %s", show(r))
	}
	expect("after a close")
	// A delete does too.
	if r := call(t, e.c, managedOpen("c", 1, e.root, "fs.list")); !r.OK {
		t.Fatalf("open c: %s", show(r))
	}
	expect("before a delete", "c/1")
	gen = 1
	if r := call(t, e.c, client.Command{Operation: "close", SessionID: "c", Generation: &gen, Payload: map[string]any{"retainSession": false}}); !r.OK {
		t.Fatalf("delete: %s", show(r))
	}
	expect("after a delete")
}

// TestManagedFSDisabled: with --no-fs-adapter a managed open is refused fs_adapter_unavailable
// (not retryable), naming why, and no airlock-fs runs.
func TestManagedFSDisabled(t *testing.T) {
	e := startManaged(t, daemontest.Options{Args: []string{"--no-fs-adapter"}})
	r := call(t, e.c, managedOpen("a", 1, e.root, "fs.read"))
	if r.OK || r.Error.Code != "fs_adapter_unavailable" || r.Error.Retryable || !regexp.MustCompile(`--no-fs-adapter`).MatchString(r.Error.Message) {
		t.Fatalf("managed open without an adapter: %s", show(r))
	}
	if _, err := os.Stat(e.d.Socket + ".fs"); !os.IsNotExist(err) {
		t.Fatalf("the adapter's socket directory exists: %v", err)
	}
}

// TestConnectionScopedSession: a generation opened with lifetime "connection" is closed and
// deleted, its grant revoked, when the connection that opened it closes, and not when another
// connection does; a daemon killed before it saw that deletes it at its next start rather than
// quarantining it, and its airlock-fs child does not outlive it.
func TestConnectionScopedSession(t *testing.T) {
	opts := daemontest.Options{Socket: filepath.Join(daemontest.ShortDir(t), "d.sock"), StateDir: filepath.Join(daemontest.ShortDir(t), "state")}
	e := startManaged(t, opts)
	open := func(c *client.Client, session string) {
		t.Helper()
		cmd := managedOpen(session, 1, e.root, "fs.read")
		cmd.Payload.(map[string]any)["lifetime"] = "connection"
		if r := call(t, c, cmd); !r.OK {
			t.Fatalf("connection-scoped open: %s", show(r))
		}
	}
	listed := func(c *client.Client) []string {
		r := call(t, c, client.Command{Operation: "listSessions", Payload: map[string]any{}})
		var l struct {
			Sessions []struct {
				SessionID string `json:"sessionId"`
			} `json:"sessions"`
		}
		if err := r.Decode(&l); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range l.Sessions {
			ids = append(ids, s.SessionID)
		}
		return ids
	}

	owner := e.d.Dial()
	open(owner, "eph")
	other := e.d.Dial()
	// The same open from another connection reuses the generation; that connection's end
	// does not end it.
	open(other, "eph")
	other.Close()
	if got := listed(e.c); !slices.Equal(got, []string{"eph"}) {
		t.Fatalf("sessions after another connection closed: %v", got)
	}
	owner.Close()
	waitUntil(t, "the owner's session and grant to go", func() bool {
		return len(listed(e.c)) == 0 && len(e.grants(t)) == 0
	})

	// Killed with a connection-scoped session open: the next start deletes it.
	owner = e.d.Dial()
	open(owner, "eph2")
	m := regexp.MustCompile(`airlock-fs started[^\n]*pid=(\d+)`).FindStringSubmatch(e.d.Stderr())
	if m == nil {
		t.Fatalf("no airlock-fs start in the log:\n%s", e.d.Stderr())
	}
	child, _ := strconv.Atoi(m[1])
	e.d.Kill9()
	waitUntil(t, "the airlock-fs child to end with its daemon", func() bool {
		return syscall.Kill(child, 0) == syscall.ESRCH
	})
	d2 := daemontest.Start(t, opts)
	c2 := d2.Dial()
	if got := listed(c2); len(got) != 0 {
		t.Fatalf("sessions after the restart: %v", got)
	}
	var h struct {
		Host struct {
			Recovery struct {
				Quarantined []any `json:"quarantinedSessions"`
			} `json:"recovery"`
		} `json:"host"`
	}
	if err := call(t, c2, client.Command{Operation: "status", Payload: map[string]any{}}).Decode(&h); err != nil || len(h.Host.Recovery.Quarantined) != 0 {
		t.Fatalf("quarantined after the restart: %+v %v", h, err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func show(r *client.Response) string {
	if r.OK {
		return "ok " + string(r.Data)
	}
	b, _ := json.Marshal(r.Error)
	return string(b)
}

// handleShaped is a token shaped as a capability handle is (32 bytes, base64url without
// padding): the daemon never learns a managed grant's handle otherwise than in the descriptor
// its airlock-fs answers, so a test can only look for its shape.
var handleShaped = regexp.MustCompile(`(^|[^A-Za-z0-9_-])[A-Za-z0-9_-]{43}([^A-Za-z0-9_-]|$)`)

// TestManagedGrantRestoredAfterFSRestart: when the airlock-fs that airlockd runs dies, airlockd
// grants the generations it minted grants for their cwd again from the next child and binds
// them in place, so an operator's session (the --session form) works again with nobody
// reopening it. While no child is up (here its socket directory is made group-writable, which
// airlock-fs refuses, so every restart fails until it is put back) a call answers
// fs_adapter_unavailable, retryable, not adapter_session_closed. A generation whose cwd is gone
// by then is not granted again: no grant of it is left, and its calls answer
// adapter_session_closed (not retryable). The restore is recorded as session.grant at door
// daemon, and no handle reaches the log.
func TestManagedGrantRestoredAfterFSRestart(t *testing.T) {
	e := startManaged(t, daemontest.Options{})
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
	doomed := filepath.Join(e.root, "doomed")
	if err := os.Mkdir(doomed, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Command{managedOpen("a", 1, e.root, "fs.read", "fs.write"), managedOpen("b", 1, doomed, "fs.list")} {
		if r := call(t, e.c, o); !r.OK {
			t.Fatalf("managed open %s: %s", o.SessionID, show(r))
		}
	}
	read := func(session, op string) *client.Response { return e.invoke(t, session, "c1", op, ".") }
	readNotes := func() *client.Response { return e.invoke(t, "a", "c2", "fs.read", "notes.txt") }
	if r := readNotes(); !r.OK {
		t.Fatalf("fs.read before: %s", show(r))
	}
	before := e.grants(t)

	fsDir := e.d.Socket + ".fs"
	if err := os.Chmod(fsDir, 0o770); err != nil {
		t.Fatal(err)
	}
	e.d.KillManagedFS(t)
	for _, s := range []struct{ session, op string }{{"a", "fs.read"}, {"b", "fs.list"}} {
		if r := read(s.session, s.op); r.OK || r.Error.Code != "fs_adapter_unavailable" || !r.Error.Retryable || r.Error.Details["indeterminate"] != false {
			t.Fatalf("%s while no airlock-fs is up: %s", s.session, show(r))
		}
	}
	os.Remove(doomed)
	if err := os.Chmod(fsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "session a to read again", func() bool {
		r := readNotes()
		if !r.OK && (r.Error.Code != "fs_adapter_unavailable" || !r.Error.Retryable) {
			t.Fatalf("fs.read while airlock-fs restarts: %s", show(r))
		}
		return r.OK
	})
	waitUntil(t, "session b to be given up", func() bool {
		r := read("b", "fs.list")
		if !r.OK && r.Error.Code == "fs_adapter_unavailable" {
			return false
		}
		if r.OK || r.Error.Code != "adapter_session_closed" || r.Error.Retryable {
			t.Fatalf("fs.list of a session whose cwd went: %s", show(r))
		}
		return true
	})
	gs := e.grants(t)
	if len(gs) != 1 || gs[0].SessionID != "a" || !gs[0].Connected || gs[0].GrantID == before[0].GrantID {
		t.Fatalf("grants after the restart: %+v, before %+v", gs, before)
	}
	if !regexp.MustCompile(`msg="grant restored after airlock-fs restarted"[^\n]*sessionId=a generation=1`).MatchString(e.d.Stderr()) ||
		!regexp.MustCompile(`msg="grant not restored after airlock-fs restarted[^\n]*sessionId=b generation=1 code=root_invalid`).MatchString(e.d.Stderr()) {
		t.Fatalf("the daemon's log:\n%s", e.d.Stderr())
	}
	if m := handleShaped.FindString(e.d.Stderr()); m != "" {
		t.Fatalf("a handle-shaped token in the daemon's log: %q", m)
	}

	gen := int64(1)
	if r := call(t, e.c, client.Command{Operation: "close", SessionID: "a", Generation: &gen, Payload: map[string]any{"retainSession": false}}); !r.OK {
		t.Fatalf("close: %s", show(r))
	}
	if gs := e.grants(t); len(gs) != 0 {
		t.Fatalf("grants after the close: %+v", gs)
	}
	restores := map[string]string{}
	for _, r := range journalRecords(t, e.d.StateDir) {
		if r.Kind == audit.KindEvent && r.Door == audit.DoorDaemon && r.Target != nil && r.Target.Op == "session.grant" {
			if r.Actor == nil || r.Actor.Generation != 1 || r.Target.Adapter != "airlock-fs" {
				t.Fatalf("a restore's record: %+v actor %+v target %+v", r, r.Actor, r.Target)
			}
			restores[r.Actor.Session] = r.Outcome
		}
	}
	if want := map[string]string{"a": "ok", "b": "root_invalid"}; !maps.Equal(restores, want) {
		t.Fatalf("the journal's restores: %v, want %v", restores, want)
	}
}

// TestManagedConnectionEndedWithTheChildUp: a managed grant's connection that ends while the
// daemon's airlock-fs stays up (here the child revokes the grant on its admin socket, which
// closes the connection) is not a restart to wait for: the generation's calls answer
// adapter_session_closed (not retryable), as any failed connection does, not
// fs_adapter_unavailable "retry" for ever. Once that child does exit, the generation is
// granted again as any other and reads again.
func TestManagedConnectionEndedWithTheChildUp(t *testing.T) {
	e := startManaged(t, daemontest.Options{})
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
	if r := call(t, e.c, managedOpen("a", 1, e.root, "fs.read")); !r.OK {
		t.Fatalf("managed open: %s", show(r))
	}
	read := func() *client.Response { return e.invoke(t, "a", "c1", "fs.read", "notes.txt") }
	if r := read(); !r.OK {
		t.Fatalf("fs.read before: %s", show(r))
	}
	gs := e.grants(t)
	if len(gs) != 1 {
		t.Fatalf("grants: %+v", gs)
	}
	if out, err := exec.Command(e.fs, "revoke-grant", "--admin-socket", e.d.Socket+".fs/admin.sock", gs[0].GrantID).CombinedOutput(); err != nil {
		t.Fatalf("airlock-fs revoke-grant: %v\n%s", err, out)
	}
	for i := range 3 {
		if r := read(); r.OK || r.Error.Code != "adapter_session_closed" || r.Error.Retryable {
			t.Fatalf("call %d after the child closed the connection: %s", i, show(r))
		}
	}
	if strings.Contains(e.d.Stderr(), "airlock-fs exited") {
		t.Fatalf("the child exited:\n%s", e.d.Stderr())
	}

	e.d.KillManagedFS(t)
	waitUntil(t, "session a to read again", func() bool {
		r := read()
		if !r.OK && (r.Error.Code != "fs_adapter_unavailable" || !r.Error.Retryable) {
			t.Fatalf("fs.read while airlock-fs restarts: %s", show(r))
		}
		return r.OK
	})
}

// TestTurnGoesOnAfterFSRestart: a turn running when airlockd's airlock-fs restarts goes on
// with the grant restored from the next child: its later tool calls reach that child, not
// the connection that ended with the old one (which would answer adapter_session_closed,
// "for good", to the rest of the turn).
func TestTurnGoesOnAfterFSRestart(t *testing.T) {
	llm := startModel(t)
	e := startManaged(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
	open := managedOpen("agent", 1, e.root, "fs.read")
	open.Payload.(map[string]any)["model"] = map[string]any{"provider": "local", "id": "test-model"}
	if r := call(t, e.c, open); !r.OK {
		t.Fatalf("managed open: %s", show(r))
	}
	read := func(id string) model.ToolCall {
		return model.ToolCall{ID: id, Name: "fs_read", Arguments: `{"path":"notes.txt"}`}
	}
	hold := make(chan struct{})
	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{read("call_0")}},
		modeltest.Reply{ToolCalls: []model.ToolCall{read("call_1")}, Hold: hold},
		modeltest.Reply{Text: "It says hello, twice."},
	)
	// A memory session issues no ticket: the turn is waited for on a connection of its own.
	waiter := e.d.Dial()
	woken := make(chan *client.Response, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := waiter.Call(ctx, client.Command{Operation: "wake", SessionID: "agent", Generation: gen(1),
			IdempotencyKey: "k1", Payload: map[string]any{"prompt": "Read notes.txt twice.", "waitForTerminal": true}})
		if err != nil {
			r = &client.Response{Error: &protocol.Error{Code: "client_error", Message: err.Error()}}
		}
		woken <- r
	}()
	select {
	case <-llm.Arrived(2):
	case <-time.After(20 * time.Second):
		t.Fatal("the turn's second model call never came")
	}
	e.d.KillManagedFS(t)
	waitUntil(t, "the grant to be restored", func() bool { return e.invoke(t, "agent", "probe", "fs.read", "notes.txt").OK })
	close(hold)
	var res turnResult
	if r := <-woken; !r.OK || r.Decode(&res) != nil || res.Result.Text != "It says hello, twice." || res.Result.ToolCalls != 2 {
		t.Fatalf("the turn: %s", show(r))
	}

	reqs := llm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the model saw %d requests", len(reqs))
	}
	for i, id := range []string{"call_0", "call_1"} {
		msgs := reqs[i+1].Request.Messages
		last := msgs[len(msgs)-1]
		if last.Role != model.RoleTool || last.ToolCallID != id || !strings.Contains(last.Content, "hello") {
			t.Fatalf("the output of %s shown to the model: %+v", id, last)
		}
	}
}
