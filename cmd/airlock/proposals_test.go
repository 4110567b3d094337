package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// TestAdapterProposalsCommand: airlock adapter proposals lists agents' proposals, every one
// or one session generation's, as a table and as JSON; --session without --generation is a
// usage error.
func TestAdapterProposalsCommand(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	d := daemontest.Start(t, daemontest.Options{})
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "counter.py"), []byte(daemontest.CounterAdapter), 0o600); err != nil {
		t.Fatal(err)
	}
	cli(t, d.Socket, "", "session", "open", "agent", "--generation", "1", "--cwd", cwd, "--mode", "memory",
		"--policy", writePolicy(t, `{"default":"allow","proposals":"allow"}`)).wantCode(t, exitOK)
	if r := cli(t, d.Socket, "", "session", "show", "agent").wantCode(t, exitOK); !strings.Contains(r.stdout, "; adapter proposals allowed") {
		t.Fatalf("session show:\n%s", r.stdout)
	}
	r := cli(t, d.Socket, "", "adapter", "proposals").wantCode(t, exitOK)
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("no proposals: %q", r.stdout)
	}
	g := int64(1)
	resp, err := d.Dial().Call(context.Background(), client.Command{Operation: "proposeAdapter", SessionID: "agent", Generation: &g,
		Payload: map[string]any{"proposal": map[string]any{"name": "counter", "command": "python3", "args": []string{"counter.py"}, "capabilities": []string{"agent_counter"}}}})
	if err != nil || !resp.OK {
		t.Fatalf("proposeAdapter: %v %v", err, resp.Err())
	}
	r = cli(t, d.Socket, "", "adapter", "proposals").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "counter  pending_run  agent/1") || !strings.Contains(r.stdout, filepath.Join(cwd, "counter.py")) {
		t.Fatalf("adapter proposals:\n%s", r.stdout)
	}
	r = cli(t, d.Socket, "", "adapter", "proposals", "--session", "other", "--generation", "1", "--json").wantCode(t, exitOK)
	if env := envelopeOf(t, r, "adapter proposals", true); strings.Join(strings.Fields(string(env.Data)), "") != `{"proposals":[]}` {
		t.Fatalf("another session's: %s", env.Data)
	}
	cli(t, d.Socket, "", "adapter", "proposals", "--session", "agent").wantCode(t, exitUsage)
}

// TestAgentProposesAdapterWithTheCLI is issue 26's authoring flow as an operator runs it:
// an agent turn (scripted model) writes a Python adapter with fs_write and proposes it;
// airlock approvals shows the run request with the script's SHA-256; airlock approve runs
// it; the publish request shows the validator's report; airlock approve publishes it; a
// second daemon in the room invokes it; closing the session removes it.
func TestAgentProposesAdapterWithTheCLI(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	daemontest.Binary(t, "airlock-fs") // beside airlockd, which grants the session's cwd from it
	llm := modeltest.New()
	t.Cleanup(llm.Close)
	a := startRoomHost(t, "--provider", "local="+llm.URL())
	var sa roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-via", a.d.Socket)
	a.cli("", "room", "create", "home").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "home", "--name", "bob")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)

	cwd := filepath.Join(daemontest.ShortDir(t), "work")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	a.cli("", "session", "open", "agent", "--generation", "1", "--cwd", cwd, "--mode", "memory", "--model", "local/m",
		"--fs-ops", "fs.read,fs.write", "--policy", writePolicy(t, `{"default":"allow","proposals":"allow"}`)).wantCode(t, exitOK)
	content, _ := json.Marshal(daemontest.CounterAdapter)
	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "w", Name: "fs_write", Arguments: `{"path":"counter.py","create":true,"content":` + string(content) + `}`}}},
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "p", Name: "adapter_propose", Arguments: `{"name":"counter","command":"python3","args":["counter.py"],` +
			`"capabilities":["agent_counter"],"publish":{"room":"home","capabilities":[{"capabilityId":"agent_counter","actions":["bump"]}]}}`}}},
		modeltest.Reply{Text: "Proposed."},
	)
	a.cli("", "wake", "agent", "write a counter and offer it to the room", "--generation", "1").wantCode(t, exitOK)

	sum := sha256.Sum256([]byte(daemontest.CounterAdapter))
	var l struct {
		Approvals []approvalView `json:"approvals"`
	}
	waitFor(t, "the run request", func() bool {
		a.data(&l, "approvals")
		return len(l.Approvals) == 1 && l.Approvals[0].Kind == "run"
	})
	run := l.Approvals[0]
	if r := a.cli("", "approvals").wantCode(t, exitOK); !strings.Contains(r.stdout, run.ID+"  run adapter counter") ||
		!strings.Contains(r.stdout, "agent turn · session agent generation 1") || !strings.Contains(r.stdout, hex.EncodeToString(sum[:])) {
		t.Fatalf("airlock approvals:\n%s", r.stdout)
	}
	a.cli("", "approve", run.ID).wantCode(t, exitOK)
	waitFor(t, "the publish request", func() bool {
		a.data(&l, "approvals")
		return len(l.Approvals) == 1 && l.Approvals[0].Kind == "publish"
	})
	if r := a.cli("", "approvals").wantCode(t, exitOK); !strings.Contains(r.stdout, "publish adapter counter") || !strings.Contains(r.stdout, `"pass":true`) ||
		!strings.Contains(r.stdout, `"descriptors":[{"capabilityId":"agent_counter"`) {
		t.Fatalf("the publish request:\n%s", r.stdout)
	}
	a.cli("", "approve", l.Approvals[0].ID).wantCode(t, exitOK)

	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	waitFor(t, "B to see the counter", func() bool {
		b.data(&caps, "room", "caps", "--room", "home")
		return described(caps.Capabilities, 1)
	})
	var res struct {
		Result struct {
			Count int `json:"count"`
		} `json:"result"`
	}
	b.data(&res, "room", "invoke", "--room", "home", "--cap", "agent_counter", "--action", "bump", "--args", `{"by":4}`)
	if res.Result.Count != 4 {
		t.Fatalf("B's bump: %+v", res)
	}
	if r := a.cli("", "adapter", "proposals").wantCode(t, exitOK); !strings.Contains(r.stdout, "published") {
		t.Fatalf("adapter proposals:\n%s", r.stdout)
	}

	a.cli("", "session", "close", "agent", "--generation", "1").wantCode(t, exitOK)
	var adapters struct {
		Adapters []protocol.AdapterState `json:"adapters"`
	}
	a.data(&adapters, "adapter", "list")
	if len(adapters.Adapters) != 0 {
		t.Fatalf("adapters after the session closed: %+v", adapters.Adapters)
	}
	waitFor(t, "the counter to leave the room", func() bool {
		b.data(&caps, "room", "caps", "--room", "home")
		return len(caps.Capabilities) == 0
	})
}
