package mcp_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

// TestProposalToolsAtTheMCPDoor: an MCP client of a session whose policy allows proposals
// gets adapter_propose and adapter_proposals; a proposal answers pending_run (nothing runs
// before the operator's approval) and shows in the list; a refused one is an error result
// with its code; a session without the switch is offered neither tool.
func TestProposalToolsAtTheMCPDoor(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	e := startEnv(t)
	if err := os.WriteFile(filepath.Join(e.root, "counter.py"), []byte(daemontest.CounterAdapter), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(id, doc string) {
		p := map[string]any{
			"cwd": e.root, "session": map[string]any{"mode": "memory"}, "policy": map[string]any{"file": policyFile(t, doc)},
			"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
				"contextFiles": "none", "tools": "none"},
		}
		if r := call(t, e.c, client.Command{Operation: "open", SessionID: id, Generation: gen(1), Payload: p}); !r.OK {
			t.Fatalf("open %s: %v", id, r.Err())
		}
	}
	open("agent", `{"default":"allow","proposals":"allow"}`)
	open("plain", `{"default":"allow"}`)

	plain := e.connect(t, mcp.Config{SessionID: "plain", Generation: 1})
	if tools := plain.tools(t); tools["adapter_propose"] != nil || tools["adapter_proposals"] != nil {
		t.Fatalf("a session without the switch is offered proposal tools: %v", tools)
	}

	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	tools := cn.tools(t)
	if tools["adapter_propose"] == nil || tools["adapter_proposals"] == nil || !strings.Contains(tools["adapter_propose"].Description, "Nothing runs until the operator approves it") {
		t.Fatalf("tools: %v", tools)
	}
	r := cn.call(t, "adapter_propose", map[string]any{"name": "counter", "command": "python3", "args": []string{"counter.py", "API_KEY=canary-93e1"},
		"capabilities": []string{"agent_counter"}})
	if errorCode(t, r) != "proposal_env_refused" || !strings.Contains(text(r), "configuration from a file") {
		t.Fatalf("a proposal with an assignment: %s", text(r))
	}
	r = cn.call(t, "adapter_propose", map[string]any{"name": "counter", "command": "python3", "args": []string{"counter.py"},
		"capabilities": []string{"agent_counter"}})
	if r.IsError || !strings.Contains(text(r), `"state":"pending_run"`) || !strings.Contains(text(r), `"sha256":"`) {
		t.Fatalf("adapter_propose: %s", text(r))
	}
	r = cn.call(t, "adapter_proposals", map[string]any{})
	if r.IsError || strings.Count(text(r), `"id":"`) != 1 || !strings.Contains(text(r), `"state":"pending_run"`) {
		t.Fatalf("adapter_proposals: %s", text(r))
	}
	var l struct {
		Approvals []struct {
			Kind  string `json:"kind"`
			Actor struct {
				Door   string `json:"door"`
				Client string `json:"client"`
			} `json:"actor"`
		} `json:"approvals"`
	}
	if err := call(t, e.c, client.Command{Operation: "listApprovals", Payload: map[string]any{}}).Decode(&l); err != nil {
		t.Fatal(err)
	}
	if len(l.Approvals) != 1 || l.Approvals[0].Kind != "run" || l.Approvals[0].Actor.Door != "mcp" {
		t.Fatalf("the run request: %+v", l)
	}
	if strings.Contains(e.d.Stderr(), "canary-93e1") {
		t.Fatal("the daemon log holds the refused argv's value")
	}
}

// TestHostDenyHidesProposalTools: under a host policy whose "proposals" is "deny", a session
// whose own policy allows proposals is offered no proposal tools, since the daemon would
// refuse every call of them (describeSession's hostDeniesProposals).
func TestHostDenyHidesProposalTools(t *testing.T) {
	e := startEnvWith(t, daemontest.Options{Args: []string{"--policy", policyFile(t, `{"default":"allow","proposals":"deny"}`)}})
	p := map[string]any{
		"cwd": e.root, "session": map[string]any{"mode": "memory"}, "policy": map[string]any{"file": policyFile(t, `{"default":"allow","proposals":"allow"}`)},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": "none"},
	}
	if r := call(t, e.c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	var d struct {
		HostDeniesProposals bool `json:"hostDeniesProposals"`
	}
	if r := call(t, e.c, client.Command{Operation: "describeSession", SessionID: "agent"}); !r.OK || r.Decode(&d) != nil || !d.HostDeniesProposals {
		t.Fatalf("describeSession under the host's deny: %s", r.Data)
	}
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	if tools := cn.tools(t); tools["adapter_propose"] != nil || tools["adapter_proposals"] != nil {
		t.Fatalf("proposal tools offered under the host's deny: %v", tools)
	}
}
