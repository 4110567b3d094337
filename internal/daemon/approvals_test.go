package daemon

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
)

// approvalEnv is an in-process daemon whose host policy asks before an fs.stat under ask/,
// a scripted adapter that answers every stat and counts them, and the bench session on it.
type approvalEnv struct {
	d      *Daemon
	stats  atomic.Int64
	events chan approval.Event
}

func startApprovalEnv(t *testing.T, timeout time.Duration) *approvalEnv {
	t.Helper()
	e := &approvalEnv{events: make(chan approval.Event, 64)}
	sock := filepath.Join(daemontest.ShortDir(t), "fs.sock")
	startScriptedAdapter(t, sock, func(c net.Conn, w *sync.Mutex, f map[string]any, _ []byte) {
		if f["kind"] == "invoke" {
			e.stats.Add(1)
			delete(f, "payload")
			f["kind"], f["ok"], f["data"] = "result", true, map[string]any{"type": "file", "size": 1}
			reply(c, w, f)
		}
	})
	host, err := policy.Parse([]byte(`{"default":"allow","rules":[{"operations":["fs.stat"],"paths":["ask/**"],"decision":"ask","why":"the ask tree"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	e.d = startInProcess(t, Config{Policy: host, ApprovalTimeout: timeout, OnApproval: func(ev approval.Event) {
		select {
		case e.events <- ev:
		default:
			t.Error("approval event dropped: the test reads too slowly")
		}
	}})
	waitReady(t, e.d)
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("a"), 0o600)
	os.Mkdir(filepath.Join(cwd, "ask"), 0o700)
	os.WriteFile(filepath.Join(cwd, "ask", "k"), []byte("k"), 0o600)
	os.WriteFile(filepath.Join(cwd, "ask", "j"), []byte("j"), 0o600)
	openToolSessionWith(t, e.d, sock, cwd, "fs.stat")
	return e
}

func (e *approvalEnv) dial(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, e.d.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// event waits for the queue's next event, which must be of type typ.
func (e *approvalEnv) event(t *testing.T, typ string) approval.Event {
	t.Helper()
	select {
	case ev := <-e.events:
		if ev.Type != typ {
			t.Fatalf("approval event %s (%+v), want %s", ev.Type, ev.Entry, typ)
		}
		return ev
	case <-time.After(lineTimeout):
		t.Fatalf("no %s approval event", typ)
	}
	return approval.Event{}
}

// stat sends an fs.stat invokeTool on c and returns the channel of its response.
func stat(c *client.Client, id, path string) <-chan *client.Response {
	out := make(chan *client.Response, 1)
	go func() {
		// A call waits for the operator, whom a test may play with airlock processes of its
		// own: on a loaded machine that takes longer than one line's timeout.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		g := int64(1)
		r, err := c.Call(ctx, client.Command{Operation: "invokeTool", SessionID: "bench", Generation: &g, Client: "claude-code",
			Payload: map[string]any{"toolCallId": id, "operation": "fs.stat", "arguments": map[string]any{"path": path}}})
		if err != nil {
			// The call's own failure (a timeout on a loaded machine, a closed connection),
			// named, rather than an empty answer that hides it.
			r = &client.Response{Error: &protocol.Error{Code: "call_failed", Message: err.Error()}}
		}
		out <- r
	}()
	return out
}

func decide(t *testing.T, c *client.Client, payload map[string]any) *client.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), lineTimeout)
	defer cancel()
	r, err := c.Call(ctx, client.Command{Operation: "decideApproval", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSocketCallWaitsForApproval: an owner-socket invokeTool the host policy asks about waits
// in the queue, with its actor, path and rule, and does not hold its connection: a call
// after it on the same connection is answered first. Approved, it runs once; denied, it is
// refused approval_denied and never reaches the adapter; undecided, approval_timeout after
// the daemon's approval timeout; a decision on a decided id is unknown_approval. The
// session's attached client gets each step as an approval event.
func TestSocketCallWaitsForApproval(t *testing.T) {
	e := startApprovalEnv(t, 2*time.Second)
	caller, operator, watcher := e.dial(t), e.dial(t), e.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), lineTimeout)
	defer cancel()
	g := int64(1)
	if r, err := watcher.Call(ctx, client.Command{Operation: "attach", SessionID: "bench", Generation: &g}); err != nil || !r.OK {
		t.Fatalf("attach: %v %v", r, err)
	}

	asked := stat(caller, "c1", "ask/k")
	ev := e.event(t, approval.EventAsked)
	if ev.Entry.Target != "fs.stat" || ev.Entry.Path != "ask/k" || ev.Entry.Actor.Client != "claude-code" ||
		ev.Entry.Actor.Session != "bench" || ev.Entry.Actor.PID != os.Getpid() ||
		ev.Entry.Reason != "host policy rule 1 (the ask tree): ask fs.stat" {
		t.Fatalf("asked: %+v", ev.Entry)
	}
	// The same connection answers the next call while the first waits.
	if r := <-stat(caller, "c2", "a.txt"); !r.OK {
		t.Fatalf("the call behind the waiting one: %+v", r)
	}
	select {
	case r := <-asked:
		t.Fatalf("the asked call was answered before a decision: %+v", r)
	default:
	}
	if n := e.stats.Load(); n != 1 {
		t.Fatalf("the adapter got %d stats before the decision, want 1 (a.txt)", n)
	}
	var list ApprovalList
	if err := callErr(operator.Call(ctx, client.Command{Operation: "listApprovals", Payload: map[string]any{}})); err != nil {
		t.Fatal(err)
	}
	r, _ := operator.Call(ctx, client.Command{Operation: "listApprovals", Payload: map[string]any{}})
	if err := r.Decode(&list); err != nil || len(list.Approvals) != 1 || list.Approvals[0].ID != ev.Entry.ID {
		t.Fatalf("listApprovals: %+v %v", list, err)
	}
	if r := decide(t, operator, map[string]any{"approvalId": ev.Entry.ID, "approve": true}); !r.OK {
		t.Fatalf("approve: %v", r.Err())
	}
	if d := e.event(t, approval.EventApproved); d.Decision.By != approval.ByCLI {
		t.Fatalf("approved by %q", d.Decision.By)
	}
	if r := <-asked; !r.OK {
		t.Fatalf("the approved call: %v", r.Err())
	}
	if n := e.stats.Load(); n != 2 {
		t.Fatalf("the adapter got %d stats, want 2", n)
	}
	if r := decide(t, operator, map[string]any{"approvalId": ev.Entry.ID, "approve": false}); r.OK || r.Error.Code != approval.CodeUnknownApproval {
		t.Fatalf("a second decision: %+v", r)
	}

	// Denied.
	asked = stat(caller, "c3", "ask/k")
	ev = e.event(t, approval.EventAsked)
	if r := decide(t, operator, map[string]any{"approvalId": ev.Entry.ID, "approve": false}); !r.OK {
		t.Fatalf("deny: %v", r.Err())
	}
	e.event(t, approval.EventDenied)
	if r := <-asked; r.OK || r.Error.Code != approval.CodeApprovalDenied || r.Error.Details["approvalId"] != ev.Entry.ID {
		t.Fatalf("the denied call: %+v", r.Error)
	}

	// Nobody answers.
	start := time.Now()
	asked = stat(caller, "c4", "ask/k")
	e.event(t, approval.EventAsked)
	e.event(t, approval.EventTimedOut)
	if r := <-asked; r.OK || r.Error.Code != approval.CodeApprovalTimeout {
		t.Fatalf("the undecided call: %+v", r.Error)
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Fatalf("timed out after %v, before the daemon's approval timeout", waited)
	}
	if n := e.stats.Load(); n != 2 {
		t.Fatalf("a denied or undecided call reached the adapter: %d stats", n)
	}

	// The attached client saw every step of its session's calls.
	var seen []string
	for len(seen) < 6 {
		select {
		case raw := <-watcher.Events():
			var ev struct {
				Event string        `json:"event"`
				Data  ApprovalEvent `json:"data"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Event == "approval" {
				seen = append(seen, ev.Data.Type)
			}
		case <-time.After(lineTimeout):
			t.Fatalf("attached client saw %v", seen)
		}
	}
	if got := seen; got[0] != "asked" || got[1] != "approved" || got[2] != "asked" || got[3] != "denied" || got[4] != "asked" || got[5] != "timed_out" {
		t.Fatalf("attached client saw %v", got)
	}
}

