package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/mcp"
)

// rawServer is a Bridge serving one MCP session on in-process pipes, spoken to line by line.
type rawServer struct {
	b     *mcp.Bridge
	in    io.WriteCloser
	lines chan string
	done  chan error
}

// startRaw serves cfg's session on pipes: through ServeStdio (the fast path) when fast, else
// through the SDK alone on StdioTransport.
func startRaw(t *testing.T, e *env, cfg mcp.Config, fast bool) *rawServer {
	t.Helper()
	cfg.Socket = e.d.Socket
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := mcp.New(ctx, cfg)
	if err != nil {
		t.Fatalf("mcp.New: %v", err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &rawServer{b: b, in: inW, lines: make(chan string, 64), done: make(chan error, 1)}
	go func() {
		var err error
		if fast {
			err = b.ServeStdio(context.Background(), inR, outW, mcp.MaxMessageBytes, 0)
		} else {
			err = b.Serve(context.Background(), mcp.StdioTransport(inR, outW, mcp.MaxMessageBytes, 0))
		}
		outW.Close()
		s.done <- err
	}()
	go func() {
		defer close(s.lines)
		br := bufio.NewReader(outR)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				s.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		s.in.Close()
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			t.Error("the server did not end after stdin closed")
		}
		outR.Close()
		b.Close()
	})
	return s
}

// exchange sends one line and returns the one response it gets, decoded.
func (s *rawServer) exchange(t *testing.T, line string) any {
	t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	select {
	case out, ok := <-s.lines:
		if !ok {
			t.Fatalf("the session ended after %s", line)
		}
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("response %q: %v", out, err)
		}
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no response to %s", line)
	}
	return nil
}

// fastCase is one request, and whether the fast path takes it.
type fastCase struct {
	name string
	line string
	fast bool
}

