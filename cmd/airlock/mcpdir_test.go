package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/protocol"
)

// attempts is a slog.Handler that keeps the times of airlock mcp --dir's failed reopen
// attempts (its debug line "session not reopened").
type attempts struct {
	mu    sync.Mutex
	times []time.Time
	// failed and reopened, when not nil, get a value (if they have room) at each failed
	// attempt and at "session reopened".
	failed, reopened chan struct{}
}

func (h *attempts) Enabled(context.Context, slog.Level) bool { return true }
func (h *attempts) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *attempts) WithGroup(string) slog.Handler            { return h }
func (h *attempts) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "session not reopened" {
		h.mu.Lock()
		h.times = append(h.times, r.Time)
		h.mu.Unlock()
		select {
		case h.failed <- struct{}{}:
		default:
		}
	}
	if r.Message == "session reopened" {
		select {
		case h.reopened <- struct{}{}:
		default:
		}
	}
	return nil
}

// TestReopenBackoff: with no daemon on the socket, airlock mcp --dir tries to open its session
// again at once, then after 100 ms, doubling the wait up to 2 s, with the last wait cut to end
// when --reopen-for has passed and one last attempt then; it gives up after that one, with
// exit 69 and the command that starts the daemon. The end of its context ends the wait at
// once. Time is synctest's: the schedule is exact.
func TestReopenBackoff(t *testing.T) {
	const socket = "/nonexistent-airlock-test/airlockd.sock"
	keeper := func(h *attempts, reopenFor time.Duration) *dirKeeper {
		return &dirKeeper{a: &app{socket: socket}, id: "mcp-0123456789ab", root: "/", ops: defaultDirOps, reopenFor: reopenFor, log: slog.New(h)}
	}
	offsets := func(h *attempts, start time.Time) []time.Duration {
		var out []time.Duration
		for _, at := range h.times {
			out = append(out, at.Sub(start))
		}
		return out
	}
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}

	t.Run("gives up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := &attempts{}
			k := keeper(h, 10*time.Second)
			start := time.Now()
			ds, err := k.reopen(t.Context())
			if ds != nil || err == nil {
				t.Fatalf("reopen without a daemon: %v, %v", ds, err)
			}
			if d := time.Since(start); d != 10*time.Second {
				t.Errorf("gave up after %v, want 10s", d)
			}
			if want := ms(0, 100, 300, 700, 1500, 3100, 5100, 7100, 9100, 10000); !slices.Equal(offsets(h, start), want) {
				t.Errorf("attempts at %v, want %v", offsets(h, start), want)
			}
			ce := classify(err)
			if ce.exit != exitUnavailable || !strings.Contains(ce.body.Message, "airlockd did not take session mcp-0123456789ab back within 10s (transport: cannot connect to airlockd at "+socket) ||
				!strings.Contains(ce.body.Message, "start it with `") || !strings.Contains(ce.body.Message, "--socket "+socket+" &`") {
				t.Errorf("exit %d, %s", ce.exit, ce.body.Message)
			}
		})
	})
	t.Run("interrupted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := &attempts{}
			k := keeper(h, time.Minute)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			if ds, err := k.reopen(ctx); ds != nil || err != nil {
				t.Fatalf("reopen whose context ended: %v, %v", ds, err)
			}
			if d := time.Since(start); d != time.Second {
				t.Errorf("returned after %v, want 1s", d)
			}
			if want := ms(0, 100, 300, 700); !slices.Equal(offsets(h, start), want) {
				t.Errorf("attempts at %v, want %v", offsets(h, start), want)
			}
		})
	})
}

// sessionIDs lists the sessions of the daemon on socket, as airlock session list --json
// prints them.
func sessionIDs(t *testing.T, socket string) []string {
	t.Helper()
	r := cli(t, socket, "", "session", "list", "--json").wantCode(t, exitOK)
	var page struct {
		Sessions []protocol.CatalogRecord `json:"sessions"`
	}
	decode(t, envelopeOf(t, r, "session list", true).Data, &page)
	var ids []string
	for _, s := range page.Sessions {
		ids = append(ids, s.SessionID)
	}
	return ids
}

