package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/ownersock"
)

func TestBindRefusedWithoutAByte(t *testing.T) {
	f := newFixture(t)
	d := f.grant(grantOpts{ops: []string{"fs.read", "fs.list"}})
	other := newHandle()
	mutate := func(fn func(m map[string]any)) map[string]any {
		m := bindFrame(d)
		fn(m)
		return m
	}
	cases := []struct {
		name  string
		frame map[string]any
		raw   string
	}{
		{name: "wrong handle", frame: mutate(func(m map[string]any) { m["capabilityHandle"] = other })},
		{name: "wrong session", frame: mutate(func(m map[string]any) { m["sessionId"] = "s2" })},
		{name: "wrong generation", frame: mutate(func(m map[string]any) { m["generation"] = 2 })},
		{name: "wrong host", frame: mutate(func(m map[string]any) { m["hostInstanceId"] = "host-2" })},
		{name: "wrong adapter id", frame: mutate(func(m map[string]any) { m["adapterId"] = "other-fs" })},
		{name: "wrong adapter version", frame: mutate(func(m map[string]any) { m["adapterVersion"] = "9.9.9" })},
		{name: "operations reordered", frame: mutate(func(m map[string]any) { m["operations"] = []string{"fs.list", "fs.read"} })},
		{name: "operations subset", frame: mutate(func(m map[string]any) { m["operations"] = []string{"fs.read"} })},
		{name: "wrong limits", frame: mutate(func(m map[string]any) {
			l := map[string]any{}
			for k, v := range m["limits"].(map[string]any) {
				l[k] = v
			}
			l["maxConcurrentRequests"] = 5
			m["limits"] = l
		})},
		{name: "invoke first", frame: mutate(func(m map[string]any) {
			delete(m, "capabilityHandle")
			delete(m, "operations")
			delete(m, "limits")
			m["kind"], m["requestId"], m["idempotencyKey"], m["operation"], m["payload"] = "invoke", "r1", "k1", "fs.read", map[string]any{"path": "a"}
		})},
		{name: "extra member", frame: mutate(func(m map[string]any) { m["extra"] = true })},
		{name: "garbage", raw: "hello"},
		{name: "oversized first line", raw: strings.Repeat("x", 64<<10)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := f.dial()
			if tc.raw != "" {
				w.sendRaw(tc.raw)
			} else {
				w.send(tc.frame)
			}
			w.expectSilentClose()
		})
	}
	// The real bind still works, and a second bind of the bound grant is refused silently.
	f.bind(d)
	w := f.dial()
	w.send(bindFrame(d))
	w.expectSilentClose()
	if strings.Contains(f.logs.String(), f.handle) || strings.Contains(f.logs.String(), other) {
		t.Fatal("a handle reached the log")
	}
	// Refusals are warned of at most once per interval: a peer retrying a dead handle cannot
	// flood the log.
	if n := strings.Count(f.logs.String(), `msg="bind refused: `); n != 1 {
		t.Fatalf("%d bind-refused warnings for %d refusals, want 1:\n%s", n, len(cases)+1, f.logs.String())
	}
}

