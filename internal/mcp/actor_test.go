package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/mcp"
)

// TestEveryClientIsTheMCPDoor: every call airlock mcp makes is the mcp door's in the audit
// journal (and so to the metrics and the approval queue), named by the client that made it: a
// client that gives no name (the 2026-07-28 revision lets a request omit clientInfo; an
// initialize may give "") counted as the operator's own (door socket) before. Under 2026-07-28
// each request names its own client, on the fast path (a _meta the SDK has accepted once) as
// through the SDK; under 2025-11-25 the one initialize gave. Each answer is awaited before the
// next line, so that the fast path counts are exact.
func TestEveryClientIsTheMCPDoor(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.stat,fs.search"))
	meta := func(client string) string {
		m := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`
		switch client {
		case "":
		case "Name":
			m += `,"io.modelcontextprotocol/clientInfo":{"Name":"cased","version":"1"}` // not the member "name"
		default:
			m += `,"io.modelcontextprotocol/clientInfo":{"name":"` + client + `","version":"1"}`
		}
		return m + "},"
	}
	call := func(id, tool, meta string) string {
		args := `{"path":"notes.txt"}`
		if tool == "fs_search" {
			args = `{"path":".","query":"hello"}`
		}
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{` + meta + `"name":"` + tool + `","arguments":` + args + `}}`
	}
	exchange := func(s *rawServer, line string) {
		t.Helper()
		if r, _ := s.exchange(t, line).(map[string]any); r == nil || r["result"] == nil {
			t.Fatalf("%s: %v", line, r)
		}
	}

	stateless := startRaw(t, e, mcp.Config{SessionID: "agent", Generation: 1}, true)
	for _, c := range []struct{ id, tool, client string }{
		{"1", "fs_stat", ""}, {"2", "fs_stat", ""}, {"3", "fs_search", ""}, // the SDK, the fast path, the SDK
		{"4", "fs_stat", "first-client"}, {"5", "fs_stat", "first-client"},
		{"6", "fs_stat", "second-client"}, {"7", "fs_stat", "second-client"}, {"8", "fs_search", "second-client"},
		// A clientInfo whose "Name" is not the member "name" is the SDK's to read (as no
		// name) both times: the fast path reads it as strictly as the SDK does.
		{"9", "fs_stat", "Name"}, {"10", "fs_stat", "Name"},
	} {
		exchange(stateless, call(c.id, c.tool, meta(c.client)))
	}
	if n := mcp.FastCalls(stateless.b); n != 3 {
		t.Fatalf("the fast path took %d of the 2026-07-28 calls, want 3", n)
	}
	legacy := startRaw(t, e, mcp.Config{SessionID: "agent", Generation: 1}, true)
	legacy.exchange(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"","version":"1"}}}`)
	exchange(legacy, call("11", "fs_stat", ""))
	exchange(legacy, call("12", "fs_search", ""))
	if n := mcp.FastCalls(legacy.b); n != 1 {
		t.Fatalf("the fast path took %d of the 2025-11-25 calls, want 1", n)
	}

	var got []string
	err := audit.Read(context.Background(), audit.DirIn(e.d.StateDir), audit.Query{}, false, func(_ []byte, r *audit.Record) error {
		if r.Kind == audit.KindStarted && r.Target != nil && strings.HasPrefix(r.Target.Op, "fs.") {
			got = append(got, string(r.Door)+" "+r.Target.Op+" "+r.Actor.MCPClient)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"mcp fs.stat (unnamed)", "mcp fs.stat (unnamed)", "mcp fs.search (unnamed)",
		"mcp fs.stat first-client", "mcp fs.stat first-client",
		"mcp fs.stat second-client", "mcp fs.stat second-client", "mcp fs.search second-client",
		"mcp fs.stat (unnamed)", "mcp fs.stat (unnamed)",
		"mcp fs.stat (unnamed)", "mcp fs.search (unnamed)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the journal's calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
