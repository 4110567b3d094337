package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/hint"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/protocol"
)

// checkOutput validates a result's structuredContent against the tool's outputSchema.
func checkOutput(t *testing.T, tool *sdk.Tool, r *sdk.CallToolResult) {
	t.Helper()
	sb, _ := json.Marshal(tool.OutputSchema)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(sb)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AddResource("out.json", doc)
	sch, err := c.Compile("out.json")
	if err != nil {
		t.Fatalf("%s: output schema: %v", tool.Name, err)
	}
	vb, _ := json.Marshal(r.StructuredContent)
	v, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(vb)))
	if err := sch.Validate(v); err != nil {
		t.Fatalf("%s: structuredContent %s does not match its outputSchema: %v", tool.Name, vb, err)
	}
}

// TestToolsAreTheGrant lists and calls every tool of a session granted five of the six fs
// operations by a real airlock-fs, and the go-lamp example's capability: the list is exactly
// the grant (with the composed tools its operations make, and not fs_edit_preview, which
// needs fs.edit), every tool works and its result matches its output schema, and the operation
// that was not granted is neither listed nor callable by name.
func TestToolsAreTheGrant(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello from the grant root\n"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.list,fs.stat,fs.read,fs.search,fs.write"))
	e.registerLamp(t)
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}})

	tools := cn.tools(t)
	var names []string
	for n := range tools {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"desk_lamp_observe", "desk_lamp_set_brightness", "desk_lamp_set_power",
		"fs_find", "fs_head", "fs_list", "fs_list_sorted", "fs_read", "fs_read_many", "fs_search", "fs_stat", "fs_tail", "fs_tree", "fs_write"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools/list = %v, want %v", names, want)
	}
	if _, err := cn.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fs_edit", Arguments: map[string]any{"path": "notes.txt"}}); err == nil {
		t.Fatal("an ungranted operation was callable by name")
	}
	// The daemon refuses it too, whoever asks.
	r := call(t, e.c, client.Command{Operation: "invokeTool", SessionID: "agent", Generation: gen(1),
		Payload: map[string]any{"toolCallId": "x", "operation": "fs.edit", "arguments": map[string]any{"path": "notes.txt", "edits": []any{}}}})
	if r.OK || r.Error.Code != "adapter_operation_denied" {
		t.Fatalf("daemon: fs.edit on a session without it: %+v", r.Error)
	}

	ok := func(name string, args any) *sdk.CallToolResult {
		t.Helper()
		r := cn.call(t, name, args)
		if r.IsError {
			t.Fatalf("%s: %s", name, text(r))
		}
		checkOutput(t, tools[name], r)
		return r
	}
	if r := ok("fs_read", map[string]any{"path": "notes.txt"}); text(r) != "hello from the grant root\n" || structured(t, r)["eof"] != true {
		t.Fatalf("fs_read: %q %v", text(r), r.StructuredContent)
	}
	if s := structured(t, ok("fs_stat", map[string]any{"path": "notes.txt"})); s["type"] != "file" || s["size"] != 26.0 {
		t.Fatalf("fs_stat: %v", s)
	}
	if s := structured(t, ok("fs_write", map[string]any{"path": "new.txt", "content": "made by mcp\n", "create": true})); s["created"] != true {
		t.Fatalf("fs_write: %v", s)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "new.txt")); string(b) != "made by mcp\n" {
		t.Fatalf("new.txt holds %q", b)
	}
	lr := ok("fs_list", map[string]any{"path": "."})
	l := structured(t, lr)
	if len(l["entries"].([]any)) != 2 {
		t.Fatalf("fs_list: %v", l)
	}
	// The text rendering is a line per entry, from the same values, the time to the second.
	var lines strings.Builder
	for _, v := range l["entries"].([]any) {
		en := v.(map[string]any)
		at, err := time.Parse(time.RFC3339Nano, en["modifiedAt"].(string))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&lines, "%s %d %s %s\n", en["type"], int64(en["size"].(float64)), at.Truncate(time.Second).Format(time.RFC3339), en["name"])
	}
	if text(lr) != lines.String() {
		t.Fatalf("fs_list text %q, want %q", text(lr), lines.String())
	}
	params := &sdk.CallToolParams{Name: "fs_search", Arguments: map[string]any{"path": ".", "query": "grant"}}
	params.SetProgressToken("search-1")
	sr, err := cn.cs.CallTool(context.Background(), params)
	if err != nil || sr.IsError {
		t.Fatalf("fs_search: %v %v", err, sr)
	}
	checkOutput(t, tools["fs_search"], sr)
	if m := structured(t, sr)["matches"].([]any); len(m) != 1 {
		t.Fatalf("fs_search: %v", m)
	}
	if got := text(sr); !strings.HasPrefix(got, "notes.txt:1:") || !strings.HasSuffix(got, "grant root\n") {
		t.Fatalf("fs_search text %q", got)
	}
	waitFor(t, "two progress notifications", func() bool {
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return len(cn.prog) == 2
	})
	cn.mu.Lock()
	if p := cn.prog; p[0].ProgressToken != "search-1" || p[0].Progress != 0 || p[1].Progress != 1 || p[1].Message != "1 matches" {
		t.Fatalf("progress: %+v %+v", p[0], p[1])
	}
	cn.mu.Unlock()

	if s := structured(t, ok("desk_lamp_set_power", map[string]any{"on": true})); s["on"] != true {
		t.Fatalf("set_power: %v", s)
	}
	ok("desk_lamp_set_brightness", map[string]any{"level": 30})
	if s := structured(t, ok("desk_lamp_observe", nil)); s["on"] != true || s["brightness"] != 30.0 {
		t.Fatalf("observe: %v", s)
	}
	// Arguments the action does not declare are the adapter runtime's invalid_args, as a
	// tool result; arguments that are not an object are a protocol error.
	if c := errorCode(t, cn.call(t, "desk_lamp_set_power", map[string]any{"on": "yes"})); c != "invalid_args" {
		t.Fatalf("set_power with a string: %s", c)
	}
	if _, err := cn.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fs_stat", Arguments: []int{1}}); err == nil {
		t.Fatal("array arguments were not a protocol error")
	}
	if c := errorCode(t, cn.call(t, "fs_stat", map[string]any{"path": "missing.txt"})); c == "" {
		t.Fatal("stat of a missing file succeeded")
	}
}