func TestOperations(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.root, "a.txt"), []byte("hello world\nsecond line\n"), 0o600)
	os.Mkdir(filepath.Join(f.root, "sub"), 0o700)
	os.WriteFile(filepath.Join(f.root, "sub", "b.txt"), []byte("world again\n"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(f.root, "link"))
	d := f.grant(grantOpts{})
	w := f.bind(d)
	data := func(r map[string]any) map[string]any {
		t.Helper()
		if r["ok"] != true {
			t.Fatalf("result: %v", r)
		}
		return r["data"].(map[string]any)
	}

	list := data(w.call("r1", "k1", "fs.list", map[string]any{"path": "."}))
	var names []string
	for _, e := range list["entries"].([]any) {
		names = append(names, e.(map[string]any)["name"].(string))
	}
	if !reflect.DeepEqual(names, []string{"a.txt", "sub"}) || list["truncated"] != false {
		t.Fatalf("fs.list: %v", list)
	}
	if st := data(w.call("r2", "k2", "fs.stat", map[string]any{"path": "a.txt"})); st["type"] != "file" || st["size"] != 24.0 {
		t.Fatalf("fs.stat: %v", st)
	}
	if rd := data(w.call("r3", "k3", "fs.read", map[string]any{"path": "a.txt", "maxBytes": 5})); rd["content"] != "hello" || rd["eof"] != false {
		t.Fatalf("fs.read: %v", rd)
	}
	sr := data(w.call("r4", "k4", "fs.search", map[string]any{"path": ".", "query": "world"}))
	if m := sr["matches"].([]any); len(m) != 2 || m[0].(map[string]any)["path"] != "a.txt" || m[1].(map[string]any)["column"] != 1.0 {
		t.Fatalf("fs.search: %v", sr)
	}
	if wr := data(w.call("r5", "k5", "fs.write", map[string]any{"path": "new.txt", "content": "one\n"})); wr["created"] != true || wr["bytesWritten"] != 4.0 {
		t.Fatalf("fs.write: %v", wr)
	}
	if ed := data(w.call("r6", "k6", "fs.edit", map[string]any{"path": "new.txt", "edits": []any{map[string]any{"oldText": "one", "newText": "two"}}})); ed["replacements"] != 1.0 {
		t.Fatalf("fs.edit: %v", ed)
	}
	if b, _ := os.ReadFile(filepath.Join(f.root, "new.txt")); string(b) != "two\n" {
		t.Fatalf("file after edit: %q", b)
	}
	// The adapter re-validates: an escaping path gets a typed error result, not a dropped
	// connection, and a symlink is refused by the kernel resolution.
	for i, tc := range []struct {
		path, code string
	}{
		{"../outside", "invalid_path"}, {"/etc/passwd", "invalid_path"}, {"a//b", "invalid_path"},
		{"link", "path_symlink"}, {"missing", "not_found"},
	} {
		if c := errorCode(w.call(fmt.Sprint("rp-", i), fmt.Sprint("kp-", i), "fs.read", map[string]any{"path": tc.path})); c != tc.code {
			t.Errorf("fs.read %q: %s, want %s", tc.path, c, tc.code)
		}
	}
	// A member the payload does not have is refused by the adapter's own decoder.
	if c := errorCode(w.call("rx", "kx", "fs.stat", map[string]any{"path": "a.txt", "follow": true})); c != "invalid_argument" {
		t.Fatalf("unknown payload member: %s", c)
	}
	// Error messages name no absolute path.
	r := w.call("ry", "ky", "fs.read", map[string]any{"path": "sub"})
	if msg := r["error"].(map[string]any)["message"].(string); strings.Contains(msg, f.root) {
		t.Fatalf("message leaks the root: %s", msg)
	}
}

func TestIdempotentReplay(t *testing.T) {
	f := newFixture(t)
	d := f.grant(grantOpts{})
	w := f.bind(d)
	target := filepath.Join(f.root, "w.txt")
	first := w.call("r1", "key-w", "fs.write", map[string]any{"path": "w.txt", "content": "first"})
	if first["ok"] != true {
		t.Fatalf("write: %v", first)
	}
	st1, _ := os.Stat(target)
	var ino1 uint64
	if s, ok := st1.Sys().(*syscall.Stat_t); ok {
		ino1 = s.Ino
	}
	time.Sleep(20 * time.Millisecond) // a second write would show a later mtime
	// The same key and payload (members in another order) returns the first result, and the
	// write is not repeated: a repeat would fail file_exists, and would replace the inode.
	w.sendRaw(`{"protocolVersion":"1.0","kind":"invoke","adapterId":"airlock-fs","adapterVersion":"0.1.0","hostInstanceId":"host-1","sessionId":"s1","generation":1,"requestId":"r2","idempotencyKey":"key-w","operation":"fs.write","payload":{"content":"first","path":"w.txt"}}`)
	replay := w.next()
	if !reflect.DeepEqual(replay["data"], first["data"]) || replay["requestId"] != "r2" {
		t.Fatalf("replay: %v, first %v", replay, first)
	}
	st2, _ := os.Stat(target)
	if s, ok := st2.Sys().(*syscall.Stat_t); !ok || s.Ino != ino1 || !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatal("the replay wrote the file again")
	}
	// The same key with another payload is a conflict, and nothing is written.
	if c := errorCode(w.call("r3", "key-w", "fs.write", map[string]any{"path": "w.txt", "content": "second", "overwrite": true})); c != CodeIdempotencyConflict {
		t.Fatalf("conflict: %s", c)
	}
	if c := errorCode(w.call("r4", "key-w", "fs.read", map[string]any{"path": "w.txt"})); c != CodeIdempotencyConflict {
		t.Fatalf("conflict on another operation: %s", c)
	}
	if b, _ := os.ReadFile(target); string(b) != "first" {
		t.Fatalf("content %q", b)
	}
	// A non-retryable failure is replayed too.
	a := w.call("r5", "key-x", "fs.write", map[string]any{"path": "w.txt", "content": "x"})
	b := w.call("r6", "key-x", "fs.write", map[string]any{"path": "w.txt", "content": "x"})
	if errorCode(a) != "file_exists" || !reflect.DeepEqual(a["error"], b["error"]) {
		t.Fatalf("failure replay: %v %v", a, b)
	}
}

