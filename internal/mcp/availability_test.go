package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

// TestCallsUnavailableKeepsTools: a capability the daemon lists unavailable because its last
// calls all ended unavailable (calls_unavailable) keeps its tools, since only a call can see it
// work again; once what it needs is there, the same tool answers.
func TestCallsUnavailableKeepsTools(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"))
	probe := daemontest.Build(t, "./internal/daemon/testdata/envprobe")
	tool := filepath.Join(t.TempDir(), "tool")
	if r := call(t, e.c, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "probe", "command": probe,
		"args": []string{"PROBE_TOKEN", tool}}}); !r.OK {
		t.Fatal(r.Err())
	}
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"env_probe"}})
	if cn.tools(t)["env_probe_observe"] == nil {
		t.Fatalf("tools: %v", cn.tools(t))
	}
	for range 3 {
		if r := cn.call(t, "env_probe_observe", map[string]any{}); errorCode(t, r) != "unavailable" {
			t.Fatalf("observe without the tool: %s", text(r))
		}
	}
	var list struct {
		Capabilities []struct {
			UnavailableReason string `json:"unavailableReason"`
		} `json:"capabilities"`
	}
	if err := call(t, e.c, client.Command{Operation: "listCapabilities"}).Decode(&list); err != nil ||
		len(list.Capabilities) != 1 || list.Capabilities[0].UnavailableReason != "calls_unavailable" {
		t.Fatalf("listCapabilities: %v %+v", err, list)
	}
	if err := cn.b.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cn.tools(t)["env_probe_observe"] == nil {
		t.Fatalf("the tool went with calls_unavailable: %v", cn.tools(t))
	}
	if err := os.WriteFile(tool, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cn.call(t, "env_probe_observe", map[string]any{}); r.IsError {
		t.Fatalf("observe with the tool: %s", text(r))
	}
}
