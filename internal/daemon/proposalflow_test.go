package daemon

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// flowDaemon is an in-process daemon whose proposals wait on its approval queue, decided
// here by the test as the operator.
type flowDaemon struct {
	t *testing.T
	d *Daemon
	c *client.Client
	q *approval.Queue
}

func startFlowDaemon(t *testing.T) *flowDaemon {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	root := daemontest.ShortDir(t)
	d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state"),
		Adapters: capclient.Options{StartTimeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	waitReady(t, d)
	q := d.Approvals()
	c, err := client.Dial(context.Background(), d.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &flowDaemon{t: t, d: d, c: c, q: q}
}

func (f *flowDaemon) call(cmd client.Command) *client.Response {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := f.c.Call(ctx, cmd)
	if err != nil {
		f.t.Fatalf("%s: %v", cmd.Operation, err)
	}
	return r
}

// open opens generation 1 of session id on cwd with a policy that allows proposals.
func (f *flowDaemon) open(id, cwd string) {
	f.t.Helper()
	pol := filepath.Join(f.t.TempDir(), "policy.json")
	if err := os.WriteFile(pol, []byte(`{"default":"allow","proposals":"allow"}`), 0o600); err != nil {
		f.t.Fatal(err)
	}
	g := int64(1)
	r := f.call(client.Command{Operation: "open", SessionID: id, Generation: &g, Payload: map[string]any{
		"cwd": cwd, "session": map[string]any{"mode": "new"}, "policy": map[string]any{"file": pol},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none",
			"themes": "none", "contextFiles": "none", "tools": "none"}}})
	if !r.OK {
		f.t.Fatalf("open: %v", r.Err())
	}
}

func (f *flowDaemon) propose(id string, p map[string]any) ProposalStatus {
	f.t.Helper()
	g := int64(1)
	var st ProposalStatus
	if err := f.call(client.Command{Operation: "proposeAdapter", SessionID: id, Generation: &g,
		Payload: map[string]any{"proposal": p}}).Decode(&st); err != nil {
		f.t.Fatalf("proposeAdapter: %v", err)
	}
	return st
}

// pending waits for the queue's request of kind for adapter name.
func (f *flowDaemon) pending(kind approval.Kind, name string) approval.Entry {
	f.t.Helper()
	var got approval.Entry
	if !daemontest.WaitFor(20*time.Second, func() bool {
		for _, e := range f.q.Pending() {
			if e.Kind == kind && e.Target == "adapter "+name {
				got = e
				return true
			}
		}
		return false
	}) {
		f.t.Fatalf("no %s request for adapter %s: %+v", kind, name, f.q.Pending())
	}
	return got
}

// state waits until proposal id is in one of states, and returns it.
func (f *flowDaemon) state(id string, states ...string) ProposalStatus {
	f.t.Helper()
	var last ProposalStatus
	if !daemontest.WaitFor(60*time.Second, func() bool {
		l, err := f.d.srv.proposals.list("", 0, id)
		if err != nil {
			f.t.Fatal(err)
		}
		last = l.Proposals[0]
		for _, s := range states {
			if last.State == s {
				return true
			}
		}
		return false
	}) {
		f.t.Fatalf("proposal %s never reached %v: %+v", id, states, last)
	}
	return last
}

func counterDir(t *testing.T) string {
	t.Helper()
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "counter.py"), []byte(daemontest.CounterAdapter), 0o600); err != nil {
		t.Fatal(err)
	}
	return cwd
}

func counterProposal(name string) map[string]any {
	return map[string]any{"name": name, "command": "python3", "args": []string{"counter.py"}, "capabilities": []string{"agent_counter"}}
}