// TestTraversalRefusedByBothLayers sends escapes through the MCP tool. The daemon refuses
// the lexical ones and a symbolic link beneath the session's cwd; a session deliberately
// opened with a cwd other than the grant root, where the daemon's walk meets a real directory
// and airlock-fs's a symbolic link out of the root, shows that airlock-fs refuses on its own.
func TestTraversalRefusedByBothLayers(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	outside := filepath.Join(filepath.Dir(e.root), "outside")
	os.Mkdir(outside, 0o700)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o600)
	os.Symlink(outside, filepath.Join(e.root, "esc"))
	os.WriteFile(filepath.Join(e.root, "ok.txt"), []byte("fine"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.list"))

	decoy := filepath.Join(filepath.Dir(e.root), "decoy")
	os.MkdirAll(filepath.Join(decoy, "esc"), 0o700)
	os.WriteFile(filepath.Join(decoy, "esc", "secret"), []byte("decoy"), 0o600)
	e.open(t, "skewed", decoy, fsp.grant(t, e.host, e.root, "skewed", 1, "fs.read"))

	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	for _, c := range []struct{ path, code string }{
		{"../outside/secret", "invalid_tool_adapter_path"},
		{"/etc/passwd", "invalid_tool_adapter_path"},
		{"ok.txt/../../outside/secret", "invalid_tool_adapter_path"},
		{"esc/secret", "adapter_path_symlink"},
	} {
		r := cn.call(t, "fs_read", map[string]any{"path": c.path})
		if got := errorCode(t, r); got != c.code || strings.Contains(text(r), "SECRET") {
			t.Errorf("fs_read %s: %s %q, want %s", c.path, got, text(r), c.code)
		}
		if errorDetails(t, r)["origin"] == "adapter" {
			t.Errorf("fs_read %s reached the adapter", c.path)
		}
	}
	skewed := e.connect(t, mcp.Config{SessionID: "skewed", Generation: 1})
	r := skewed.call(t, "fs_read", map[string]any{"path": "esc/secret"})
	if !r.IsError || strings.Contains(text(r), "SECRET") || errorDetails(t, r)["origin"] != "adapter" {
		t.Fatalf("airlock-fs did not refuse the link out of its root: %q %v", text(r), r.StructuredContent)
	}
}

// TestCancelAbortsTheAdapterCall holds an fs.write in a scripted adapter and cancels the MCP
// call: the adapter receives the abort frame of exactly that request. The retry of the same
// call carries the same idempotency key, so the adapter can answer it without writing again.
func TestCancelAbortsTheAdapterCall(t *testing.T) {
	e := startEnv(t)
	a := startScripted(t)
	e.open(t, "agent", e.root, scriptedDescriptor(a.socket, e.host, "agent", "fs.write"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})

	args := map[string]any{"path": "f.txt", "content": "x", "create": true}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cn.cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_write", Arguments: args})
		errc <- err
	}()
	waitFor(t, "the invoke", func() bool { return len(a.framesOf("invoke")) == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	waitFor(t, "the abort", func() bool { return len(a.framesOf("abort")) == 1 })
	inv, ab := a.framesOf("invoke")[0], a.framesOf("abort")[0]
	if ab["targetRequestId"] != inv["requestId"] {
		t.Fatalf("abort targets %v, the invoke was %v", ab["targetRequestId"], inv["requestId"])
	}

	// The retry: same tool, same arguments (in another member order), same key.
	retry := make(chan *sdk.CallToolResult, 1)
	go func() {
		r, err := cn.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fs_write",
			Arguments: json.RawMessage(`{"create":true,"content":"x","path":"f.txt"}`)})
		if err != nil {
			t.Error(err)
		}
		retry <- r
	}()
	waitFor(t, "the retried invoke", func() bool { return len(a.framesOf("invoke")) == 2 })
	if k := a.framesOf("invoke")[1]["idempotencyKey"]; k != inv["idempotencyKey"] {
		t.Fatalf("the retry's key %v differs from the first call's %v", k, inv["idempotencyKey"])
	}
	a.unblock()
	if r := <-retry; r == nil || r.IsError {
		t.Fatalf("retry: %v", r)
	}
	// That outcome was definite: the same call again is a new call, with a new key.
	cn.call(t, "fs_write", args)
	if inv := a.framesOf("invoke"); len(inv) != 3 || inv[2]["idempotencyKey"] == inv[0]["idempotencyKey"] {
		t.Fatalf("a repeated call after a definite outcome reused the key: %v", inv)
	}
}