// TestFastPathAnswersAsTheSDK sends the same requests, one at a time, to a bridge served by
// ServeStdio and to one served by the SDK alone, in a session of each revision (begun with
// initialize at 2025-11-25, and the stateless 2026-07-28): every response is the same JSON
// value, and the fast path took exactly the calls it may answer, fs_read, fs_stat, fs_list,
// fs_write and fs_edit of a session the SDK has begun, with no idempotency key, a plain id and object arguments
// (results, error results of the daemon and the adapter, a read cut back to a rune boundary,
// escapes in the text) and left every other one to the SDK. Without the fast path the count
// stays at zero.
func TestFastPathAnswersAsTheSDK(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	content := "line <one> & \"two\"\ttab é \u2028 end\n"
	for name, data := range map[string]string{"t.txt": content, "d/a.txt": "a", "d/b.txt": "bb", "d/c/x": ""} {
		p := filepath.Join(e.root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.stat,fs.list,fs.write,fs.edit"))
	cfg := mcp.Config{SessionID: "agent", Generation: 1}

	call := func(id, name, args string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, name, args)
	}
	withMeta := func(id, name, args, meta string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"_meta":%s,"name":%q,"arguments":%s}}`, id, meta, name, args)
	}
	calls := func(meta string) []fastCase {
		c := func(id, name, args string) string {
			if meta == "" {
				return call(id, name, args)
			}
			return withMeta(id, name, args, meta)
		}
		return []fastCase{
			{"stat", c("10", "fs_stat", `{"path":"t.txt"}`), true},
			{"read", c("11", "fs_read", `{"path":"t.txt"}`), true},
			{"read with a string id", c(`"r-12"`, "fs_read", `{"path":"t.txt"}`), true},
			{"read cut back to a rune boundary", c("13", "fs_read", `{"path":"t.txt","maxBytes":24}`), true},
			{"list", c("14", "fs_list", `{"path":"d"}`), true},
			{"list of the root, arguments spaced", c("15", "fs_list", `{ "path" : "." , "maxEntries" : 2 }`), true},
			{"a missing file: the adapter's error", c("16", "fs_stat", `{"path":"nope.txt"}`), true},
			{"a traversal: the daemon's error", c("17", "fs_read", `{"path":"../x"}`), true},
			{"an argument of the wrong type", c("18", "fs_read", `{"path":"t.txt","maxBytes":"x"}`), true},
			{"no arguments", strings.Replace(c("19", "fs_stat", `{}`), `,"arguments":{}`, "", 1), true},
			{"a negative id", c("-20", "fs_stat", `{"path":"t.txt"}`), true},
			{"a write refused: the file exists", c("30", "fs_write", `{"path":"t.txt","content":"x","create":true}`), true},
			{"a write that replaces a file with its own content", c("24", "fs_write", `{"path":"d/a.txt","content":"a","overwrite":true}`), true},
			{"an edit that puts back what it replaces", c("25", "fs_edit", `{"path":"d/b.txt","edits":[{"oldText":"bb","newText":"bb"}]}`), true},
			{"an edit not found", c("26", "fs_edit", `{"path":"d/b.txt","edits":[{"oldText":"zz","newText":"y"}]}`), true},
			{"a tool not granted", c("31", "fs_search", `{"path":".","query":"x"}`), false},
			{"arguments null", c("32", "fs_stat", `null`), false},
			{"arguments not an object", c("33", "fs_stat", `["t.txt"]`), false},
			{"a fractional id", c("34.0", "fs_stat", `{"path":"t.txt"}`), false},
			{"an id with an escape", c(`"r\u002d35"`, "fs_stat", `{"path":"t.txt"}`), false},
			{"a member the fast path does not know", strings.Replace(c("36", "fs_stat", `{"path":"t.txt"}`), `"method"`, `"x":1,"method"`, 1), false},
			{"a repeated member", strings.Replace(c("37", "fs_stat", `{"path":"t.txt"}`), `"name"`, `"name":"fs_read","name"`, 1), false},
			{"arguments with a repeated key", c("38", "fs_stat", `{"path":"t.txt","path":"d"}`), false},
		}
	}

	legacyMeta := `{"progressToken":"p1"}`
	idemMeta := `{"io.airlock/idempotencyKey":"k-1"}`
	meta := `{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	meta2 := strings.Replace(meta, `"raw"`, `"raw2"`, 1)
	tooNew := strings.Replace(meta, "2026-07-28", "2099-01-01", 1)

	revisions := []struct {
		name  string
		cases []fastCase
	}{
		{"2025-11-25", append(append([]fastCase{
			{"a call before initialize", call("1", "fs_stat", `{"path":"t.txt"}`), false},
			{"initialize", `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, false},
		}, calls("")...),
			fastCase{"a progress token", withMeta("40", "fs_read", `{"path":"t.txt"}`, legacyMeta), true},
			fastCase{"an idempotency key", withMeta("41", "fs_read", `{"path":"t.txt"}`, idemMeta), false},
			fastCase{"a stateless call in a begun session, _meta new", withMeta("42", "fs_stat", `{"path":"t.txt"}`, meta), false},
			fastCase{"the same _meta again", withMeta("43", "fs_stat", `{"path":"t.txt"}`, meta), true},
		)},
		{"2026-07-28", append(append([]fastCase{
			{"server/discover", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":%s}}`, meta), false},
			// A discover is a probe that begins no session (the client may initialize
			// next): the first call is the SDK's, which begins it.
			{"the first call", withMeta("9", "fs_stat", `{"path":"t.txt"}`, meta), false},
		}, calls(meta)...),
			fastCase{"a _meta of another client, first", withMeta("50", "fs_stat", `{"path":"t.txt"}`, meta2), false},
			fastCase{"that _meta again", withMeta("51", "fs_stat", `{"path":"t.txt"}`, meta2), true},
			fastCase{"a revision the SDK refuses", withMeta("52", "fs_stat", `{"path":"t.txt"}`, tooNew), false},
			fastCase{"and again", withMeta("53", "fs_stat", `{"path":"t.txt"}`, tooNew), false},
			fastCase{"no _meta in a stateless session", call("54", "fs_stat", `{"path":"t.txt"}`), false},
		)},
	}
	for _, rev := range revisions {
		t.Run(rev.name, func(t *testing.T) {
			fast, sdkOnly := startRaw(t, e, cfg, true), startRaw(t, e, cfg, false)
			for _, c := range rev.cases {
				before := mcp.FastCalls(fast.b)
				got, want := fast.exchange(t, c.line), sdkOnly.exchange(t, c.line)
				if !reflect.DeepEqual(got, want) {
					g, _ := json.Marshal(got)
					w, _ := json.Marshal(want)
					t.Errorf("%s: the fast path answered\n%s\nthe SDK\n%s", c.name, g, w)
				}
				if took := mcp.FastCalls(fast.b) - before; took != map[bool]int64{true: 1}[c.fast] {
					t.Errorf("%s: the fast path took %d calls, want fast=%v", c.name, took, c.fast)
				}
			}
			if n := mcp.FastCalls(sdkOnly.b); n != 0 {
				t.Fatalf("the bridge served by StdioTransport took %d calls on a fast path", n)
			}
		})
	}
}