// TestProposalRunsOnlyAfterApproval: the run request shows the command, argv and the
// SHA-256 of each file; once approved, the validator runs, its report is kept, and the
// adapter registers tied to the session generation, serves, and goes with the generation.
func TestProposalRunsOnlyAfterApproval(t *testing.T) {
	f := startFlowDaemon(t)
	cwd := counterDir(t)
	f.open("agent", cwd)
	st := f.propose("agent", counterProposal("counter"))
	e := f.pending(approval.KindRun, "counter")
	var det runDetail
	if err := json.Unmarshal(e.Detail, &det); err != nil {
		t.Fatal(err)
	}
	python, _ := exec.LookPath("python3")
	if det.Proposal != st.ID || det.Command != python || len(det.Files) != 2 || det.Files[1].SHA256 != st.Plan.Files[1].SHA256 ||
		e.Actor.Session != "agent" || e.Actor.Generation != 1 || e.Rememberable || e.Reason != proposalReason {
		t.Fatalf("the run request: %+v %+v", e, det)
	}
	if len(f.d.srv.adapters.sup.Status()) != 0 {
		t.Fatal("an adapter runs before the approval")
	}
	if err := f.q.Approve(e.ID, "cli", false); err != nil {
		t.Fatal(err)
	}
	got := f.state(st.ID, ProposalRunning, ProposalFailed, ProposalEnded)
	if got.State != ProposalRunning || got.Report == nil || !got.Report.Pass || len(got.Report.Descriptors) != 1 {
		t.Fatalf("after approval: %+v", got)
	}
	a, ok := f.d.srv.adapters.status("counter")
	if !ok || a.Session != "agent" || a.Generation != 1 || a.LeaseExpires.IsZero() {
		t.Fatalf("the registration: %+v", a)
	}
	r := f.call(client.Command{Operation: "invokeCapability", Payload: map[string]any{"capabilityId": "agent_counter", "action": "bump", "args": map[string]any{"by": 2}}})
	if !r.OK || !strings.Contains(string(r.Data), `"count":2`) {
		t.Fatalf("invoke: %v %s", r.Err(), r.Data)
	}
	g := int64(1)
	if r := f.call(client.Command{Operation: "close", SessionID: "agent", Generation: &g, Payload: map[string]any{"retainSession": true}}); !r.OK {
		t.Fatal(r.Err())
	}
	if _, ok := f.d.srv.adapters.status("counter"); ok {
		t.Fatal("the adapter outlived its session generation")
	}
	if got := f.state(st.ID, ProposalEnded); got.Error == nil || got.Error.Code != capclient.ReasonSessionEnded {
		t.Fatalf("after close: %+v", got)
	}
}