func TestIdempotentJoinWhileRunning(t *testing.T) {
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	var runs int
	setHook(t, func(ctx context.Context, op string) {
		runs++ // only one execution may happen; the race detector would see a second one
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	f := newFixture(t)
	w := f.bind(f.grant(grantOpts{}))
	w.invoke("r1", "key-j", "fs.write", map[string]any{"path": "j.txt", "content": "once"})
	<-entered
	w.invoke("r2", "key-j", "fs.write", map[string]any{"path": "j.txt", "content": "once"})
	// r2 joined r1: nothing more ran. Make sure r2 was read before releasing r1.
	if c := errorCode(w.call("r3", "key-j", "fs.write", map[string]any{"path": "j.txt", "content": "other"})); c != CodeIdempotencyConflict {
		t.Fatalf("conflict while running: %s", c)
	}
	close(release)
	got := map[string]map[string]any{}
	for range 2 {
		r := w.next()
		got[r["requestId"].(string)] = r
	}
	if got["r1"]["ok"] != true || !reflect.DeepEqual(got["r1"]["data"], got["r2"]["data"]) {
		t.Fatalf("joined results: %v", got)
	}
	if runs != 1 {
		t.Fatalf("%d executions", runs)
	}
}

func TestAbortRunningSearch(t *testing.T) {
	entered := make(chan struct{}, 1)
	setHook(t, func(ctx context.Context, op string) {
		if op == "fs.search" {
			entered <- struct{}{}
			<-ctx.Done() // a search that runs until it is cancelled
		}
	})
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.root, "a.txt"), []byte("needle\n"), 0o600)
	w := f.bind(f.grant(grantOpts{}))
	w.invoke("r1", "key-s", "fs.search", map[string]any{"path": ".", "query": "needle"})
	<-entered
	w.abort("a1", "r1")
	var ack, res map[string]any
	for range 2 {
		m := w.next()
		switch m["kind"] {
		case "aborted":
			ack = m
		case "result":
			res = m
		}
	}
	if ack == nil || ack["aborted"] != true || ack["requestId"] != "a1" || ack["targetRequestId"] != "r1" || ack["error"] != nil {
		t.Fatalf("aborted: %v", ack)
	}
	if res == nil || errorCode(res) != "canceled" || res["error"].(map[string]any)["retryable"] != true {
		t.Fatalf("result after abort: %v", res)
	}
	// An abort of an unknown or finished request answers aborted:false.
	w.abort("a2", "r1")
	if m := w.next(); m["kind"] != "aborted" || m["aborted"] != false {
		t.Fatalf("abort of a finished request: %v", m)
	}
	// A cancelled outcome is not remembered: the same key runs again.
	dispatchHook.Store(nil)
	if r := w.call("r2", "key-s", "fs.search", map[string]any{"path": ".", "query": "needle"}); r["ok"] != true {
		t.Fatalf("retry after abort: %v", r)
	}
}

func TestCapacityAndTimeout(t *testing.T) {
	entered := make(chan struct{}, 4)
	setHook(t, func(ctx context.Context, op string) {
		if op == "fs.search" {
			entered <- struct{}{}
			<-ctx.Done()
		}
	})
	f := newFixture(t)
	d := f.grant(grantOpts{limits: map[string]int64{"maxConcurrentRequests": 1, "maxQueuedRequests": 1, "requestTimeoutMs": 1000}})
	w := f.bind(d)
	w.invoke("r1", "k1", "fs.search", map[string]any{"path": ".", "query": "x"})
	<-entered
	w.invoke("r2", "k2", "fs.list", map[string]any{"path": "."}) // queued
	r3 := w.call("r3", "k3", "fs.list", map[string]any{"path": "."})
	if errorCode(r3) != CodeQueueCapacity || r3["error"].(map[string]any)["retryable"] != true {
		t.Fatalf("over capacity: %v", r3)
	}
	// r1 times out a second after admission; r2, queued behind it, expired too.
	got := map[string]string{}
	for range 2 {
		m := w.next()
		got[m["requestId"].(string)] = errorCode(m)
	}
	if got["r1"] != CodeRequestTimeout || (got["r2"] != CodeRequestTimeout && got["r2"] != "") {
		t.Fatalf("timeouts: %v", got)
	}
	// The slot is free again.
	if r := w.call("r4", "k4", "fs.list", map[string]any{"path": "."}); r["ok"] != true {
		t.Fatalf("after timeout: %v", r)
	}
}