// TestRememberedApprovalAtTheSocket: approve with remember and a pattern, and the next stat
// under the pattern runs without waiting (By remembered), in the same session generation;
// the memory is listed and forgotten over the socket, after which the call waits again; a
// pattern that does not fit the call is refused not_rememberable and decides nothing; the
// memory ends with its generation.
func TestRememberedApprovalAtTheSocket(t *testing.T) {
	e := startApprovalEnv(t, time.Minute)
	caller, operator := e.dial(t), e.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), lineTimeout)
	defer cancel()

	asked := stat(caller, "c1", "ask/k")
	ev := e.event(t, approval.EventAsked)
	if r := decide(t, operator, map[string]any{"approvalId": ev.Entry.ID, "approve": true, "remember": true, "pattern": "other/**"}); r.OK || r.Error.Code != approval.CodeNotRememberable {
		t.Fatalf("a pattern beside the call: %+v", r)
	}
	r := decide(t, operator, map[string]any{"approvalId": ev.Entry.ID, "approve": true, "remember": true, "pattern": "ask/*"})
	var dec ApprovalDecision
	if err := r.Decode(&dec); err != nil || dec.Memory == nil || dec.Memory.Pattern != "ask/*" || dec.Memory.Scope != (approval.Scope{Session: "bench", Generation: 1}) {
		t.Fatalf("remember: %+v %v", dec, err)
	}
	e.event(t, approval.EventApproved)
	e.event(t, approval.EventRemembered)
	if r := <-asked; !r.OK {
		t.Fatal(r.Err())
	}
	if r := <-stat(caller, "c2", "ask/j"); !r.OK {
		t.Fatalf("the remembered call: %v", r.Err())
	}
	if d := e.event(t, approval.EventApproved); d.Decision.By != approval.ByRemembered || d.Entry.Path != "ask/j" {
		t.Fatalf("remembered answer: %+v", d)
	}
	var mem RememberedList
	r, _ = operator.Call(ctx, client.Command{Operation: "listRememberedApprovals", Payload: map[string]any{}})
	if err := r.Decode(&mem); err != nil || len(mem.Remembered) != 1 || mem.Remembered[0].Uses != 1 {
		t.Fatalf("listRememberedApprovals: %+v %v", mem, err)
	}
	r, _ = operator.Call(ctx, client.Command{Operation: "forgetApproval", Payload: map[string]any{"memoryId": mem.Remembered[0].ID}})
	if !r.OK {
		t.Fatal(r.Err())
	}
	e.event(t, approval.EventForgotten)
	r, _ = operator.Call(ctx, client.Command{Operation: "forgetApproval", Payload: map[string]any{"memoryId": mem.Remembered[0].ID}})
	if r.OK || r.Error.Code != approval.CodeUnknownApproval {
		t.Fatalf("forget twice: %+v", r)
	}
	asked = stat(caller, "c3", "ask/j")
	ev = e.event(t, approval.EventAsked)
	// Remember again, then end the generation: the memory goes with it.
	decide(t, operator, map[string]any{"approvalId": ev.Entry.ID, "approve": true, "remember": true})
	e.event(t, approval.EventApproved)
	e.event(t, approval.EventRemembered)
	<-asked
	g := int64(1)
	if r, err := operator.Call(ctx, client.Command{Operation: "close", SessionID: "bench", Generation: &g, Payload: map[string]any{}}); err != nil || !r.OK {
		t.Fatalf("close: %v %v", r, err)
	}
	e.event(t, approval.EventForgotten)
	if n := len(e.d.Approvals().Remembered()); n != 0 {
		t.Fatalf("%d memories outlived their generation", n)
	}
}