// TestRetriedWriteDoesNotWriteTwice uses a client-named call (_meta idempotency key) with a
// real airlock-fs: the second delivery of the same call, even from another MCP session, is
// answered from the adapter's memory and does not touch the file, which someone else changed
// in between; a call without a name repeated after its outcome is a new write.
func TestRetriedWriteDoesNotWriteTwice(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.write"))
	file := filepath.Join(e.root, "w.txt")
	named := func(cn *conn) *sdk.CallToolResult {
		p := &sdk.CallToolParams{Name: "fs_write", Arguments: map[string]any{"path": "w.txt", "content": "from the agent", "create": true, "overwrite": true},
			Meta: sdk.Meta{mcp.MetaIdempotencyKey: "write-w-1"}}
		r, err := cn.cs.CallTool(context.Background(), p)
		if err != nil || r.IsError {
			t.Fatalf("named write: %v %v", err, r)
		}
		return r
	}
	first := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	r1 := named(first)
	os.WriteFile(file, []byte("changed by a person"), 0o600)
	second := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	r2 := named(second)
	if b, _ := os.ReadFile(file); string(b) != "changed by a person" {
		t.Fatalf("the retried write wrote again: %q", b)
	}
	if text(r1) != text(r2) {
		t.Fatalf("the retry's outcome %q differs from the first %q", text(r2), text(r1))
	}
	plain := map[string]any{"path": "w.txt", "content": "again", "overwrite": true}
	first.call(t, "fs_write", plain)
	os.WriteFile(file, []byte("changed again"), 0o600)
	first.call(t, "fs_write", plain)
	if b, _ := os.ReadFile(file); string(b) != "again" {
		t.Fatalf("a deliberate repeat did not write: %q", b)
	}
}