// startScriptedFast serves session agent over a scripted adapter granting op through a
// bridge with the fast path, begins the MCP session (initialize, 2025-11-25), and returns the
// environment, the adapter, the bridge and a function that writes one line to its stdin.
func startScriptedFast(t *testing.T, op string) (*env, *scripted, *rawServer, func(string)) {
	t.Helper()
	e := startEnv(t)
	a := startScripted(t)
	e.open(t, "agent", e.root, scriptedDescriptor(a.socket, e.host, "agent", op))
	s := startRaw(t, e, mcp.Config{SessionID: "agent", Generation: 1}, true)
	s.exchange(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	return e, a, s, func(line string) {
		t.Helper()
		if _, err := io.WriteString(s.in, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFastPathCancelAbortsTheAdapterCall: a read the fast path runs is aborted in the
// adapter when the client cancels it (notifications/cancelled) and gets no response, as
// through the SDK; a read still running when stdin closes is answered before the session
// ends, with its own outcome.
func TestFastPathCancelAbortsTheAdapterCall(t *testing.T) {
	e, a, s, write := startScriptedFast(t, "fs.read")
	if err := os.WriteFile(filepath.Join(e.root, "a.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err) // the daemon walks the path before it sends the call
	}
	write(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs_read","arguments":{"path":"a.txt"}}}`)
	waitFor(t, "the invoke", func() bool { return len(a.framesOf("invoke")) == 1 })
	if n := mcp.FastCalls(s.b); n != 1 {
		t.Fatalf("the fast path took %d calls, want the read", n)
	}
	write(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	waitFor(t, "the abort", func() bool { return len(a.framesOf("abort")) == 1 })
	if inv, ab := a.framesOf("invoke")[0], a.framesOf("abort")[0]; ab["targetRequestId"] != inv["requestId"] {
		t.Fatalf("abort targets %v, the invoke was %v", ab["targetRequestId"], inv["requestId"])
	}

	write(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fs_read","arguments":{"path":"a.txt"}}}`)
	waitFor(t, "the second invoke", func() bool { return len(a.framesOf("invoke")) == 2 })
	s.in.Close()
	a.unblock()
	var ids []any
	for line := range s.lines {
		var r struct {
			ID     any             `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		if r.ID == float64(3) && !strings.Contains(string(r.Result), `"content":"x"`) {
			t.Fatalf("the read answered %s", r.Result)
		}
		ids = append(ids, r.ID)
	}
	if !reflect.DeepEqual(ids, []any{float64(3)}) {
		t.Fatalf("responses after the cancel to ids %v, want only 3's", ids)
	}
	if err := <-s.done; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	s.done <- nil // for the cleanup
}

// TestFastPathKeysWritesAsTheSDK: a write the fast path runs is keyed as the SDK's handler
// keys it (TestCancelAbortsTheAdapterCall): cancelled, it is aborted in the adapter and its key
// stays open, so that its retry (the same arguments in another member order), which the SDK
// takes (its id has an escape), carries the same idempotency key; once that retry's outcome
// is definite, the same write again, on the fast path, is a new call with a new key.
func TestFastPathKeysWritesAsTheSDK(t *testing.T) {
	_, a, s, write := startScriptedFast(t, "fs.write")
	write(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fs_write","arguments":{"path":"f.txt","content":"x","create":true}}}`)
	waitFor(t, "the invoke", func() bool { return len(a.framesOf("invoke")) == 1 })
	write(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	waitFor(t, "the abort", func() bool { return len(a.framesOf("abort")) == 1 })
	inv := a.framesOf("invoke")[0]
	if ab := a.framesOf("abort")[0]; ab["targetRequestId"] != inv["requestId"] {
		t.Fatalf("abort targets %v, the invoke was %v", ab["targetRequestId"], inv["requestId"])
	}

	write(`{"jsonrpc":"2.0","id":"\u0033","method":"tools/call","params":{"name":"fs_write","arguments":{"create":true,"content":"x","path":"f.txt"}}}`)
	waitFor(t, "the retried invoke", func() bool { return len(a.framesOf("invoke")) == 2 })
	if k := a.framesOf("invoke")[1]["idempotencyKey"]; k != inv["idempotencyKey"] {
		t.Fatalf("the retry's key %v differs from the first call's %v", k, inv["idempotencyKey"])
	}
	a.unblock()
	if line := <-s.lines; !strings.Contains(line, `"id":"3"`) || strings.Contains(line, `"isError":true`) {
		t.Fatalf("the retry answered %s", line)
	}

	write(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fs_write","arguments":{"path":"f.txt","content":"x","create":true}}}`)
	if line := <-s.lines; !strings.Contains(line, `"id":4`) || strings.Contains(line, `"isError":true`) {
		t.Fatalf("the repeated write answered %s", line)
	}
	if inv := a.framesOf("invoke"); len(inv) != 3 || inv[2]["idempotencyKey"] == inv[0]["idempotencyKey"] {
		t.Fatalf("a repeated write after a definite outcome reused the key: %v", inv)
	}
	if n := mcp.FastCalls(s.b); n != 2 {
		t.Fatalf("the fast path took %d calls, want the first write and the last", n)
	}
}

// TestFastPathTakesLinesAsTheyCome: lines that reach stdin many at once (calls in flight
// together) or a line in pieces are each seen whole, so the fast path takes every call among
// them, whatever the SDK's reads cut (its decoder reads 512 bytes and more at a time): each is
// answered once, with its own result.
func TestFastPathTakesLinesAsTheyCome(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	if err := os.WriteFile(filepath.Join(e.root, "t.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.stat"))
	s := startRaw(t, e, mcp.Config{SessionID: "agent", Generation: 1}, true)
	s.exchange(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)

	const n = 40
	var batch strings.Builder
	for i := range n {
		fmt.Fprintf(&batch, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"fs_read","arguments":{"path":"t.txt"}}}`+"\n", 100+i)
	}
	split := `{"jsonrpc":"2.0","id":200,"method":"tools/call","params":{"name":"fs_stat","arguments":{"path":"t.txt"}}}` + "\n"
	for _, part := range []string{batch.String() + split[:30], split[30:70], split[70:]} {
		if _, err := io.WriteString(s.in, part); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[float64]bool{}
	for range n + 1 {
		select {
		case line := <-s.lines:
			var r struct {
				ID     float64         `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil || seen[r.ID] {
				t.Fatalf("response %q: %v (seen before: %v)", line, err, seen[r.ID])
			}
			seen[r.ID] = true
			want := `"content":"hello\n"`
			if r.ID == 200 {
				want = `"size":6`
			}
			if !strings.Contains(string(r.Result), want) {
				t.Fatalf("id %v answered %s", r.ID, r.Result)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d responses of %d", len(seen), n+1)
		}
	}
	if got := mcp.FastCalls(s.b); got != n+1 {
		t.Fatalf("the fast path took %d of the %d calls", got, n+1)
	}
}