// TestCapabilityCallWaitsOffTheReader: an invokeCapability the host policy asks about waits
// in the queue without holding its connection (an observe after it on the same connection is
// answered first), and runs once approved.
func TestCapabilityCallWaitsOffTheReader(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	host, err := policy.Parse([]byte(`{"default":"allow","rules":[{"capability":"desk_lamp","actions":["set_power"],"decision":"ask"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan approval.Event, 16)
	d := startInProcess(t, Config{Policy: host, OnApproval: func(ev approval.Event) { events <- ev }})
	waitReady(t, d)
	e := &approvalEnv{d: d, events: events}
	caller, operator := e.dial(t), e.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), lineTimeout)
	defer cancel()
	if err := callErr(operator.Call(ctx, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "lamp", "command": lamp}})); err != nil {
		t.Fatal(err)
	}
	invoked := make(chan *client.Response, 1)
	go func() {
		r, err := caller.Call(ctx, client.Command{Operation: "invokeCapability", Payload: map[string]any{"capabilityId": "desk_lamp", "action": "set_power", "args": map[string]any{"on": true}}})
		if err != nil {
			r = &client.Response{}
		}
		invoked <- r
	}()
	ev := e.event(t, approval.EventAsked)
	if ev.Entry.Target != "desk_lamp.set_power" || ev.Entry.Actor.Door != "socket" || string(ev.Entry.Args) != `{"on":true}` {
		t.Fatalf("asked: %+v", ev.Entry)
	}
	var obs struct {
		Result struct {
			On bool `json:"on"`
		} `json:"result"`
	}
	r, err := caller.Call(ctx, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "desk_lamp"}})
	if err != nil || r.Decode(&obs) != nil || obs.Result.On {
		t.Fatalf("the observe behind the waiting invoke: %+v %v", r, err)
	}
	if r := decide(t, operator, map[string]any{"approvalId": ev.Entry.ID, "approve": true}); !r.OK {
		t.Fatal(r.Err())
	}
	e.event(t, approval.EventApproved)
	if r := <-invoked; !r.OK {
		t.Fatalf("the approved invoke: %v", r.Err())
	}
	r, _ = caller.Call(ctx, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "desk_lamp"}})
	if r.Decode(&obs) != nil || !obs.Result.On {
		t.Fatalf("the lamp after the approved set_power: %+v", r)
	}
}

// TestRoomApprovalWaitsTheApprovalTimeout: a room call to an approve-each publication waits
// the daemon's approval timeout when it is shorter than the caller's deadline, as every
// request does, and is refused approval_timeout then.
func TestRoomApprovalWaitsTheApprovalTimeout(t *testing.T) {
	q := approval.NewQueue(approval.Config{Timeout: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() {
		done <- roomApprover{q}.WaitApproval(context.Background(), room.PendingApproval{Room: "home",
			Caller: room.HostID("b"), Capability: "desk_lamp", Action: "set_power", Deadline: time.Now().Add(time.Minute)})
	}()
	select {
	case err := <-done:
		if room.CodeOf(err) != room.CodeApprovalTimeout {
			t.Fatalf("WaitApproval = %v, want %s", err, room.CodeApprovalTimeout)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the room call waited the caller's minute, not the approval timeout")
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d requests still wait", n)
	}
}

// TestApprovalWaitEndsWithTheDaemon: a call waiting for the operator when the daemon stops is
// refused approval_timeout saying that the daemon is stopping, not that its caller stopped
// waiting (which it did not).
func TestApprovalWaitEndsWithTheDaemon(t *testing.T) {
	e := startApprovalEnv(t, time.Minute)
	asked := stat(e.dial(t), "c1", "ask/k")
	e.event(t, approval.EventAsked)
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), lineTimeout)
		defer cancel()
		stopped <- e.d.Shutdown(ctx)
	}()
	r := <-asked
	if r.OK || r.Error == nil || r.Error.Code != approval.CodeApprovalTimeout || !strings.Contains(r.Error.Message, "the daemon is stopping") {
		t.Fatalf("the waiting call when the daemon stopped: %+v", r.Error)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// TestApprovalsOnTheControlBand: when every regular connection is busy with a call waiting
// for the operator, the operator still lists the queue and decides it on a connection of the
// control band; before, both were refused connection_control_only until the calls timed out.
func TestApprovalsOnTheControlBand(t *testing.T) {
	e := &approvalEnv{events: make(chan approval.Event, 64)}
	sock := filepath.Join(daemontest.ShortDir(t), "fs.sock")
	startScriptedAdapter(t, sock, func(c net.Conn, w *sync.Mutex, f map[string]any, _ []byte) {
		if f["kind"] == "invoke" {
			delete(f, "payload")
			f["kind"], f["ok"], f["data"] = "result", true, map[string]any{"type": "file", "size": 1}
			reply(c, w, f)
		}
	})
	host, err := policy.Parse([]byte(`{"default":"allow","rules":[{"operations":["fs.stat"],"paths":["ask/**"],"decision":"ask"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits
	lim.MaxConnections, lim.MaxConnectionsPerPeer, lim.MaxAttachments = 2, 2, 1
	lim.ControlConnections, lim.ControlConnectionsPerPeer = 1, 1
	e.d = startInProcess(t, Config{Policy: host, Limits: lim, OnApproval: func(ev approval.Event) { e.events <- ev }})
	waitReady(t, e.d)
	cwd := t.TempDir()
	os.Mkdir(filepath.Join(cwd, "ask"), 0o700)
	os.WriteFile(filepath.Join(cwd, "ask", "k"), []byte("k"), 0o600)
	openToolSessionWith(t, e.d, sock, cwd, "fs.stat")

	first := stat(e.dial(t), "c1", "ask/k")
	e.event(t, approval.EventAsked)
	second := stat(e.dial(t), "c2", "ask/k")
	e.event(t, approval.EventAsked)
	// Every regular connection is busy: the operator's commands, another process's, are
	// admitted to the control band.
	operator := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(daemontest.Binary(t, "airlock"), append([]string{"--socket", e.d.cfg.SocketPath}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("airlock %v on the control band: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var env struct {
		Data ApprovalList `json:"data"`
	}
	if err := json.Unmarshal([]byte(operator("approvals", "--json")), &env); err != nil || len(env.Data.Approvals) != 2 {
		t.Fatalf("airlock approvals: %+v %v", env, err)
	}
	for _, a := range env.Data.Approvals {
		operator("approve", a.ID)
	}
	for _, done := range []<-chan *client.Response{first, second} {
		if r := <-done; !r.OK {
			t.Fatalf("an approved call: %v", r.Err())
		}
	}
}

// TestApprovalWaitEndsWithItsConnection: a call waiting for the operator ends, refused
// approval_timeout, as soon as its caller's connection is gone (airlock tool interrupted, a
// harness killed), instead of waiting out its timeout in the queue where the operator could
// still approve it and run it for nobody. A caller that only shut down its writing, and still
// reads, keeps waiting and gets the answer.
func TestApprovalWaitEndsWithItsConnection(t *testing.T) {
	e := startApprovalEnv(t, time.Minute)
	send := func(id string) *net.UnixConn {
		t.Helper()
		nc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: e.d.cfg.SocketPath, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		line := `{"protocolVersion":"2.0","requestId":"` + id + `","operation":"invokeTool","sessionId":"bench","generation":1,` +
			`"payload":{"toolCallId":"` + id + `","operation":"fs.stat","arguments":{"path":"ask/k"}}}` + "\n"
		if _, err := nc.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		return nc
	}

	gone := send("gone")
	e.event(t, approval.EventAsked)
	gone.Close()
	e.event(t, approval.EventTimedOut)
	if n := e.d.Approvals().Len(); n != 0 {
		t.Fatalf("%d requests still wait after their caller went", n)
	}

	reading := send("reading")
	ev := e.event(t, approval.EventAsked)
	if err := reading.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Approvals().Approve(ev.Entry.ID, approval.ByCLI, false); err != nil {
		t.Fatalf("the half-closed caller's request: %v", err)
	}
	e.event(t, approval.EventApproved)
	reading.SetReadDeadline(time.Now().Add(lineTimeout))
	answer, err := io.ReadAll(reading)
	if err != nil || !strings.Contains(string(answer), `"requestId":"reading"`) || !strings.Contains(string(answer), `"ok":true`) {
		t.Fatalf("the half-closed caller's answer: %s %v", answer, err)
	}
	if n := e.stats.Load(); n != 1 {
		t.Fatalf("the adapter got %d stats, want 1 (the approved one)", n)
	}
}