// TestRemovedAdapterToolsDisappear removes the lamp adapter: its tools leave the list, and
// the client is told with notifications/tools/list_changed; registering it again brings them
// back, announced the same way. The poller does this by itself.
func TestRemovedAdapterToolsDisappear(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"))
	e.registerLamp(t)
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}, PollInterval: 100 * time.Millisecond})
	if n := len(cn.tools(t)); n != 4 {
		t.Fatalf("%d tools", n)
	}
	if r := call(t, e.c, client.Command{Operation: "removeAdapter", Payload: map[string]any{"name": "lamp"}}); !r.OK {
		t.Fatal(r.Err())
	}
	<-cn.notes
	if tl := cn.tools(t); len(tl) != 1 || tl["fs_stat"] == nil {
		t.Fatalf("after removeAdapter: %v", tl)
	}
	if _, err := cn.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "desk_lamp_observe"}); err == nil {
		t.Fatal("a removed adapter's tool was still callable")
	}
	e.registerLamp(t)
	<-cn.notes
	if n := len(cn.tools(t)); n != 4 {
		t.Fatalf("after registering again: %d tools", n)
	}

	// Closing the session takes its grant away.
	if r := call(t, e.c, client.Command{Operation: "close", SessionID: "agent", Generation: gen(1), Payload: map[string]any{}}); !r.OK {
		t.Fatal(r.Err())
	}
	<-cn.notes
	if tl := cn.tools(t); tl["fs_stat"] != nil || len(tl) != 3 {
		t.Fatalf("after close: %v", tl)
	}
}

// TestStartupRefusals: a bridge does not start for a session that does not exist, another
// generation, or a capability no adapter serves (its error naming the id).
func TestStartupRefusals(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"))
	for _, c := range []struct {
		cfg  mcp.Config
		code string
	}{
		{mcp.Config{SessionID: "nobody", Generation: 1}, "session_not_found"},
		{mcp.Config{SessionID: "agent", Generation: 2}, "session_not_found"},
		{mcp.Config{SessionID: "agent", Generation: 0}, "stale_generation"},
		{mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"no_such"}}, "unknown_capability"},
		{mcp.Config{Socket: "/nonexistent/d.sock", SessionID: "agent", Generation: 1}, mcp.CodeDaemonUnreachable},
	} {
		cfg := c.cfg
		if cfg.Socket == "" {
			cfg.Socket = e.d.Socket
		}
		b, err := mcp.New(context.Background(), cfg)
		if err == nil {
			b.Close()
			t.Errorf("%+v started", c.cfg)
			continue
		}
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != c.code {
			t.Errorf("%+v: %v, want %s", c.cfg, err, c.code)
			continue
		}
		// The error a client and the CLI show is the protocol error alone: it names the id.
		if c.code == "unknown_capability" && (!strings.Contains(pe.Message, `"no_such"`) || pe.Details["capabilityId"] != "no_such") {
			t.Errorf("%+v: %q %v does not name the capability", c.cfg, pe.Message, pe.Details)
		}
	}
}

