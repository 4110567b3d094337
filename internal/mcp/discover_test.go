package mcp_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
)

// TestStdioDiscoverThenInitialize: on stdio a client may probe with server/discover and then
// choose 2025-11-25 (docs/mcp.md, "Protocol revisions and transports"), as over HTTP. The
// discover is answered with both revisions; the initialize after it begins a session of
// 2025-11-25, whose tools/list and tools/call (the fast path's) are answered; a discover and a
// call of 2026-07-28 in that session are answered too and leave it a 2025-11-25 session, to
// which a changed tool list is announced unsolicited; a second initialize is refused -32600.
// Before, the go-sdk took the discover for the start of a 2026-07-28 session: the initialize
// was refused `duplicate "initialize" received` (code 0), and a discover after an initialize
// made the session one that hears of no change; a second initialize was refused with code 0.
func TestStdioDiscoverThenInitialize(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	if err := os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read"))
	e.registerLamp(t)
	p := startStdio(t, e, "--session", "agent", "--generation", "1", "--caps", "desk_lamp")

	discover := func(id string) {
		t.Helper()
		p.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"server/discover","params":{`+metaEnvelope+`}}`)
		m := p.responseTo(t, id)
		var r struct {
			SupportedVersions []string `json:"supportedVersions"`
		}
		if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || !slices.Contains(r.SupportedVersions, revSessions) || !slices.Contains(r.SupportedVersions, revStateless) {
			t.Fatalf("server/discover: %+v %s", m.Error, m.Result)
		}
	}
	result := func(id, what string) string {
		t.Helper()
		m := p.responseTo(t, id)
		if m.Error != nil || len(m.Result) == 0 {
			t.Fatalf("%s: %+v", what, m.Error)
		}
		return string(m.Result)
	}

	discover("1")
	p.send(t, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"`+revSessions+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if r := result("2", "initialize after server/discover"); !strings.Contains(r, `"protocolVersion":"`+revSessions+`"`) {
		t.Fatalf("initialize: %s", r)
	}
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	p.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	if r := result("3", "tools/list"); !strings.Contains(r, `"fs_read"`) || !strings.Contains(r, `"desk_lamp_observe"`) {
		t.Fatalf("tools/list: %s", r)
	}
	p.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fs_read","arguments":{"path":"notes.txt"}}}`)
	if r := result("4", "fs_read"); !strings.Contains(r, `hello\n`) {
		t.Fatalf("fs_read: %s", r)
	}

	// The stateless revision's requests stand alone on the connection, after an initialize too.
	discover("5")
	p.send(t, `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{`+metaEnvelope+`,"name":"fs_read","arguments":{"path":"notes.txt"}}}`)
	if r := result("6", "a 2026-07-28 fs_read"); !strings.Contains(r, `hello\n`) {
		t.Fatalf("fs_read of 2026-07-28: %s", r)
	}
	p.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fs_read","arguments":{"path":"notes.txt"}}}`)
	if r := result("7", "fs_read"); !strings.Contains(r, `hello\n`) {
		t.Fatalf("fs_read: %s", r)
	}

	// A second initialize is refused with a JSON-RPC code (it was code 0).
	p.send(t, `{"jsonrpc":"2.0","id":8,"method":"initialize","params":{"protocolVersion":"`+revSessions+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := p.responseTo(t, "8"); m.Error == nil || m.Error.Code != -32600 {
		t.Fatalf("a second initialize: %+v %s", m.Error, m.Result)
	}

	// Still a session of 2025-11-25: a changed tool list is announced unsolicited.
	if r := call(t, e.c, client.Command{Operation: "removeAdapter", Payload: map[string]any{"name": "lamp"}}); !r.OK {
		t.Fatal(r.Err())
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.ContainsFunc(p.output(), func(l string) bool { return strings.Contains(l, `"notifications/tools/list_changed"`) }) {
		if time.Now().After(deadline) {
			t.Fatal("no notifications/tools/list_changed after removeAdapter")
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.in.Close()
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("airlock mcp did not exit after stdin closed")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, l := range p.output() {
		var m rpcMessage
		if json.Unmarshal([]byte(l), &m) == nil && m.Error != nil && string(m.ID) != "8" {
			t.Errorf("an error: %s", l)
		}
	}
}
