package daemon_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
)

// approvalView is a pending approval as listApprovals shows it, the members this test reads.
type approvalView struct {
	ID     string          `json:"id"`
	Kind   string          `json:"kind"`
	Target string          `json:"target"`
	Reason string          `json:"reason"`
	Detail json.RawMessage `json:"detail"`
	Actor  struct {
		Door       string `json:"door"`
		Session    string `json:"session"`
		Generation int64  `json:"generation"`
	} `json:"actor"`
}

// waitApproval waits for the pending approval of kind for target on c.
func waitApproval(t *testing.T, c *client.Client, kind, target string) approvalView {
	t.Helper()
	var got approvalView
	if !daemontest.WaitFor(60*time.Second, func() bool {
		var l struct {
			Approvals []approvalView `json:"approvals"`
		}
		mustOK(t, c, "listApprovals", map[string]any{}).Decode(&l)
		for _, a := range l.Approvals {
			if a.Kind == kind && a.Target == target {
				got = a
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no %s approval for %s", kind, target)
	}
	return got
}

// waitProposal waits until the only proposal of session agent generation 1 is in state.
func waitProposal(t *testing.T, c *client.Client, state string) proposalView {
	t.Helper()
	var last []proposalView
	if !daemontest.WaitFor(60*time.Second, func() bool {
		last = listProposals(t, c, "agent", 1)
		return len(last) == 1 && last[0].State == state
	}) {
		t.Fatalf("the proposal never reached %s: %+v", state, last)
	}
	return last[0]
}

// TestBinaryAgentProposesAdapterIntoRoom is issue 26's authoring flow with real binaries: an
// agent turn (scripted model) writes a small adapter with fs_write and proposes it; the
// operator approves execution (decideApproval, what `airlock approve` sends) of the request
// that shows the script's SHA-256; the validator runs, and its report is shown in the pending
// publish request; the operator approves publication; a second daemon in the room invokes
// the adapter; the session ends and the adapter is gone, from the host and from the room.
func TestBinaryAgentProposesAdapterIntoRoom(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	daemontest.Binary(t, "airlock-fs") // beside airlockd, which runs it for the session's grant
	llm := startModel(t)
	a := daemontest.Start(t, daemontest.Options{Args: append([]string{"--provider", "local=" + llm.URL()}, slowAdapterStart...)})
	ca := a.Dial()
	sa := roomReady(t, ca)
	b := daemontest.Start(t, daemontest.Options{Args: []string{"--nats-via", a.Socket}})
	cb := b.Dial()
	roomReady(t, cb)
	mustOK(t, ca, "createRoom", map[string]any{"room": "home"})
	var inv struct {
		Code string `json:"code"`
	}
	if err := mustOK(t, ca, "inviteRoom", map[string]any{"room": "home"}).Decode(&inv); err != nil {
		t.Fatal(err)
	}
	mustOK(t, cb, "joinRoom", map[string]any{"code": inv.Code})

	cwd := filepath.Join(daemontest.ShortDir(t), "work")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	open := managedOpen("agent", 1, cwd, "fs.read", "fs.write").Payload.(map[string]any)
	open["model"] = map[string]any{"provider": "local", "id": "test-model"}
	open["policy"] = map[string]any{"file": writeOwnedFile(t, "policy.json", proposalsPolicy)}
	if r := call(t, ca, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: open}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}

	content, _ := json.Marshal(daemontest.CounterAdapter)
	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_w", Name: "fs_write",
			Arguments: `{"path":"counter.py","create":true,"content":` + string(content) + `}`}}},
		modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_p", Name: "adapter_propose",
			Arguments: `{"name":"counter","command":"python3","args":["counter.py"],"capabilities":["agent_counter"],` +
				`"publish":{"room":"home","capabilities":[{"capabilityId":"agent_counter","actions":["bump"],"observe":true}]},` +
				`"reason":"a counter the room can bump"}`}}},
		modeltest.Reply{Text: "Proposed the counter adapter; it waits for your approval."},
	)
	var res turnResult
	if err := wake(t, ca, "agent", 1, "k1", "write a counter adapter and offer it to the room", true).Decode(&res); err != nil {
		t.Fatalf("wake: %v", err)
	}
	reqs := llm.Requests()
	var names []string
	for _, tool := range reqs[0].Request.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "adapter_propose") || !slices.Contains(names, "adapter_proposals") || !slices.Contains(names, "fs_write") {
		t.Fatalf("tools offered: %v", names)
	}
	if out := lastToolOutput(reqs[2].Request.Messages); !strings.Contains(out, `"state":"pending_run"`) {
		t.Fatalf("adapter_propose output: %s", out)
	}

	// The run request shows what will run, pinned.
	run := waitApproval(t, ca, "run", "adapter counter")
	var rd struct {
		Command string   `json:"command"`
		Argv    []string `json:"argv"`
		Files   []struct {
			Role   string `json:"role"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
	}
	if err := json.Unmarshal(run.Detail, &rd); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(cwd, "counter.py")
	if run.Actor.Door != "turn" || run.Actor.Session != "agent" || run.Reason != "agent proposal" || len(rd.Files) != 2 ||
		rd.Files[1].Role != "script" || rd.Files[1].SHA256 != fileSum(t, script) || len(rd.Argv) != 1 || !strings.HasSuffix(rd.Argv[0], "/counter.py") {
		t.Fatalf("the run request: %+v %s", run, run.Detail)
	}
	if m := listAdapters(t, ca); len(m) != 0 {
		t.Fatalf("an adapter runs before the approval: %+v", m)
	}
	mustOK(t, ca, "decideApproval", map[string]any{"approvalId": run.ID, "approve": true})

	// The publish request shows the validator's report and the descriptors it saw.
	pub := waitApproval(t, ca, "publish", "adapter counter")
	var pd struct {
		Room   string `json:"room"`
		Report struct {
			Pass   bool `json:"pass"`
			Probes []struct {
				Name string `json:"name"`
				Pass bool   `json:"pass"`
			} `json:"probes"`
		} `json:"report"`
		Descriptors []struct {
			CapabilityID string `json:"capabilityId"`
		} `json:"descriptors"`
	}
	if err := json.Unmarshal(pub.Detail, &pd); err != nil {
		t.Fatal(err)
	}
	if pd.Room != "home" || !pd.Report.Pass || len(pd.Report.Probes) < 10 || len(pd.Descriptors) != 1 || pd.Descriptors[0].CapabilityID != "agent_counter" {
		t.Fatalf("the publish request: %s", pub.Detail)
	}
	if p := waitProposal(t, ca, "pending_publish"); p.Report == nil || !p.Report.Pass {
		t.Fatalf("pending publish: %+v", p)
	}
	ad := listAdapters(t, ca)["counter"]
	if ad.State != "ready" || ad.SessionID != "agent" || ad.Generation != 1 || ad.LeaseExpiresAt.IsZero() {
		t.Fatalf("the registration: %+v", ad)
	}
	// Nothing is in the room before the second approval.
	var caps struct {
		Capabilities []struct {
			CapabilityID string `json:"capabilityId"`
		} `json:"capabilities"`
	}
	mustOK(t, cb, "listRoomCapabilities", map[string]any{"room": "home"}).Decode(&caps)
	if len(caps.Capabilities) != 0 {
		t.Fatalf("published before the approval: %+v", caps)
	}
	mustOK(t, ca, "decideApproval", map[string]any{"approvalId": pub.ID, "approve": true})
	if p := waitProposal(t, ca, "published"); p.Publication == nil || p.Publication.State != "published" {
		t.Fatalf("published: %+v", p)
	}

	// B invokes it through the room.
	if !daemontest.WaitFor(20*time.Second, func() bool {
		mustOK(t, cb, "listRoomCapabilities", map[string]any{"room": "home"}).Decode(&caps)
		return len(caps.Capabilities) == 1
	}) {
		t.Fatal("B never saw the proposed adapter")
	}
	bump := map[string]any{"room": "home", "provider": sa["hostId"], "capabilityId": "agent_counter", "action": "bump", "args": map[string]any{"by": 3}}
	r := call(t, cb, client.Command{Operation: "invokeRoomCapability", Payload: bump})
	if !r.OK || !strings.Contains(string(r.Data), `"count":3`) {
		t.Fatalf("B's invoke: %v %s", r.Err(), r.Data)
	}

	// The session ends: the adapter is gone, and so is its publication.
	if r := call(t, ca, client.Command{Operation: "close", SessionID: "agent", Generation: gen(1), Payload: map[string]any{"retainSession": true}}); !r.OK {
		t.Fatal(r.Err())
	}
	if m := listAdapters(t, ca); len(m) != 0 {
		t.Fatalf("adapters after the session ended: %+v", m)
	}
	if !processGone(ad.PID) {
		t.Fatal("the proposed adapter's child outlived its session")
	}
	if l := listProposals(t, ca, "", 0); len(l) != 1 || l[0].State != "ended" || l[0].Publication == nil || l[0].Publication.State != "withdrawn" {
		t.Fatalf("the proposal after the session ended: %+v", l)
	}
	if !daemontest.WaitFor(20*time.Second, func() bool {
		mustOK(t, cb, "listRoomCapabilities", map[string]any{"room": "home"}).Decode(&caps)
		return len(caps.Capabilities) == 0
	}) {
		t.Fatalf("the room still shows the adapter: %+v", caps)
	}
	if r := call(t, cb, client.Command{Operation: "invokeRoomCapability", Payload: bump}); r.OK {
		t.Fatalf("B's invoke after the session ended: %s", r.Data)
	}
}