// TestQuarantinedGenerationAnswersItsRecoveryCode restarts the daemon under a running bridge.
// The restarted daemon cannot give the session its adapter handle back, so it quarantines the
// generation; the bridge redials, keeps the fs tools listed (reopening with a new grant brings
// them back to life) and every call is an isError result carrying
// tool_adapter_reprovision_required, retryable, with the session and the generation.
func TestQuarantinedGenerationAnswersItsRecoveryCode(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.openMode(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"), "new")
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	if r := cn.call(t, "fs_stat", map[string]any{"path": "."}); r.IsError {
		t.Fatalf("before the restart: %s", text(r))
	}

	e.d.Stop()
	d2 := daemontest.Start(t, daemontest.Options{Socket: e.d.Socket, StateDir: e.d.StateDir})
	c2 := d2.Dial()
	if r := call(t, c2, client.Command{Operation: "describeSession", SessionID: "agent"}); !r.OK {
		t.Fatalf("describeSession after the restart: %v", r.Err())
	}
	if err := cn.b.Refresh(context.Background()); err != nil {
		t.Fatalf("refresh after the restart: %v", err)
	}
	if tl := cn.tools(t); len(tl) != 1 || tl["fs_stat"] == nil {
		t.Fatalf("tools of the quarantined generation: %v", tl)
	}
	r := cn.call(t, "fs_stat", map[string]any{"path": "."})
	if got := errorCode(t, r); got != protocol.CodeReprovisionRequired {
		t.Fatalf("fs_stat on the quarantined generation: %q %s", got, text(r))
	}
	if ae := airlockError(t, r); !ae.Retryable || ae.Details["sessionId"] != "agent" || ae.Details["generation"] != 1.0 {
		t.Fatalf("recovery error: %+v", ae)
	}
	first, next, _ := strings.Cut(text(r), "\n")
	if !strings.HasPrefix(first, "airlock: tool_adapter_reprovision_required: ") || !strings.HasSuffix(first, "(retryable)") ||
		next != hint.For(protocol.CodeReprovisionRequired) {
		t.Fatalf("text rendering: %q", text(r))
	}
}

// TestIdenticalReadsInFlightTogether holds two identical fs_read calls in a scripted adapter
// at once: both reach the adapter, under different idempotency keys, and both are answered.
// (Sharing one key made the daemon refuse the second as a key already in flight.)
func TestIdenticalReadsInFlightTogether(t *testing.T) {
	e := startEnv(t)
	a := startScripted(t)
	os.WriteFile(filepath.Join(e.root, "f.txt"), []byte("x"), 0o600)
	e.open(t, "agent", e.root, scriptedDescriptor(a.socket, e.host, "agent", "fs.read"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	results := make(chan *sdk.CallToolResult, 2)
	for range 2 {
		go func() {
			r, err := cn.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": "f.txt"}})
			if err != nil {
				t.Error(err)
			}
			results <- r
		}()
	}
	waitFor(t, "both invokes, or an answer", func() bool { return len(a.framesOf("invoke")) == 2 || len(results) > 0 })
	a.unblock()
	for range 2 {
		if r := <-results; r == nil || r.IsError {
			t.Fatalf("an identical read in flight: %v", r)
		}
	}
	if inv := a.framesOf("invoke"); len(inv) != 2 || inv[0]["idempotencyKey"] == inv[1]["idempotencyKey"] {
		t.Fatalf("the two reads reached the adapter as %d invokes: %v", len(inv), inv)
	}
}

// TestManyLargeReadsAtOnce sends 16 reads of almost 1 MiB at once through one bridge, with the
// daemon's default limits: every one is answered. (On one shared daemon connection, their
// answers passed the daemon's 4 MiB outbound bound per connection, and it closed the
// connection under all of them.)
func TestManyLargeReadsAtOnce(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	const size = 1000 << 10
	os.WriteFile(filepath.Join(e.root, "big.txt"), []byte(strings.Repeat("x", size)), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			r, err := cn.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": "big.txt", "maxBytes": size}})
			switch {
			case err != nil:
			case r.IsError:
				err = errors.New(text(r))
			case len(text(r)) != size:
				err = errors.New("short read")
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatalf("a read among 16 at once: %v", err)
		}
	}
}

// validates reports whether v is valid under the JSON schema s, as a client that checks a
// call's arguments against the tool's inputSchema before it sends them would find.
func validates(t *testing.T, s any, v any) bool {
	t.Helper()
	sb, _ := json.Marshal(s)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(sb)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AddResource("in.json", doc)
	sch, err := c.Compile("in.json")
	if err != nil {
		t.Fatal(err)
	}
	vb, _ := json.Marshal(v)
	inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(vb)))
	return sch.Validate(inst) == nil
}

// TestReadMaxBytesIsTheDaemons: fs_read's inputSchema bounds maxBytes where the daemon does
// (1–4194304, tool-adapters.md), not at what one answer of the grant holds: a read of more
// than the 1 MiB response is valid under the schema and answered, cut, with eof false; one
// past the schema's maximum is refused by a message naming that maximum. (The schema said
// 1047552, the refusal 4194304, and the daemon accepted 2000000.)
func TestReadMaxBytesIsTheDaemons(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "big.txt"), []byte(strings.Repeat("x", 2100000)), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	in := cn.tools(t)["fs_read"].InputSchema
	b, _ := json.Marshal(in)
	var s struct {
		Properties map[string]struct {
			Maximum int64 `json:"maximum"`
		} `json:"properties"`
	}
	json.Unmarshal(b, &s)
	top := s.Properties["maxBytes"].Maximum
	if top != 4194304 {
		t.Fatalf("fs_read's maxBytes maximum is %d, the daemon's 4194304", top)
	}

	args := map[string]any{"path": "big.txt", "maxBytes": 2000000}
	if !validates(t, in, args) {
		t.Fatalf("%v does not fit fs_read's inputSchema %s", args, b)
	}
	r := structured(t, cn.call(t, "fs_read", args))
	if n := r["bytesRead"].(float64); n < 1 || n >= 1<<20 || r["eof"] != false {
		t.Fatalf("a read of 2000000 bytes under a 1 MiB response: bytesRead %v, eof %v", n, r["eof"])
	}

	args["maxBytes"] = top + 1
	if validates(t, in, args) {
		t.Fatalf("maxBytes %d fits fs_read's inputSchema", top+1)
	}
	if we := airlockError(t, cn.call(t, "fs_read", args)); we.Code != "adapter_request_invalid" ||
		!strings.Contains(we.Message, fmt.Sprintf("maxBytes must be an integer from 1 to %d", top)) {
		t.Fatalf("maxBytes %d: %+v, want adapter_request_invalid naming the schema's maximum", top+1, we)
	}
}