// TestInlineTimeout: a stat, which the reader goroutine runs itself, still times out from its
// admission, and the clock, set for an earlier request that has ended since, reaches the
// deadline of a later one.
func TestInlineTimeout(t *testing.T) {
	var hold atomic.Bool // whether a stat runs until its context ends
	setHook(t, func(ctx context.Context, op string) {
		if op == "fs.stat" && hold.Load() {
			<-ctx.Done()
		}
	})
	f := newFixture(t)
	w := f.bind(f.grant(grantOpts{limits: map[string]int64{"requestTimeoutMs": 1000}}))
	// r1 runs at once and sets the clock for its own deadline.
	if r := w.call("r1", "k1", "fs.stat", map[string]any{"path": "."}); r["ok"] != true {
		t.Fatalf("stat: %v", r)
	}
	time.Sleep(400 * time.Millisecond)
	hold.Store(true)
	start := time.Now()
	r2 := w.call("r2", "k2", "fs.stat", map[string]any{"path": "."})
	if errorCode(r2) != CodeRequestTimeout || r2["error"].(map[string]any)["retryable"] != true {
		t.Fatalf("inline stat past its deadline: %v", r2)
	}
	// r2 timed out a second after its own admission, not when the clock set for r1 fired.
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("r2 timed out after %v, before its own deadline", waited)
	}
	hold.Store(false)
	if r := w.call("r3", "k3", "fs.stat", map[string]any{"path": "."}); r["ok"] != true {
		t.Fatalf("after the timeout: %v", r)
	}
}

func TestAbortQueued(t *testing.T) {
	entered := make(chan struct{}, 4)
	setHook(t, func(ctx context.Context, op string) {
		if op == "fs.search" {
			entered <- struct{}{}
			<-ctx.Done()
		}
	})
	f := newFixture(t)
	w := f.bind(f.grant(grantOpts{limits: map[string]int64{"maxConcurrentRequests": 1}}))
	w.invoke("r1", "k1", "fs.search", map[string]any{"path": ".", "query": "x"})
	<-entered
	w.invoke("r2", "k2", "fs.list", map[string]any{"path": "."})
	w.abort("a2", "r2")
	if m := w.next(); m["kind"] != "aborted" || m["aborted"] != true {
		t.Fatalf("abort of a queued request: %v", m)
	}
	if m := w.next(); m["requestId"] != "r2" || errorCode(m) != "canceled" {
		t.Fatalf("queued result: %v", m)
	}
	w.abort("a1", "r1")
	w.next()
	w.next()
}

func TestRevoke(t *testing.T) {
	f := newFixture(t)
	d := f.grant(grantOpts{})
	w := f.bind(d)
	// The daemon's revoke is answered and the connection closed; the grant stays.
	rv := map[string]any{"kind": "revoke"}
	for k, v := range w.id {
		rv[k] = v
	}
	w.send(rv)
	if m := w.next(); m["kind"] != "revoked" {
		t.Fatalf("revoke: %v", m)
	}
	w.expectSilentClose()
	// The operator's revoke-grant closes the connection and ends the grant.
	w = bindEventually(t, f, d)
	ids := grantIDs(t, f)
	if len(ids) != 1 {
		t.Fatalf("grants: %v", ids)
	}
	ok, data, _ := f.admin(`{"op":"revoke-grant","grantId":"` + ids[0] + `"}`)
	if !ok || !strings.Contains(string(data), `"wasConnected":true`) {
		t.Fatalf("revoke-grant: %s", data)
	}
	w.expectSilentClose()
	if ok, _, code := f.admin(`{"op":"revoke-grant","grantId":"` + ids[0] + `"}`); ok || code != CodeGrantNotFound {
		t.Fatalf("second revoke-grant: %s", code)
	}
	w = f.dial()
	w.send(bindFrame(d))
	w.expectSilentClose()
}

