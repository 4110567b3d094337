package daemon_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// proposalView is a proposal as listProposals and proposeAdapter show it, the members these
// tests read.
type proposalView struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	State      string `json:"state"`
	SessionID  string `json:"sessionId"`
	Generation int64  `json:"generation"`
	Plan       struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Files   []struct {
			Role   string `json:"role"`
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
	} `json:"plan"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Report *struct {
		Pass        bool `json:"pass"`
		Descriptors []struct {
			CapabilityID string `json:"capabilityId"`
		} `json:"descriptors"`
	} `json:"report"`
	Publication *struct {
		Room  string `json:"room"`
		State string `json:"state"`
	} `json:"publication"`
}

// proposalsPolicy allows proposals and every call.
const proposalsPolicy = `{"name":"agents-propose","default":"allow","proposals":"allow"}`

// writeOwnedFile writes a file only its owner may write, as a policy file must be.
func writeOwnedFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// openProposing opens generation g of session id on cwd with a policy file whose document
// is doc.
func openProposing(t *testing.T, c *client.Client, id string, g int64, cwd, doc string) {
	t.Helper()
	p := openPayload(cwd)
	p["policy"] = map[string]any{"file": writeOwnedFile(t, "policy.json", doc)}
	if r := call(t, c, client.Command{Operation: "open", SessionID: id, Generation: gen(g), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
}

func propose(t *testing.T, c *client.Client, id string, g int64, p map[string]any) (*client.Response, proposalView) {
	t.Helper()
	r := call(t, c, client.Command{Operation: "proposeAdapter", SessionID: id, Generation: gen(g), Payload: map[string]any{"proposal": p}})
	var v proposalView
	if r.OK {
		if err := r.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return r, v
}

func listProposals(t *testing.T, c *client.Client, id string, g int64) []proposalView {
	t.Helper()
	cmd := client.Command{Operation: "listProposals"}
	if id != "" {
		cmd.SessionID, cmd.Generation = id, gen(g)
	}
	var l struct {
		Proposals []proposalView `json:"proposals"`
	}
	if err := call(t, c, cmd).Decode(&l); err != nil {
		t.Fatal(err)
	}
	return l.Proposals
}

// counterWorkspace writes daemontest.CounterAdapter into a new workspace as counter.py.
func counterWorkspace(t *testing.T) (cwd, script string) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	cwd = t.TempDir()
	script = filepath.Join(cwd, "counter.py")
	if err := os.WriteFile(script, []byte(daemontest.CounterAdapter), 0o600); err != nil {
		t.Fatal(err)
	}
	return cwd, script
}

func counterProposal() map[string]any {
	return map[string]any{"name": "counter", "command": "python3", "args": []string{"counter.py"},
		"capabilities": []string{"agent_counter"}, "reason": "count things for the user"}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestBinaryProposalRefusals: a session whose policy does not allow proposals gets
// proposals_not_allowed; with it, every malformed or escaping proposal is refused with its
// code and field, nothing of it runs, and a valid one waits in pending_run showing the
// SHA-256 of each file that will run.
func TestBinaryProposalRefusals(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: slowAdapterStart})
	c := d.Dial()
	cwd, script := counterWorkspace(t)
	outside := filepath.Join(t.TempDir(), "outside.py")
	if err := os.WriteFile(outside, []byte(daemontest.CounterAdapter), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(cwd, "link.py")); err != nil {
		t.Fatal(err)
	}

	// No policy, and a policy without the switch: no proposals.
	if r := call(t, c, client.Command{Operation: "open", SessionID: "plain", Generation: gen(1), Payload: openPayload(cwd)}); !r.OK {
		t.Fatal(r.Err())
	}
	if r, _ := propose(t, c, "plain", 1, counterProposal()); code(r) != "proposals_not_allowed" {
		t.Fatalf("no policy: %s", code(r))
	}
	openProposing(t, c, "strict", 1, cwd, `{"default":"allow"}`)
	if r, _ := propose(t, c, "strict", 1, counterProposal()); code(r) != "proposals_not_allowed" {
		t.Fatalf("a policy without proposals: %s", code(r))
	}

	openProposing(t, c, "agent", 1, cwd, proposalsPolicy)
	for _, tc := range []struct {
		name   string
		change func(p map[string]any)
		code   string
		field  string
	}{
		{"unknown key", func(p map[string]any) { p["passEnv"] = []string{"OPENAI_API_KEY"} }, "proposal_invalid", "proposal.passEnv"},
		{"long name", func(p map[string]any) { p["name"] = strings.Repeat("a", 65) }, "proposal_invalid", "proposal.name"},
		{"outside", func(p map[string]any) { p["args"] = []string{outside} }, "proposal_outside_workspace", "proposal.args[0]"},
		{"symlink", func(p map[string]any) { p["args"] = []string{"link.py"} }, "proposal_outside_workspace", "proposal.args[0]"},
		{"dot dot", func(p map[string]any) { p["args"] = []string{"counter.py", "../x"} }, "proposal_outside_workspace", "proposal.args[1]"},
		{"env wrapper", func(p map[string]any) { p["command"], p["args"] = "env", []string{"python3", "counter.py"} }, "proposal_env_refused", "proposal.command"},
		{"assignment", func(p map[string]any) { p["args"] = []string{"counter.py", "TOKEN=canary-51c2"} }, "proposal_env_refused", "proposal.args[1]"},
		{"inline code", func(p map[string]any) { p["args"] = []string{"-c", "print(1)"} }, "proposal_inline_code", "proposal.args[0]"},
		{"system command", func(p map[string]any) { p["command"], p["args"] = "curl", []string{"http://example.com"} }, "proposal_outside_workspace", "proposal.command"},
	} {
		p := counterProposal()
		tc.change(p)
		r, _ := propose(t, c, "agent", 1, p)
		if code(r) != tc.code || r.Error.Details["field"] != tc.field {
			t.Errorf("%s: %s %v, want %s at %s", tc.name, code(r), r.Err(), tc.code, tc.field)
		}
		if strings.Contains(d.Stderr(), "canary-51c2") {
			t.Fatalf("%s: the daemon log holds an argv secret", tc.name)
		}
	}
	if r := call(t, c, client.Command{Operation: "proposeAdapter", SessionID: "agent", Generation: gen(1), Payload: map[string]any{}}); code(r) != "invalid_field" {
		t.Fatalf("no proposal: %s", code(r))
	}

	r, v := propose(t, c, "agent", 1, counterProposal())
	if !r.OK {
		t.Fatal(r.Err())
	}
	python, _ := exec.LookPath("python3")
	if v.State != "pending_run" || len(v.ID) != 24 || v.Plan.Command != python || len(v.Plan.Files) != 2 ||
		v.Plan.Files[0].Role != "executable" || v.Plan.Files[0].SHA256 != fileSum(t, python) ||
		v.Plan.Files[1].Role != "script" || v.Plan.Files[1].SHA256 != fileSum(t, script) {
		t.Fatalf("proposed: %+v", v)
	}
	// A second proposal of the same name while the first is in progress is refused.
	if r, _ := propose(t, c, "agent", 1, counterProposal()); code(r) != "proposal_name_taken" {
		t.Fatalf("the same name twice: %s", code(r))
	}
	if l := listProposals(t, c, "agent", 1); len(l) != 1 || l[0].ID != v.ID || l[0].State != "pending_run" {
		t.Fatalf("listProposals: %+v", l)
	}
	if l := listProposals(t, c, "strict", 1); len(l) != 0 {
		t.Fatalf("another session's proposals: %+v", l)
	}
	if r := call(t, c, client.Command{Operation: "listProposals", Payload: map[string]any{"id": strings.Repeat("0", 24)}}); code(r) != "unknown_proposal" {
		t.Fatalf("an unknown id: %s", code(r))
	}
	// Eight proposals of a generation may wait at once.
	for i := 2; i <= 8; i++ {
		p := counterProposal()
		p["name"] = "counter" + strconv.Itoa(i)
		if r, _ := propose(t, c, "agent", 1, p); !r.OK {
			t.Fatalf("proposal %d: %v", i, r.Err())
		}
	}
	p := counterProposal()
	p["name"] = "counter9"
	if r, _ := propose(t, c, "agent", 1, p); code(r) != "too_many_proposals" || !r.Error.Retryable {
		t.Fatalf("a ninth proposal: %v", r.Err())
	}
	// Nothing ran: no adapter is registered, and no child of the script runs.
	if m := listAdapters(t, c); len(m) != 0 {
		t.Fatalf("adapters before any approval: %+v", m)
	}

	// The generation's end ends the proposal.
	if r := call(t, c, client.Command{Operation: "close", SessionID: "agent", Generation: gen(1), Payload: map[string]any{"retainSession": true}}); !r.OK {
		t.Fatal(r.Err())
	}
	if !daemontest.WaitFor(10*time.Second, func() bool {
		l := listProposals(t, c, "", 0)
		for _, p := range l {
			if p.ID == v.ID {
				return p.State == "ended"
			}
		}
		return false
	}) {
		t.Fatalf("after close: %+v", listProposals(t, c, "", 0))
	}
	if m := listAdapters(t, c); len(m) != 0 {
		t.Fatalf("adapters after the generation ended: %+v", m)
	}
}

// TestHostPolicyDeniesProposals: the host's policy saying "proposals": "deny" refuses every
// session's proposal, a session whose own policy allows them included (the stricter wins).
func TestHostPolicyDeniesProposals(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--policy", writeOwnedFile(t, "host.json", `{"default":"allow","proposals":"deny"}`)}})
	c := d.Dial()
	openProposing(t, c, "agent", 1, t.TempDir(), proposalsPolicy)
	r, _ := propose(t, c, "agent", 1, counterProposal())
	if code(r) != "proposals_not_allowed" || !strings.Contains(r.Error.Message, "host's policy") {
		t.Fatalf("a proposal under a host policy that denies them: %+v", r.Error)
	}
	if l := listProposals(t, c, "", 0); len(l) != 0 {
		t.Fatalf("proposals kept: %+v", l)
	}
}
