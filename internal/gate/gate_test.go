package gate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
)

type recorder struct {
	mu      sync.Mutex
	before  []string
	after   []Outcome
	failing bool
}

func (r *recorder) Before(_ context.Context, c *Call) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.before = append(r.before, c.Target())
	if r.failing {
		return errors.New("disk full")
	}
	return nil
}

func (r *recorder) After(_ *Call, o Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after = append(r.after, o)
}

func mustParse(t *testing.T, doc string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckOrderAndStricterPolicy(t *testing.T) {
	host := mustParse(t, `{"default":"allow","rules":[{"capability":"lamp","decision":"deny"}]}`)
	sess := mustParse(t, `{"default":"allow","rules":[{"operations":["fs.write"],"paths":["src/**"],"decision":"allow"},{"operations":["fs.write"],"decision":"ask"}]}`)
	rec := &recorder{}
	g := New(Config{Host: host, Hooks: []Hook{rec}})
	ctx := context.Background()

	c := &Call{Actor: Actor{Door: DoorSocket}, Kind: KindTool, Operation: "fs.write", Path: "src/a.go"}
	if e := g.Check(ctx, c, sess); e != nil {
		t.Fatalf("allowed write refused: %v", e)
	}
	g.Done(c, "")

	c = &Call{Actor: Actor{Door: DoorTurn}, Kind: KindTool, Operation: "fs.write", Path: "README"}
	if e := g.Check(ctx, c, sess); e == nil || e.Code != CodeApprovalRequired || e.Details["rule"] != 2 || e.Details["policy"] != PolicySession {
		t.Fatalf("ask: %v", e)
	}
	c = &Call{Actor: Actor{Door: DoorRoom}, Kind: KindInvoke, Capability: "lamp", Action: "on"}
	if e := g.Check(ctx, c, nil); e == nil || e.Code != CodePolicyDenied || CodeOf(e) != CodePolicyDenied || e.Details["policy"] != PolicyHost {
		t.Fatalf("host deny: %v", e)
	}
	// The session's policy cannot loosen the host's.
	loose := mustParse(t, `{"default":"allow"}`)
	c = &Call{Actor: Actor{Door: DoorMCP}, Kind: KindObserve, Capability: "lamp"}
	if e := g.Check(ctx, c, loose); e == nil || e.Code != CodePolicyDenied {
		t.Fatalf("observe lamp: %v", e)
	}
	if len(rec.before) != 1 || rec.before[0] != "fs.write" {
		t.Fatalf("Before saw %v: refused calls must not reach it", rec.before)
	}
	want := []Outcome{{Stage: StageAdapter}, {Stage: StagePolicy, Code: CodeApprovalRequired}, {Stage: StagePolicy, Code: CodePolicyDenied}, {Stage: StagePolicy, Code: CodePolicyDenied}}
	if len(rec.after) != len(want) {
		t.Fatalf("After saw %+v", rec.after)
	}
	for i := range want {
		if rec.after[i].Stage != want[i].Stage || rec.after[i].Code != want[i].Code {
			t.Fatalf("After[%d] = %+v, want %+v", i, rec.after[i], want[i])
		}
	}
}

func TestBeforeFailureRefuses(t *testing.T) {
	rec := &recorder{failing: true}
	g := New(Config{Hooks: []Hook{rec}})
	c := &Call{Kind: KindInvoke, Capability: "printer", Action: "print"}
	e := g.Check(context.Background(), c, nil)
	if e == nil || e.Code != CodeRecordFailed || !e.Retryable {
		t.Fatalf("Check = %v", e)
	}
	if len(rec.after) != 1 || rec.after[0].Stage != StageRecord {
		t.Fatalf("After %+v", rec.after)
	}
}

// TestRefuseReportsTheDoorsRefusal: a refusal of the door's own checks reaches every
// hook's After once, with StageGrant and its code, and never Before.
func TestRefuseReportsTheDoorsRefusal(t *testing.T) {
	a, b := &recorder{}, &recorder{}
	g := New(Config{Hooks: []Hook{a}})
	g.AddHook(b)
	g.Refuse(&Call{Actor: Actor{Door: DoorTurn}, Kind: KindTool, Operation: "fs.read"}, "path_outside_cwd")
	for _, r := range []*recorder{a, b} {
		if len(r.before) != 0 || len(r.after) != 1 || r.after[0] != (Outcome{Stage: StageGrant, Code: "path_outside_cwd"}) {
			t.Fatalf("hook saw before %v, after %+v", r.before, r.after)
		}
	}
	New(Config{}).Refuse(&Call{}, "x") // no hooks: nothing to tell
}

func TestAddHookAndExecutable(t *testing.T) {
	g := New(Config{})
	c := &Call{Kind: KindTool, Operation: "fs.read", Path: "a"}
	if e := g.Check(context.Background(), c, nil); e != nil || !c.Started.IsZero() {
		t.Fatalf("no hooks: %v, started %v", e, c.Started)
	}
	rec := &recorder{}
	g.AddHook(rec)
	if e := g.Check(context.Background(), c, nil); e != nil {
		t.Fatal(e)
	}
	g.Done(c, "not_found")
	if len(rec.after) != 1 || rec.after[0].Code != "not_found" {
		t.Fatalf("After %+v", rec.after)
	}
	if (Actor{PID: 1 << 30}).Executable() != "" || (Actor{}).Executable() != "" {
		t.Fatal("Executable of no process")
	}
}

// BenchmarkCheck is the gate's own cost per call: the trivial path (no policy, no hooks)
// and an allow decided by a host policy's rules (a non-matching deny rule on a path glob,
// then an allow rule), as BenchmarkInvokeToolPolicy's daemon decides it.
func BenchmarkCheck(b *testing.B) {
	p, err := policy.Parse([]byte(`{"default":"ask","rules":[
		{"operations":["fs.read","fs.stat"],"paths":[".env*","**/.env*"],"decision":"deny"},
		{"operations":["fs.stat","fs.list"],"decision":"allow"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		host *policy.Policy
	}{{"none", nil}, {"allow-rule", p}} {
		b.Run(bc.name, func(b *testing.B) {
			g := New(Config{Host: bc.host})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				c := Call{Kind: KindTool, Operation: "fs.stat", Path: "src/main.go"}
				if e := g.Check(ctx, &c, nil); e != nil {
					b.Fatal(e)
				}
				g.Done(&c, "")
			}
		})
	}
}

type askAll struct{}

func (askAll) AskCall(context.Context, *Call) (Approval, *protocol.Error) {
	return Approval{ID: "x", By: "cli"}, nil
}

// TestMayAsk: only a gate with an approver may wait, and only when the host's or the
// session's policy can answer ask for the call, whatever an fs call's path.
func TestMayAsk(t *testing.T) {
	sess := mustParse(t, `{"default":"allow","rules":[
		{"operations":["fs.read"],"decision":"allow"},
		{"operations":["fs.write"],"paths":["src/**"],"decision":"allow"},
		{"operations":["fs.write","fs.read"],"decision":"ask"},
		{"capability":"printer","actions":["print"],"decision":"ask"}]}`)
	write := &Call{Kind: KindTool, Operation: "fs.write", Path: "src/a.go"}
	read := &Call{Kind: KindTool, Operation: "fs.read"}
	print := &Call{Kind: KindInvoke, Capability: "printer", Action: "print"}
	status := &Call{Kind: KindObserve, Capability: "printer"}
	g := New(Config{})
	if g.MayAsk(write, sess) || g.MayAsk(print, sess) {
		t.Fatal("a gate without an approver may ask")
	}
	g.SetApprover(askAll{})
	for _, tc := range []struct {
		c    *Call
		sess *policy.Policy
		want bool
	}{
		{write, sess, true}, // src/** is allowed, but another path asks
		{read, sess, false}, // an unconditional allow comes first
		{print, sess, true},
		{status, sess, false},
		{write, nil, false},
	} {
		if got := g.MayAsk(tc.c, tc.sess); got != tc.want {
			t.Errorf("MayAsk(%s, session %v) = %v", tc.c.Target(), tc.sess != nil, got)
		}
	}
	host := New(Config{Host: mustParse(t, `{"default":"ask"}`), Approver: askAll{}})
	if !host.MayAsk(read, nil) || !host.MayAsk(status, nil) {
		t.Error("the host's ask default does not make calls wait")
	}
}

// A Peer reads its process's executable once: after the process is gone, every call of its
// connection still names it, where a fresh read finds nothing.
func TestPeerReadsTheExecutableOnce(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	p := NewPeer(pid)
	a := Actor{PID: pid, Peer: p}
	var wg sync.WaitGroup
	exes := make([]string, 4)
	for i := range exes {
		wg.Go(func() { exes[i] = a.Executable() })
	}
	wg.Wait()
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || want == "" {
		t.Fatalf("readlink: %q %v", want, err)
	}
	for _, e := range exes {
		if e != want {
			t.Fatalf("Executable %q, want %q", e, want)
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // reaped: its /proc entry is gone
	if got := (Actor{PID: pid}).Executable(); got != "" {
		t.Fatalf("a process that is gone: %q", got)
	}
	if got := a.Executable(); got != want {
		t.Fatalf("after the process ended: %q, want the first read %q", got, want)
	}
	if NewPeer(0).Executable() != "" {
		t.Fatal("Executable of no process")
	}
}

// Describe names the door and what of the actor applies to it, in the approval listings'
// form.
func TestActorDescribe(t *testing.T) {
	for _, c := range []struct {
		a    Actor
		want string
	}{
		{Actor{Door: DoorMCP, Client: "claude", Session: "s1", Generation: 3, PID: 42}, "mcp client claude · session s1 generation 3 · pid 42"},
		{Actor{Door: DoorTurn, Session: "agent", Generation: 1}, "agent turn · session agent generation 1"},
		{Actor{Door: DoorSocket, PID: 7}, "owner socket · pid 7"},
		{Actor{Door: DoorRoom, Room: "kitchen", Host: "h1", Session: "ignored"}, "room kitchen · host h1"},
	} {
		if got := c.a.Describe(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.a, got, c.want)
		}
	}
}