// bindEventually binds d once the previous connection of its grant has been released.
func bindEventually(t *testing.T, f *fixture, d map[string]any) *wire {
	deadline := time.Now().Add(lineTimeout)
	for {
		w := f.dial()
		w.send(bindFrame(d))
		w.nc.SetReadDeadline(time.Now().Add(lineTimeout))
		if line, err := w.br.ReadBytes('\n'); err == nil {
			var m map[string]any
			json.Unmarshal(line, &m)
			w.id = map[string]any{}
			for _, k := range []string{"protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"} {
				w.id[k] = m[k]
			}
			return w
		}
		if time.Now().After(deadline) {
			t.Fatal("grant never became bindable again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAdminRequests(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ line, code string }{
		{`{"op":"grant"}`, CodeInvalidRequest},
		{`{"op":"nope"}`, CodeInvalidRequest},
		{`{"op":"grants","grantId":"x"}`, CodeInvalidRequest},
		{`{"op":"grants","Op":"grants"}`, CodeInvalidRequest},
		{`not json`, CodeInvalidRequest},
		{`{"op":"grant","root":"rel","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"]}`, CodeInvalidRequest},
		{`{"op":"grant","root":"` + f.root + `/missing","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"]}`, CodeRootInvalid},
		{`{"op":"grant","root":"` + f.root + `","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read","fs.read"]}`, "unsupported_tool_operation"},
		{`{"op":"grant","root":"` + f.root + `","hostInstanceId":"h","sessionId":"s","generation":-1,"operations":["fs.read"]}`, "invalid_tool_adapter_binding"},
		{`{"op":"grant","root":"` + f.root + `","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"],"limits":{"requestTimeoutMs":5}}`, "invalid_tool_adapter_limit"},
		{`{"op":"grant","root":"` + f.root + `","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"],"adapterId":"-bad"}`, "invalid_tool_adapter_identity"},
	} {
		if ok, _, code := f.admin(tc.line); ok || code != tc.code {
			t.Errorf("%s: ok=%v code=%s, want %s", tc.line, ok, code, tc.code)
		}
	}
	d := f.grant(grantOpts{ops: []string{"fs.read"}, limits: map[string]int64{"maxQueuedRequests": 0}})
	if d["endpoint"].(map[string]any)["path"] != f.s.cfg.Socket {
		t.Fatalf("endpoint: %v", d["endpoint"])
	}
	l := d["limits"].(map[string]any)
	if l["maxQueuedRequests"] != 0.0 || l["maxConcurrentRequests"] != 4.0 || l["idempotencyTtlMs"] != 3600000.0 {
		t.Fatalf("limits with defaults: %v", l)
	}
	if h := f.handle; len(h) != 43 {
		t.Fatalf("handle of %d characters", len(h))
	}
	ok, data, _ := f.admin(`{"op":"grants"}`)
	if !ok || strings.Contains(string(data), f.handle) || !strings.Contains(string(data), f.root) {
		t.Fatalf("grants: %s", data)
	}
	if strings.Contains(f.logs.String(), f.handle) {
		t.Fatal("the handle reached the log")
	}
	// A caller may name its grant, to revoke exactly it even without the answer; a name
	// that is live already, or not a plain token, is refused.
	named := `{"op":"grant","root":"` + f.root + `","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"],"grantId":"d-1"}`
	if ok, _, code := f.admin(named); !ok {
		t.Fatalf("named grant: %s", code)
	}
	if !slices.Contains(grantIDs(t, f), "d-1") {
		t.Fatalf("grants: %v", grantIDs(t, f))
	}
	if ok, _, code := f.admin(named); ok || code != CodeGrantExists {
		t.Fatalf("named grant again: ok=%v code=%s, want %s", ok, code, CodeGrantExists)
	}
	if ok, _, code := f.admin(strings.Replace(named, `"d-1"`, `"d 1"`, 1)); ok || code != CodeInvalidRequest {
		t.Fatalf("grant named with a space: ok=%v code=%s", ok, code)
	}
	if ok, _, code := f.admin(`{"op":"revoke-grant","grantId":"d-1"}`); !ok {
		t.Fatalf("revoke the named grant: %s", code)
	}
	if ok, _, code := f.admin(named); !ok {
		t.Fatalf("a revoked name is free again: %s", code)
	}
}

// TestAdminRefusalHasNoData: a refused admin request is answered {"ok":false,"error":…}, as
// docs/airlock-fs.md says; a refused grant or revoke-grant also carried "data":null.
func TestAdminRefusalHasNoData(t *testing.T) {
	f := newFixture(t)
	for _, line := range []string{
		`{"op":"revoke-grant","grantId":"g-none"}`,
		`{"op":"grant","root":"` + f.root + `/missing","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"]}`,
		`{"op":"nope"}`,
	} {
		b := f.adminRaw(line)
		var resp map[string]json.RawMessage
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatalf("%s: %s: %v", line, b, err)
		}
		if _, ok := resp["data"]; ok || string(resp["ok"]) != "false" || resp["error"] == nil {
			t.Errorf("%s: answered %s", line, b)
		}
	}
}

// TestAdminGrantWithoutOperations: a grant of no operations is refused for what it is; it was
// refused "descriptor member has the wrong type", the empty list having become null.
func TestAdminGrantWithoutOperations(t *testing.T) {
	f := newFixture(t)
	b := f.adminRaw(`{"op":"grant","root":"` + f.root + `","hostInstanceId":"h","sessionId":"s","generation":1,"operations":[]}`)
	var resp AdminResponse
	if err := json.Unmarshal(b, &resp); err != nil || resp.Error == nil {
		t.Fatalf("answered %s (%v)", b, err)
	}
	if resp.Error.Code != "unsupported_tool_operation" || !strings.Contains(resp.Error.Message, "1 to 6") {
		t.Fatalf("answered %s", b)
	}
}

func TestSockets(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{f.s.cfg.Socket, f.s.cfg.AdminSocket} {
		st, err := os.Lstat(p)
		if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", p, st.Mode(), err)
		}
	}
	if st, _ := os.Stat(filepath.Dir(f.s.cfg.Socket)); st.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory mode %v", st.Mode())
	}
	// A live socket is refused.
	if _, err := Start(Config{Socket: f.s.cfg.Socket, AdminSocket: filepath.Join(f.dir, "run", "admin2.sock")}); !errors.Is(err, ownersock.ErrActive) {
		t.Fatalf("second server: %v", err)
	}
	// A path over 100 bytes is refused.
	long := "/tmp/" + strings.Repeat("x", 100) + ".sock"
	if _, err := Start(Config{Socket: long, AdminSocket: filepath.Join(f.dir, "a3.sock")}); err == nil {
		t.Fatal("long socket path accepted")
	}
	// A group-writable directory is refused.
	bad := filepath.Join(f.dir, "bad")
	os.Mkdir(bad, 0o770)
	os.Chmod(bad, 0o770)
	if _, err := Start(Config{Socket: filepath.Join(bad, "fs.sock"), AdminSocket: filepath.Join(bad, "a.sock")}); err == nil {
		t.Fatal("group-writable socket directory accepted")
	}
	// After Close the sockets are gone, and a stale socket file is replaced on the next start.
	f.s.Close()
	if _, err := os.Lstat(f.s.cfg.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: f.s.cfg.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	s2, err := Start(Config{Socket: f.s.cfg.Socket, AdminSocket: f.s.cfg.AdminSocket})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
}