// TestProposalChangedAfterApprovalDoesNotRun: a script changed between the proposal and the
// approval fails adapter_changed, and nothing of it runs (the changed script would leave a
// marker file); a denied proposal is refused approval_denied and runs nothing either.
func TestProposalChangedAfterApprovalDoesNotRun(t *testing.T) {
	f := startFlowDaemon(t)
	cwd := counterDir(t)
	f.open("agent", cwd)
	st := f.propose("agent", counterProposal("counter"))
	e := f.pending(approval.KindRun, "counter")
	marker := filepath.Join(cwd, "ran")
	swapped := "open(" + strconvQuote(marker) + ", 'w').close()\n" + daemontest.CounterAdapter
	if err := os.WriteFile(filepath.Join(cwd, "counter.py"), []byte(swapped), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.q.Approve(e.ID, "cli", false); err != nil {
		t.Fatal(err)
	}
	got := f.state(st.ID, ProposalRunning, ProposalFailed, ProposalEnded)
	if got.State != ProposalFailed || got.Error == nil || got.Error.Code != "adapter_changed" || got.Report != nil {
		t.Fatalf("a changed script: %+v", got)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the changed script ran: %v", err)
	}
	if len(f.d.srv.adapters.sup.Status()) != 0 {
		t.Fatal("a changed proposal registered")
	}

	// Denied: refused, and nothing ran.
	st = f.propose("agent", counterProposal("counter2"))
	e = f.pending(approval.KindRun, "counter2")
	if err := f.q.Deny(e.ID, "cli"); err != nil {
		t.Fatal(err)
	}
	got = f.state(st.ID, ProposalRefused)
	if got.Error == nil || got.Error.Code != "approval_denied" {
		t.Fatalf("denied: %+v", got)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) || len(f.d.srv.adapters.sup.Status()) != 0 {
		t.Fatalf("a denied proposal ran: %v", err)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestProposalValidationRefusals: what the validator does not pass never registers, and only
// what it saw can be published. An adapter that fails a probe is proposal_validation_failed
// with the report; one serving another capability than proposed proposal_missing_capability;
// a publication of an action the validator did not see fails proposal_unvalidated, and a
// denied publication is refused, while the adapter keeps serving the session.
func TestProposalValidationRefusals(t *testing.T) {
	f := startFlowDaemon(t)
	cwd := counterDir(t)
	// Its list answers, its stdin close is ignored: the stdin_close probe fails.
	broken := "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" +
		strings.Replace(daemontest.CounterAdapter, "for line in sys.stdin:", "import time\nfor line in iter(sys.stdin.readline, None):\n    if not line:\n        time.sleep(3600)", 1)
	if err := os.WriteFile(filepath.Join(cwd, "broken.py"), []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	f.open("agent", cwd)
	approveRun := func(name string, p map[string]any, states ...string) ProposalStatus {
		t.Helper()
		st := f.propose("agent", p)
		if err := f.q.Approve(f.pending(approval.KindRun, name).ID, "cli", false); err != nil {
			t.Fatal(err)
		}
		return f.state(st.ID, states...)
	}

	p := counterProposal("broken")
	p["args"] = []string{"broken.py"}
	got := approveRun("broken", p, ProposalFailed, ProposalRunning, ProposalEnded)
	if got.State != ProposalFailed || got.Error == nil || got.Error.Code != "proposal_validation_failed" || got.Report == nil || got.Report.Pass {
		t.Fatalf("a broken adapter: %+v", got)
	}
	if probe, ok := got.Report.Probe("stdin_close"); !ok || probe.Pass {
		t.Fatalf("the report: %+v", got.Report)
	}

	p = counterProposal("other")
	p["capabilities"] = []string{"other_counter"}
	got = approveRun("other", p, ProposalFailed, ProposalRunning, ProposalEnded)
	if got.State != ProposalFailed || got.Error == nil || got.Error.Code != "proposal_missing_capability" {
		t.Fatalf("another capability: %+v", got)
	}
	if len(f.d.srv.adapters.sup.Status()) != 0 {
		t.Fatal("an adapter the validator refused is registered")
	}

	p = counterProposal("unseen")
	p["publish"] = map[string]any{"room": "home", "capabilities": []map[string]any{{"capabilityId": "agent_counter", "actions": []string{"reset"}}}}
	got = approveRun("unseen", p, ProposalRunning, ProposalFailed, ProposalEnded)
	if got.State != ProposalRunning || got.Publication == nil || got.Publication.State != "failed" || got.Publication.Error.Code != "proposal_unvalidated" {
		t.Fatalf("an unseen action: %+v %+v", got, got.Publication)
	}
	if _, ok := f.d.srv.adapters.status("unseen"); !ok {
		t.Fatal("the adapter stopped with its publication")
	}
	if r := f.call(client.Command{Operation: "removeAdapter", Payload: map[string]any{"name": "unseen"}}); !r.OK {
		t.Fatal(r.Err())
	}
	if got := f.state(got.ID, ProposalEnded); got.Error.Code != capclient.ReasonRemoved {
		t.Fatalf("removed by the operator: %+v", got)
	}

	p = counterProposal("denied")
	p["publish"] = map[string]any{"room": "home", "capabilities": []map[string]any{{"capabilityId": "agent_counter", "actions": []string{"bump"}}}}
	st := f.propose("agent", p)
	if err := f.q.Approve(f.pending(approval.KindRun, "denied").ID, "cli", false); err != nil {
		t.Fatal(err)
	}
	pub := f.pending(approval.KindPublish, "denied")
	var det publishDetail
	if err := json.Unmarshal(pub.Detail, &det); err != nil || det.Report == nil || !det.Report.Pass || len(det.Descriptors) != 1 {
		t.Fatalf("the publish request: %v %s", err, pub.Detail)
	}
	if got := f.state(st.ID, ProposalPendingPublish); got.Publication.State != "pending" {
		t.Fatalf("pending publish: %+v", got.Publication)
	}
	if err := f.q.Deny(pub.ID, "cli"); err != nil {
		t.Fatal(err)
	}
	if !daemontest.WaitFor(20*time.Second, func() bool {
		l, _ := f.d.srv.proposals.list("", 0, st.ID)
		got = l.Proposals[0]
		return got.Publication.State != "pending"
	}) || got.State != ProposalRunning || got.Publication.State != "refused" || got.Publication.Error.Code != "approval_denied" {
		t.Fatalf("a denied publication: %+v %+v", got, got.Publication)
	}
}