// TestAdapterConnectionOutlivesItsWriteDeadline writes a frame larger than the socket buffer to
// airlock-fs (a 1 MiB fs_write, which the daemon finishes with a deadline of two request
// timeouts), waits past that deadline, and calls again: the call is answered. (The deadline
// stayed set, and the daemon's next non-blocking write failed on it, closing the adapter
// session for good: every later call failed adapter_session_closed.)
func TestAdapterConnectionOutlivesItsWriteDeadline(t *testing.T) {
	e := startEnvWith(t, daemontest.Options{Args: []string{"--max-line-bytes", fmt.Sprint(4 << 20)}})
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.write,fs.stat",
		"--timeout-ms", "1000", "--max-request-bytes", fmt.Sprint(4<<20)))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	// The frame is written whatever the call's outcome; on a loaded machine (-race) the write
	// itself may outlast its request timeout, which is not what this test is about.
	if r := cn.call(t, "fs_write", map[string]any{"path": "big.txt", "content": strings.Repeat("x", 1<<20), "create": true}); r.IsError &&
		!strings.Contains(text(r), "adapter_request_timeout") {
		t.Fatalf("1 MiB write: %s", text(r))
	}
	// A real socket deadline of a real process: only waiting past it shows it (2 × 1 s).
	time.Sleep(2100 * time.Millisecond)
	for range 3 {
		if r := cn.call(t, "fs_stat", map[string]any{"path": "big.txt"}); r.IsError {
			t.Fatalf("a call after the write deadline passed: %s", text(r))
		}
	}
}

