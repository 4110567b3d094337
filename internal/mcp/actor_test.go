package mcp_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestEveryClientIsTheMCPDoor: every call airlock mcp makes is the mcp door's in the audit
// journal (and so to the policy), named by the client that made it: a client that gives no name
// (the 2026-07-28 revision lets a request omit clientInfo; an initialize may give "") counted
// as the operator's own (door socket) before. Under 2026-07-28 each request names its own
// client, on the fast path (fs_stat) and through the SDK (fs_search) alike; under 2025-11-25
// the one initialize gave.
func TestEveryClientIsTheMCPDoor(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.stat,fs.search"))
	meta := func(client string) string {
		m := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`
		if client != "" {
			m += `,"io.modelcontextprotocol/clientInfo":{"name":"` + client + `","version":"1"}`
		}
		return m + "}"
	}
	call := func(id, tool, path, meta string) string {
		if meta != "" {
			meta += ","
		}
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{` + meta + `"name":"` + tool + `","arguments":{"path":"` + path + `"` +
			map[bool]string{true: `,"query":"hello"`, false: ``}[tool == "fs_search"] + `}}}`
	}
	serve := func(lines ...string) {
		t.Helper()
		cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", e.d.Socket, "mcp", "--session", "agent", "--generation", "1")
		cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || strings.Count(stdout.String(), `"result"`) != len(lines)-strings.Count(strings.Join(lines, "\n"), "notifications/") {
			t.Fatalf("airlock mcp: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	}
	serve(
		call("1", "fs_stat", "notes.txt", meta("")),
		call("2", "fs_search", ".", meta("")),
		call("3", "fs_stat", "notes.txt", meta("first-client")),
		call("4", "fs_stat", "notes.txt", meta("second-client")),
		call("5", "fs_search", ".", meta("second-client")),
	)
	serve(
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		call("6", "fs_stat", "notes.txt", ""),
		call("7", "fs_search", ".", ""),
	)

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
		"mcp fs.stat (unnamed)", "mcp fs.search (unnamed)", "mcp fs.stat first-client", "mcp fs.stat second-client", "mcp fs.search second-client",
		"mcp fs.stat (unnamed)", "mcp fs.search (unnamed)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the journal's calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
