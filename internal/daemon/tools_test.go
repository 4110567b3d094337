package daemon_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// scriptedAdapter is a host tool adapter written for the test: it binds, answers fs.stat and
// fs.read from fixed data, and records every frame it receives.
type scriptedAdapter struct {
	socket string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	frames []map[string]any
	raw    []string
	// block, when set before a call, holds every invoke's answer until it is closed.
	block chan struct{}
	// holdBind, when set, holds every bind's answer until it is closed.
	holdBind chan struct{}
	conns    []net.Conn
}

// drop closes every connection the adapter accepted, as an adapter that went away would.
func (a *scriptedAdapter) drop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.conns {
		c.Close()
	}
}

func startScriptedAdapter(t *testing.T) *scriptedAdapter {
	t.Helper()
	dir := daemontest.ShortDir(t)
	a := &scriptedAdapter{socket: filepath.Join(dir, "fs.sock")}
	ln, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(a.socket, 0o600)
	a.ln = ln
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.conns = append(a.conns, c)
			a.mu.Unlock()
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); a.wg.Wait() })
	return a
}

func (a *scriptedAdapter) serve(c net.Conn) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f map[string]any
		if json.Unmarshal(sc.Bytes(), &f) != nil {
			return
		}
		a.mu.Lock()
		a.frames = append(a.frames, f)
		a.raw = append(a.raw, sc.Text())
		a.mu.Unlock()
		reply := map[string]any{}
		for _, k := range []string{"protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"} {
			reply[k] = f[k]
		}
		switch f["kind"] {
		case "bind":
			a.mu.Lock()
			hold := a.holdBind
			a.mu.Unlock()
			if hold != nil {
				<-hold
			}
			reply["kind"], reply["operations"], reply["limits"] = "bound", f["operations"], f["limits"]
		case "invoke":
			a.mu.Lock()
			block := a.block
			a.mu.Unlock()
			if block != nil {
				<-block
			}
			reply["kind"] = "result"
			for _, k := range []string{"requestId", "idempotencyKey", "operation"} {
				reply[k] = f[k]
			}
			reply["ok"] = true
			switch f["operation"] {
			case "fs.stat":
				reply["data"] = map[string]any{"type": "file", "size": 5}
			case "fs.read":
				reply["data"] = map[string]any{"content": "hello", "bytesRead": 5, "eof": true}
			}
		case "revoke":
			reply["kind"] = "revoked"
		default:
			return
		}
		line, _ := json.Marshal(reply)
		if _, err := c.Write(append(line, '\n')); err != nil {
			return
		}
	}
}

func (a *scriptedAdapter) kinds() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, f := range a.frames {
		out = append(out, f["kind"].(string))
	}
	return out
}

func newHandle(t *testing.T) string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func descriptor(socket, host, session string, generation int64, handle string, ops ...string) map[string]any {
	return map[string]any{
		"protocolVersion": "1.0",
		"adapterId":       "scripted-fs",
		"adapterVersion":  "1.0.0",
		"endpoint":        map[string]any{"transport": "unix", "path": socket},
		"binding":         map[string]any{"hostInstanceId": host, "sessionId": session, "generation": generation, "capabilityHandle": handle},
		"operations":      ops,
		"limits": map[string]any{"maxRequestBytes": 1048576, "maxResponseBytes": 1048576, "maxConcurrentRequests": 4,
			"maxQueuedRequests": 16, "requestTimeoutMs": 30000, "maxIdempotencyKeys": 256, "idempotencyTtlMs": 3600000},
	}
}