func TestAdapterVersion(t *testing.T) {
	for in, want := range map[string]string{"dev": "0.1.0", "v1.2.3": "1.2.3", "1.0.0-rc.1": "1.0.0-rc.1", "v1.2": "0.1.0", "": "0.1.0"} {
		if got := AdapterVersion(in); got != want {
			t.Errorf("AdapterVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestByteBounds(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.root, "big.txt"), []byte(strings.Repeat("abcdefgh", 512)), 0o600)
	d := f.grant(grantOpts{limits: map[string]int64{"maxRequestBytes": 2048, "maxResponseBytes": 1024}})
	w := f.bind(d)
	// A result that cannot fit maxResponseBytes is cut (fs.read reports how much it returned)
	// or refused as too_large; the frame itself always fits.
	w.invoke("r1", "k1", "fs.read", map[string]any{"path": "big.txt", "maxBytes": 4096})
	w.nc.SetReadDeadline(time.Now().Add(lineTimeout))
	line, err := w.br.ReadBytes('\n')
	if err != nil || len(line) > 1024 {
		t.Fatalf("result of %d bytes: %v", len(line), err)
	}
	var r map[string]any
	json.Unmarshal(line, &r)
	if r["ok"] == true {
		if n := r["data"].(map[string]any)["bytesRead"].(float64); n >= 4096 || r["data"].(map[string]any)["eof"] != false {
			t.Fatalf("uncut read: %v", r)
		}
	} else if errorCode(r) != "too_large" {
		t.Fatalf("read over the response bound: %v", r)
	}
	// A request line over maxRequestBytes ends the connection.
	w.invoke("r2", "k2", "fs.write", map[string]any{"path": "x.txt", "content": strings.Repeat("x", 3000)})
	w.expectSilentClose()
	if _, err := os.Stat(filepath.Join(f.root, "x.txt")); !os.IsNotExist(err) {
		t.Fatal("an oversized request was executed")
	}
}

func TestHandleNeverInAResult(t *testing.T) {
	f := newFixture(t)
	d := f.grant(grantOpts{})
	w := f.bind(d)
	os.WriteFile(filepath.Join(f.root, "leak.txt"), []byte("before "+f.handle+" after\n"), 0o600)
	for i, tc := range []struct {
		op      string
		payload map[string]any
	}{
		{"fs.read", map[string]any{"path": "leak.txt"}},
		{"fs.search", map[string]any{"path": ".", "query": "before"}},
	} {
		r := w.call(fmt.Sprint("r", i), fmt.Sprint("k", i), tc.op, tc.payload)
		if errorCode(r) != CodeHandleInResult {
			t.Fatalf("%s of a file holding the handle: %v", tc.op, r)
		}
	}
	// A read that stops before the handle is fine.
	if r := w.call("r9", "k9", "fs.read", map[string]any{"path": "leak.txt", "maxBytes": 6}); r["ok"] != true {
		t.Fatalf("short read: %v", r)
	}
}

func TestIdempotencyBounds(t *testing.T) {
	f := newFixture(t)
	w := f.bind(f.grant(grantOpts{limits: map[string]int64{"maxIdempotencyKeys": 1, "idempotencyTtlMs": 1000}}))
	write := func(id, key string) string {
		return errorCode(w.call(id, key, "fs.write", map[string]any{"path": "e.txt", "content": "x"}))
	}
	if c := write("r1", "A"); c != "" {
		t.Fatalf("first write: %s", c)
	}
	if c := write("r2", "A"); c != "" {
		t.Fatalf("replay: %s", c)
	}
	// A second key evicts the first (the memory holds one): A runs again and finds the file.
	if c := write("r3", "B"); c != "file_exists" {
		t.Fatalf("B: %s", c)
	}
	if c := write("r4", "A"); c != "file_exists" {
		t.Fatalf("A after eviction: %s", c)
	}
	// A key is remembered for idempotencyTtlMs after its outcome.
	os.Remove(filepath.Join(f.root, "e.txt"))
	if c := write("r5", "A"); c != "file_exists" {
		t.Fatalf("A within its TTL: %s", c)
	}
	time.Sleep(1100 * time.Millisecond)
	if c := write("r6", "A"); c != "" {
		t.Fatalf("A after its TTL: %s", c)
	}

	// A memory full of running keys refuses a new one.
	entered := make(chan struct{}, 1)
	setHook(t, func(ctx context.Context, op string) {
		if op == "fs.search" {
			entered <- struct{}{}
			<-ctx.Done()
		}
	})
	w.invoke("r7", "C", "fs.search", map[string]any{"path": ".", "query": "x"})
	<-entered
	if c := errorCode(w.call("r8", "D", "fs.list", map[string]any{"path": "."})); c != CodeIdempotencyCapacity {
		t.Fatalf("full of running keys: %s", c)
	}
	w.abort("a7", "r7")
	w.next()
	w.next()
}

// TestLargeReadsShareBuffers: reads whose frames are built in pooled buffers return their own
// content, one after another and side by side, and a large read is not remembered: a replay
// with its key reads the file again. The files are just over pooledFrameBytes, each one byte
// shorter than the last, so that every frame is pooled and shares its buffer's size class
// with the others (3 MiB files took 16 s of CI's loaded machine under -race, decoding).
func TestLargeReadsShareBuffers(t *testing.T) {
	f := newFixture(t)
	const size = pooledFrameBytes + 64<<10
	for i, c := range "abcd" {
		os.WriteFile(filepath.Join(f.root, string(c)+".txt"), []byte(strings.Repeat(string(c), size-i)), 0o600)
	}
	w := f.bind(f.grant(grantOpts{limits: map[string]int64{"maxResponseBytes": 4 << 20, "maxRequestBytes": 64 << 10}}))
	read := func(id, key, name string) string {
		t.Helper()
		r := w.call(id, key, "fs.read", map[string]any{"path": name, "maxBytes": 4 << 20})
		if r["ok"] != true {
			t.Fatalf("read %s: %v", name, errorCode(r))
		}
		return r["data"].(map[string]any)["content"].(string)
	}
	for round := range 3 {
		for i, c := range "abcd" {
			name := string(c) + ".txt"
			if got := read(fmt.Sprintf("r%d%c", round, c), fmt.Sprintf("k%d%c", round, c), name); got != strings.Repeat(string(c), size-i) {
				t.Fatalf("round %d: %s returned %d bytes of other content", round, name, len(got))
			}
		}
	}
	// Side by side: the answers may arrive in any order; each must carry its own file.
	for _, c := range "abcd" {
		w.invoke(fmt.Sprintf("p%c", c), fmt.Sprintf("kp%c", c), "fs.read", map[string]any{"path": string(c) + ".txt", "maxBytes": 4 << 20})
	}
	for range 4 {
		m := w.next()
		id := m["requestId"].(string)
		c := id[1:]
		i := strings.Index("abcd", c)
		if m["ok"] != true || m["data"].(map[string]any)["content"].(string) != strings.Repeat(c, size-i) {
			t.Fatalf("%s: wrong answer", id)
		}
	}
	// Not remembered: the same key reads the changed file.
	os.WriteFile(filepath.Join(f.root, "a.txt"), []byte(strings.Repeat("z", size)), 0o600)
	if got := read("again", "k0a", "a.txt"); got != strings.Repeat("z", size) {
		t.Fatal("a large read was replayed from memory")
	}
}

// TestIdempotencyPerSessionGeneration: the grants of one session generation on one root share
// the idempotency memory, whatever host instance they were minted for, so a key answered under
// one grant is replayed under the next (a daemon restart and reprovisioning), even after every
// grant of the scope was revoked; another session's grant on the same root has its own memory;
// and a key still running under one grant is refused, retryable, under another.
func TestIdempotencyPerSessionGeneration(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var blocking atomic.Bool
	setHook(t, func(ctx context.Context, op string) {
		if !blocking.Load() {
			return
		}
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	f := newFixture(t)
	write := map[string]any{"path": "w.txt", "content": "once"}
	a := f.bind(f.grant(grantOpts{host: "host-1"}))
	first := a.call("r1", "key-w", "fs.write", write)
	if first["ok"] != true {
		t.Fatalf("first write: %v", first)
	}
	st1, _ := os.Stat(filepath.Join(f.root, "w.txt"))

	b := f.bind(f.grant(grantOpts{host: "host-2"}))
	if r := b.call("r2", "key-w", "fs.write", write); r["ok"] != true || !reflect.DeepEqual(r["data"], first["data"]) {
		t.Fatalf("replay under the host's next grant: %v, first %v", r, first)
	}
	if st2, _ := os.Stat(filepath.Join(f.root, "w.txt")); !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatal("the replay wrote again")
	}
	if c := errorCode(f.bind(f.grant(grantOpts{session: "s2"})).call("r3", "key-w", "fs.write", write)); c != "file_exists" {
		t.Fatalf("another session's key ran as %q, want file_exists", c)
	}

	blocking.Store(true)
	a.invoke("r4", "key-slow", "fs.write", map[string]any{"path": "slow.txt", "content": "x"})
	<-entered
	if r := b.call("r5", "key-slow", "fs.write", map[string]any{"path": "slow.txt", "content": "x"}); errorCode(r) != CodeIdempotencyInFlight ||
		r["error"].(map[string]any)["retryable"] != true {
		t.Fatalf("a key running under another grant: %v", r)
	}
	close(release)
	if r := a.next(); r["requestId"] != "r4" || r["ok"] != true {
		t.Fatalf("r4: %v", r)
	}
	blocking.Store(false)

	for _, id := range grantIDs(t, f) {
		if ok, _, code := f.admin(`{"op":"revoke-grant","grantId":"` + id + `"}`); !ok {
			t.Fatalf("revoke %s: %s", id, code)
		}
	}
	c := f.bind(f.grant(grantOpts{host: "host-3"}))
	if r := c.call("r6", "key-w", "fs.write", write); r["ok"] != true || !reflect.DeepEqual(r["data"], first["data"]) {
		t.Fatalf("replay after every grant of the scope was revoked: %v", r)
	}
}