// TestHoldKeepsToolsUntilResume: a held bridge (airlock mcp --dir while it opens its session
// again after a daemon restart) answers every call daemon_unreachable, retryable, with the
// hold's message, without reaching the daemon, and a refresh that would find the session gone
// takes no tool away; Resume lets calls through again and lists the grant of the reopened
// session at once (here a narrower one), without waiting for a poll.
func TestHoldKeepsToolsUntilResume(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.list,fs.stat"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	before := cn.b.Tools()

	cn.b.Hold("held by the test")
	r := cn.call(t, "fs_read", map[string]any{"path": "notes.txt"})
	if we := airlockError(t, r); !r.IsError || we.Code != mcp.CodeDaemonUnreachable || !we.Retryable || we.Message != "held by the test" {
		t.Fatalf("a call while held: %+v", we)
	}
	// The session is gone from the daemon, as after a restart: a refresh would take every tool.
	if r := call(t, e.c, client.Command{Operation: "close", SessionID: "agent", Generation: gen(1), Payload: map[string]any{"retainSession": false}}); !r.OK {
		t.Fatalf("close: %v", r.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cn.b.Refresh(ctx); err == nil {
		t.Fatal("a refresh while held reached the daemon")
	}
	if got := cn.b.Tools(); !slices.Equal(got, before) {
		t.Fatalf("tools while held %v, before %v", got, before)
	}

	// Reopened with the same id and generation, and a grant of fs.read only.
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read"))
	if err := cn.b.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cn.b.Tools(); slices.Contains(got, "fs_list") || !slices.Contains(got, "fs_read") {
		t.Fatalf("tools after Resume: %v", got)
	}
	if r := cn.call(t, "fs_read", map[string]any{"path": "notes.txt"}); r.IsError || text(r) != "hello\n" {
		t.Fatalf("fs_read after Resume: %s", text(r))
	}
}

// TestReadTextSaysWhenCut: fs_read's text is the file's text, and when the window stops
// before the end of the file (eof false) a line after it says so and how to read on, since
// most clients show a model only the text; structuredContent's content stays the file's text
// alone. A read that reaches the end, and one past it, carry no note.
func TestReadTextSaysWhenCut(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "f.txt"), []byte("one\ntwo\nthree\n"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	for _, c := range []struct {
		args          map[string]any
		content, text string
	}{
		{map[string]any{"path": "f.txt", "maxBytes": 4}, "one\n",
			"one\n\n(truncated: the file goes on after these 4 bytes; call fs_read again with offset advanced by 4 to read on)\n"},
		{map[string]any{"path": "f.txt", "offset": 4, "maxBytes": 6}, "two\nth",
			"two\nth\n(truncated: the file goes on after these 6 bytes; call fs_read again with offset advanced by 6 to read on)\n"},
		{map[string]any{"path": "f.txt", "offset": 4}, "two\nthree\n", "two\nthree\n"},
		{map[string]any{"path": "f.txt", "offset": 99}, "", ""},
	} {
		r := cn.call(t, "fs_read", c.args)
		if s := structured(t, r); s["content"] != c.content || text(r) != c.text {
			t.Errorf("%v: content %q, text %q; want %q and %q", c.args, s["content"], text(r), c.content, c.text)
		}
	}
}

// TestWriteSchemaSaysTheDefaults: fs_write's inputSchema says what the call does when create
// and overwrite are left out, and it does that: a file that does not exist is created (create
// is true by default in airlock-fs), one that exists fails file_exists, and create false fails
// not_found. The schema said only "Allow creating the file.", which a model reads as off
// unless set: it sent create true for every new file, as the hints told it to, and took a
// write of a mistyped path with overwrite true for one that could not create a file.
func TestWriteSchemaSaysTheDefaults(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "old.txt"), []byte("old\n"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.write"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	tools := cn.tools(t)
	b, _ := json.Marshal(tools["fs_write"].InputSchema)
	var s struct {
		Properties map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
	}
	json.Unmarshal(b, &s)
	if d := s.Properties["create"].Description; !strings.Contains(d, "default true") {
		t.Errorf("create: %q does not say it defaults to true", d)
	}
	if d := s.Properties["overwrite"].Description; !strings.Contains(d, "default false") || !strings.Contains(d, "file_exists") {
		t.Errorf("overwrite: %q does not say it defaults to false", d)
	}
	if d := tools["fs_write"].Description; !strings.Contains(d, "is created") {
		t.Errorf("fs_write's description %q does not say a missing file is created", d)
	}
	b, _ = json.Marshal(tools["fs_read"].InputSchema)
	s.Properties = nil
	json.Unmarshal(b, &s)
	if d := s.Properties["offset"].Description; !strings.Contains(d, "inside a multi-byte character fails invalid_argument") {
		t.Errorf("fs_read's offset: %q does not say an offset inside a character is refused", d)
	}

	if r := structured(t, cn.call(t, "fs_write", map[string]any{"path": "new.txt", "content": "x"})); r["created"] != true {
		t.Fatalf("a write of a new file without create: %v, want it created", r)
	}
	if c := errorCode(t, cn.call(t, "fs_write", map[string]any{"path": "old.txt", "content": "x"})); c != "file_exists" {
		t.Fatalf("a write of an existing file without overwrite: %s, want file_exists", c)
	}
	if c := errorCode(t, cn.call(t, "fs_write", map[string]any{"path": "other.txt", "content": "x", "create": false, "overwrite": true})); c != "not_found" {
		t.Fatalf("a write of a new file with create false: %s, want not_found", c)
	}
}