// TestReopenNotOwner: an open of airlock mcp --dir's session that finds the generation open
// already, owned by another connection (the owner before, which the daemon has not closed
// yet), is refused session_busy, retryably, on this side: the daemon's answer succeeds, but
// this connection would own nothing, and the other's end would end the session under it. The
// keeper's reopen tries again until that owner is gone, and then owns the session it opens:
// its connection's end ends it.
func TestReopenNotOwner(t *testing.T) {
	daemontest.Binary(t, "airlock-fs") // airlockd runs the one beside it
	d := daemontest.Start(t, daemontest.Options{})
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := &app{socket: d.Socket}
	const id = "mcp-0123456789ab"
	old, err := a.openDirSession(t.Context(), id, root, defaultDirOps, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.owner.Close()

	ds, err := a.openDirSession(t.Context(), id, root, defaultDirOps, nil)
	var pe *protocol.Error
	if ds != nil || !errors.As(err, &pe) || pe.Code != protocol.CodeSessionBusy || !reopenRetryable(err) {
		t.Fatalf("an open of the generation another connection owns: %v, %v", ds, err)
	}

	h := &attempts{failed: make(chan struct{}, 1)}
	k := &dirKeeper{a: a, id: id, root: root, ops: defaultDirOps, reopenFor: time.Minute, log: slog.New(h)}
	type reopened struct {
		ds  *dirSession
		err error
	}
	done := make(chan reopened, 1)
	go func() {
		ds, err := k.reopen(t.Context())
		done <- reopened{ds, err}
	}()
	<-h.failed
	old.owner.Close()
	r := <-done
	if r.ds == nil {
		t.Fatalf("reopen after the old owner went: %v", r.err)
	}
	if ids := sessionIDs(t, d.Socket); !slices.Equal(ids, []string{id}) {
		t.Fatalf("sessions after the reopen: %v", ids)
	}
	r.ds.owner.Close()
	waitFor(t, "the reopened session to end with its owner connection", func() bool { return len(sessionIDs(t, d.Socket)) == 0 })
}

// TestHoldUntilReopened: in the window that Hold is for, a new daemon up and the session not
// opened on it yet (the keeper held before its attempt), a call answers daemon_unreachable,
// retryably, with Hold's message, not the new daemon's session_not_found, and a refresh keeps
// every tool listed; once the keeper reopens the session, the same MCP session reads DIR
// again with the same tools.
func TestHoldUntilReopened(t *testing.T) {
	daemontest.Binary(t, "airlock-fs") // airlockd runs the one beside it
	dir := daemontest.ShortDir(t)
	opts := daemontest.Options{Socket: filepath.Join(dir, "d.sock"), StateDir: filepath.Join(dir, "state")}
	d := daemontest.Start(t, opts)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "kept.txt"), []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()

	entered, gate := make(chan struct{}, 1), make(chan struct{})
	h := &attempts{reopened: make(chan struct{}, 1)}
	a := &app{socket: d.Socket}
	k := &dirKeeper{a: a, id: newDirSessionID(), root: root, ops: defaultDirOps, reopenFor: time.Minute, log: slog.New(h),
		beforeAttempt: func(ctx context.Context) {
			entered <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}}
	if k.cur, err = a.openDirSession(ctx, k.id, root, k.ops, nil); err != nil {
		t.Fatal(err)
	}
	// The poll waits for the test's refreshes.
	b, err := mcp.New(ctx, mcp.Config{Socket: d.Socket, SessionID: k.id, Generation: 1, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ct, st := sdk.NewInMemoryTransports()
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stopKeeping := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- k.keep(kctx, b) }()
	defer func() {
		stopKeeping()
		if err := <-kept; err != nil {
			t.Errorf("keep: %v", err)
		}
		if k.cur != nil {
			k.cur.close(context.Background())
		}
		cs.Close()
		<-served
	}()
	read := func() *sdk.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": "kept.txt"}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// What the bridge lists (tools/list answers it).
	tools := b.Tools
	before := tools()
	if r := read(); r.IsError || len(before) == 0 {
		t.Fatalf("before the restart: %+v, tools %v", r, before)
	}

	d.Stop()
	<-entered
	d2 := daemontest.Start(t, opts)
	if ids := sessionIDs(t, d2.Socket); len(ids) != 0 {
		t.Fatalf("sessions of the new daemon before the reopen: %v", ids)
	}
	r := read()
	code, _ := r.Meta[mcp.MetaError].(map[string]any)["code"].(string)
	if !r.IsError || code != mcp.CodeDaemonUnreachable || !strings.Contains(mcpText(r), "airlock mcp is opening session "+k.id+" again") {
		t.Fatalf("a call before the reopen: code %q, %+v", code, r)
	}
	if err := b.Refresh(ctx); err == nil {
		t.Fatal("a refresh before the reopen succeeded")
	}
	if got := tools(); !slices.Equal(got, before) {
		t.Fatalf("tools before the reopen %v, want %v", got, before)
	}

	close(gate)
	<-h.reopened
	if r := read(); r.IsError || mcpText(r) != "kept\n" {
		t.Fatalf("a call after the reopen: %+v", r)
	}
	if got := tools(); !slices.Equal(got, before) {
		t.Fatalf("tools after the reopen %v, want %v", got, before)
	}
	if ids := sessionIDs(t, d2.Socket); !slices.Equal(ids, []string{k.id}) {
		t.Fatalf("sessions of the new daemon after the reopen: %v", ids)
	}
}

// mcpText is the text of a tool result, whose content airlock gives as one text.
func mcpText(r *sdk.CallToolResult) string {
	if len(r.Content) != 1 {
		return ""
	}
	if tc, ok := r.Content[0].(*sdk.TextContent); ok {
		return tc.Text
	}
	return ""
}
