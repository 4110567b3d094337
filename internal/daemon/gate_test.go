package daemon

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/policy"
)

// hookCall is what recordingHook saw of one call: its actor without the Peer, and whether it
// had one (a call of a socket connection has its connection's peer, whose executable the
// journal reads once per connection).
type hookCall struct {
	actor  gate.Actor
	peered bool
	target string
	path   string
	before bool
	out    gate.Outcome
}

// seen is what a hook records of c.
func seen(c *gate.Call) hookCall {
	a := c.Actor
	peered := a.Peer != nil
	a.Peer = nil
	return hookCall{actor: a, peered: peered, target: c.Target(), path: c.Path}
}

// recordingHook stands where the audit journal and the metrics will: it records what the
// gate tells it.
type recordingHook struct {
	mu    sync.Mutex
	calls []hookCall
	done  chan struct{}
}

func (h *recordingHook) Before(_ context.Context, c *gate.Call) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	hc := seen(c)
	hc.before = true
	h.calls = append(h.calls, hc)
	return nil
}

func (h *recordingHook) After(c *gate.Call, o gate.Outcome) {
	h.mu.Lock()
	hc := seen(c)
	hc.out = o
	h.calls = append(h.calls, hc)
	h.mu.Unlock()
	h.done <- struct{}{}
}

// TestGateHooksSeeTheActorAndOutcome: the gate's hooks see each owner-socket invokeTool with
// its actor (the socket door and the peer's pid; the mcp door and the client's name when the
// command names one), Before only for a call that runs, and After with the outcome of every
// call, the refused one included, before its answer arrives.
func TestGateHooksSeeTheActorAndOutcome(t *testing.T) {
	root := daemontest.ShortDir(t)
	sock := filepath.Join(root, "fs.sock")
	startScriptedAdapter(t, sock, func(c net.Conn, w *sync.Mutex, f map[string]any, _ []byte) {
		if f["kind"] == "invoke" {
			delete(f, "payload")
			f["kind"], f["ok"], f["data"] = "result", true, map[string]any{"type": "file", "size": 1}
			reply(c, w, f)
		}
	})
	host, err := policy.Parse([]byte(`{"default":"allow","rules":[{"operations":["fs.stat"],"paths":["secret/**"],"decision":"deny"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	h := &recordingHook{done: make(chan struct{}, 8)}
	d := startInProcess(t, Config{Policy: host, GateHooks: []gate.Hook{h}})
	waitReady(t, d)
	cwd := t.TempDir()
	// The grant's path checks run before the policy: both paths exist.
	os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("a"), 0o600)
	os.Mkdir(filepath.Join(cwd, "secret"), 0o700)
	os.WriteFile(filepath.Join(cwd, "secret", "k"), []byte("k"), 0o600)
	openToolSessionWith(t, d, sock, cwd, "fs.stat")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, d.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := int64(1)
	stat := func(id, path, clientName string) *client.Response {
		r, err := c.Call(ctx, client.Command{Operation: "invokeTool", SessionID: "bench", Generation: &g, Client: clientName,
			Payload: map[string]any{"toolCallId": id, "operation": "fs.stat", "arguments": map[string]any{"path": path}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := stat("c1", "a.txt", ""); !r.OK {
		t.Fatal(r.Err())
	}
	if r := stat("c2", "secret/k", "claude-code"); r.OK || r.Error.Code != gate.CodePolicyDenied {
		t.Fatalf("denied stat: %+v", r)
	}
	for range 2 {
		<-h.done
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	want := []hookCall{
		{actor: gate.Actor{Door: gate.DoorSocket, PID: os.Getpid(), UID: os.Geteuid(), Session: "bench", Generation: 1}, peered: true, target: "fs.stat", path: "a.txt", before: true},
		{actor: gate.Actor{Door: gate.DoorSocket, PID: os.Getpid(), UID: os.Geteuid(), Session: "bench", Generation: 1}, peered: true, target: "fs.stat", path: "a.txt", out: gate.Outcome{Stage: gate.StageAdapter}},
		{actor: gate.Actor{Door: gate.DoorMCP, PID: os.Getpid(), UID: os.Geteuid(), Session: "bench", Generation: 1, Client: "claude-code"}, peered: true, target: "fs.stat", path: "secret/k", out: gate.Outcome{Stage: gate.StagePolicy, Code: gate.CodePolicyDenied}},
	}
	if len(h.calls) != len(want) {
		t.Fatalf("hooks saw %+v", h.calls)
	}
	for i, w := range want {
		got := h.calls[i]
		got.out.Duration = 0
		if got != w {
			t.Errorf("call %d: %+v, want %+v", i, got, w)
		}
	}
}