func TestBinaryHostToolAdapter(t *testing.T) {
	adapter := startScriptedAdapter(t)
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	host := hostID(t, c)
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("hello"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(cwd, "link"))
	handle := newHandle(t)
	var lines []string // every response, to scan for the handle

	open := func(g int64, desc map[string]any) *client.Response {
		p := openPayload(cwd)
		p["resources"].(map[string]any)["tools"] = map[string]any{"mode": "host-adapter", "descriptor": desc}
		r := call(t, c, client.Command{Operation: "open", SessionID: "tooled", Generation: gen(g), Payload: p})
		b, _ := json.Marshal(r)
		lines = append(lines, string(b))
		return r
	}
	invoke := func(callID, op string, args map[string]any) *client.Response {
		r := call(t, c, client.Command{Operation: "invokeTool", SessionID: "tooled", Generation: gen(1),
			Payload: map[string]any{"toolCallId": callID, "operation": op, "arguments": args}})
		b, _ := json.Marshal(r)
		lines = append(lines, string(b))
		return r
	}

	// A descriptor bound to another host incarnation is refused before anything connects.
	if r := open(1, descriptor(adapter.socket, "other-host", "tooled", 1, handle, "fs.stat", "fs.read")); code(r) != "tool_adapter_binding_mismatch" {
		t.Fatalf("stale host: %s", code(r))
	}
	if r := open(1, descriptor(adapter.socket, host, "tooled", 1, handle, "fs.stat", "fs.read")); !r.OK {
		t.Fatalf("open with tools: %v", r.Err())
	}
	if k := adapter.kinds(); len(k) != 1 || k[0] != "bind" {
		t.Fatalf("adapter frames after open: %v", k)
	}

	var res struct {
		Data struct {
			Type string `json:"type"`
			Size int    `json:"size"`
		} `json:"data"`
	}
	if err := invoke("call-1", "fs.stat", map[string]any{"path": "a.txt"}).Decode(&res); err != nil || res.Data.Type != "file" || res.Data.Size != 5 {
		t.Fatalf("fs.stat: %v %+v", err, res)
	}
	refusals := []struct {
		op   string
		args map[string]any
		code string
	}{
		{"fs.read", map[string]any{"path": "../outside"}, "invalid_tool_adapter_path"},
		{"fs.read", map[string]any{"path": "/etc/passwd"}, "invalid_tool_adapter_path"},
		{"fs.read", map[string]any{"path": "a//b"}, "invalid_tool_adapter_path"},
		{"fs.read", map[string]any{"path": "link"}, "adapter_path_symlink"},
		{"fs.read", map[string]any{"path": "missing/file"}, "adapter_path_unavailable"},
		{"fs.write", map[string]any{"path": "a.txt", "content": "x"}, "adapter_operation_denied"},
	}
	for _, tc := range refusals {
		if r := invoke("call-x", tc.op, tc.args); code(r) != tc.code {
			t.Errorf("%s %v: %s, want %s", tc.op, tc.args, code(r), tc.code)
		}
	}
	// Refused paths never reached the adapter: it saw the bind and one invoke.
	if k := adapter.kinds(); len(k) != 2 {
		t.Fatalf("adapter saw %v", k)
	}
	// A retry of the same call carries the same idempotency key.
	invoke("call-1", "fs.stat", map[string]any{"path": "a.txt"})
	adapter.mu.Lock()
	k1, k2 := adapter.frames[1]["idempotencyKey"], adapter.frames[2]["idempotencyKey"]
	adapter.mu.Unlock()
	if k1 != k2 || !strings.HasPrefix(k1.(string), "tool-") {
		t.Fatalf("idempotency keys %v and %v", k1, k2)
	}

	var snap struct {
		Queue struct {
			AcceptedRequests  int `json:"acceptedRequests"`
			CompletedRequests int `json:"completedRequests"`
		} `json:"hostToolAdapterQueue"`
	}
	if err := call(t, c, client.Command{Operation: "status", SessionID: "tooled"}).Decode(&snap); err != nil ||
		snap.Queue.CompletedRequests != 2 {
		t.Fatalf("queue telemetry: %v %+v", err, snap)
	}

	// Close revokes the capability.
	call(t, c, client.Command{Operation: "close", SessionID: "tooled", Generation: gen(1)})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(strings.Join(adapter.kinds(), ","), "revoke") {
		if time.Now().After(deadline) {
			t.Fatalf("no revoke after close: %v", adapter.kinds())
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.Stop()
	for _, l := range append(lines, d.Stderr()) {
		if strings.Contains(l, handle) {
			t.Fatalf("the capability handle leaked: %s", l)
		}
	}
	adapter.mu.Lock()
	defer adapter.mu.Unlock()
	for i, l := range adapter.raw {
		if strings.Contains(l, handle) != (i == 0) {
			t.Fatalf("frame %d: the handle must travel in the bind frame only: %s", i, l)
		}
	}
}

func TestBinaryToolAdapterReplacementAndRefusals(t *testing.T) {
	adapter := startScriptedAdapter(t)
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	host := hostID(t, c)
	cwd := t.TempDir()

	// A session without tools has no tool to call.
	call(t, c, client.Command{Operation: "open", SessionID: "plain", Generation: gen(1), Payload: openPayload(cwd)})
	r := call(t, c, client.Command{Operation: "invokeTool", SessionID: "plain", Generation: gen(1),
		Payload: map[string]any{"toolCallId": "c", "operation": "fs.stat", "arguments": map[string]any{"path": "."}}})
	if code(r) != "adapter_operation_denied" {
		t.Fatalf("invokeTool without tools: %s", code(r))
	}

	open := func(g int64, desc map[string]any) *client.Response {
		p := openPayload(cwd)
		p["resources"].(map[string]any)["tools"] = map[string]any{"mode": "host-adapter", "descriptor": desc}
		return call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(g), Payload: p})
	}
	if r := open(1, descriptor(adapter.socket, host, "s", 1, newHandle(t), "fs.stat")); !r.OK {
		t.Fatal(r.Err())
	}
	// A descriptor for another session or generation than the envelope's is refused.
	if r := open(2, descriptor(adapter.socket, host, "s", 3, newHandle(t), "fs.stat")); code(r) != "tool_adapter_binding_mismatch" {
		t.Fatalf("generation mismatch: %s", code(r))
	}
	if r := open(2, descriptor(adapter.socket, host, "other", 2, newHandle(t), "fs.stat")); code(r) != "tool_adapter_binding_mismatch" {
		t.Fatalf("session mismatch: %s", code(r))
	}
	// An unknown member anywhere in the descriptor is refused.
	bad := descriptor(adapter.socket, host, "s", 2, newHandle(t), "fs.stat")
	bad["bearer"] = "token"
	if r := open(2, bad); code(r) != "invalid_tool_adapter_field" {
		t.Fatalf("smuggled member: %s", code(r))
	}
	// A higher generation replaces the first and revokes its capability.
	if r := open(2, descriptor(adapter.socket, host, "s", 2, newHandle(t), "fs.stat")); !r.OK {
		t.Fatal(r.Err())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		k := strings.Join(adapter.kinds(), ",")
		if k == "bind,revoke,bind" || k == "bind,bind,revoke" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("frames after replacement: %s", k)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var h struct {
		Capabilities struct {
			HostToolAdapter bool `json:"hostToolAdapter"`
		} `json:"capabilities"`
	}
	if err := call(t, c, client.Command{Operation: "handshake"}).Decode(&h); err != nil || !h.Capabilities.HostToolAdapter {
		t.Fatalf("2.x handshake does not advertise host tool adapters: %v", err)
	}
	// Drain revokes the capability; reopening the same generation does not pretend it is
	// still bound.
	call(t, c, client.Command{Operation: "drain", Payload: map[string]any{"timeoutMs": 0}})
	if r := open(2, descriptor(adapter.socket, host, "s", 2, newHandle(t), "fs.stat")); code(r) != "host_draining" {
		t.Fatalf("reopen after drain: %s", code(r))
	}
	r = call(t, c, client.Command{Operation: "invokeTool", SessionID: "s", Generation: gen(2),
		Payload: map[string]any{"toolCallId": "c", "operation": "fs.stat", "arguments": map[string]any{"path": "."}}})
	if code(r) != "adapter_session_closed" {
		t.Fatalf("invokeTool after drain: %s", code(r))
	}
}

// TestRebindRefusedOnceDraining: a reopen that binds a failed generation's adapter again is
// refused host_draining when the host began draining while it connected, rather than binding
// a live connection that the drain, which revoked the failed one, never sees.
func TestRebindRefusedOnceDraining(t *testing.T) {
	adapter := startScriptedAdapter(t)
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	host := hostID(t, c)
	cwd := t.TempDir()
	open := func() *client.Response {
		p := openPayload(cwd)
		p["resources"].(map[string]any)["tools"] = map[string]any{"mode": "host-adapter",
			"descriptor": descriptor(adapter.socket, host, "tooled", 1, newHandle(t), "fs.stat")}
		return call(t, d.Dial(), client.Command{Operation: "open", SessionID: "tooled", Generation: gen(1), Payload: p})
	}
	stat := func() *client.Response {
		return call(t, c, client.Command{Operation: "invokeTool", SessionID: "tooled", Generation: gen(1),
			Payload: map[string]any{"toolCallId": "c1", "operation": "fs.stat", "arguments": map[string]any{"path": "a.txt"}}})
	}
	if r := open(); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	hold := make(chan struct{})
	adapter.mu.Lock()
	adapter.holdBind = hold
	adapter.mu.Unlock()
	adapter.drop()
	waitUntil(t, "the adapter connection to fail", func() bool { return !stat().OK })

	reopened := make(chan *client.Response, 1)
	go func() { reopened <- open() }()
	waitUntil(t, "the reopen's bind", func() bool { return strings.Count(strings.Join(adapter.kinds(), " "), "bind") == 2 })
	if r := call(t, c, client.Command{Operation: "drain", Payload: map[string]any{"timeoutMs": 0}}); !r.OK {
		t.Fatalf("drain: %v", r.Err())
	}
	close(hold)
	if r := <-reopened; code(r) != "host_draining" {
		t.Fatalf("reopen across a drain: %s", show(r))
	}
	if r := stat(); r.OK {
		t.Fatalf("a call on a draining host: %s", show(r))
	}
}
