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
)

// TestGateHooksSeeTheDoorsRefusals: a call that the door's own checks refuse before the
// policy — a path the grant's check refuses, a generation with no tools, a capability call
// naming a session that does not exist — reaches the hooks' After once, with StageGrant and
// the code the caller got, and never their Before; a command that does not decode is no call.
func TestGateHooksSeeTheDoorsRefusals(t *testing.T) {
	root := daemontest.ShortDir(t)
	sock := filepath.Join(root, "fs.sock")
	startScriptedAdapter(t, sock, func(c net.Conn, w *sync.Mutex, f map[string]any, _ []byte) {})
	h := &recordingHook{done: make(chan struct{}, 8)}
	d := startInProcess(t, Config{GateHooks: []gate.Hook{h}})
	waitReady(t, d)
	openToolSessionWith(t, d, sock, t.TempDir(), "fs.stat")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, d.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	refused := func(cmd client.Command) string {
		t.Helper()
		r, err := c.Call(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if r.OK {
			t.Fatalf("%s succeeded", cmd.Operation)
		}
		return r.Error.Code
	}
	g1, g2 := int64(1), int64(2)
	stat := func(id, path string, g *int64) client.Command {
		return client.Command{Operation: "invokeTool", SessionID: "bench", Generation: g,
			Payload: map[string]any{"toolCallId": id, "operation": "fs.stat", "arguments": map[string]any{"path": path}}}
	}
	codes := []string{
		refused(stat("c1", "../outside", &g1)),
		refused(stat("c2", "a.txt", &g2)),
		refused(client.Command{Operation: "invokeCapability", SessionID: "nobody", Generation: &g1, Client: "claude-code",
			Payload: map[string]any{"capabilityId": "lamp", "action": "on", "args": map[string]any{}}}),
	}
	// Not a call: the payload does not decode.
	refused(client.Command{Operation: "invokeTool", SessionID: "bench", Generation: &g1, Payload: map[string]any{"toolCallId": "c3"}})
	// After runs before the answer leaves: every answered call's After has run.
	h.mu.Lock()
	defer h.mu.Unlock()
	pid, uid := os.Getpid(), os.Geteuid()
	want := []hookCall{
		{actor: gate.Actor{Door: gate.DoorSocket, PID: pid, UID: uid, Session: "bench", Generation: 1}, peered: true, target: "fs.stat", out: gate.Outcome{Stage: gate.StageGrant, Code: codes[0]}},
		{actor: gate.Actor{Door: gate.DoorSocket, PID: pid, UID: uid, Session: "bench", Generation: 2}, peered: true, target: "fs.stat", out: gate.Outcome{Stage: gate.StageGrant, Code: codes[1]}},
		{actor: gate.Actor{Door: gate.DoorMCP, PID: pid, UID: uid, Session: "nobody", Generation: 1, Client: "claude-code"}, peered: true, target: "lamp.on", out: gate.Outcome{Stage: gate.StageGrant, Code: codes[2]}},
	}
	if len(h.calls) != len(want) {
		t.Fatalf("hooks saw %+v", h.calls)
	}
	for i, w := range want {
		if h.calls[i] != w {
			t.Errorf("call %d: %+v, want %+v", i, h.calls[i], w)
		}
	}
}
