package approval

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events records a queue's events.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) types() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.evs {
		out = append(out, ev.Type)
	}
	return out
}

func code(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	if err != nil {
		return "uncoded: " + err.Error()
	}
	return ""
}

var session = gate.Actor{Door: gate.DoorMCP, Session: "s1", Generation: 3, Client: "claude"}

func write(path string) Request {
	return Request{Kind: KindCall, Actor: session, Target: "fs.write", Path: path,
		Args: json.RawMessage(`{"path": "` + path + `", "content": "x"}`), Reason: "session policy rule 1", Rememberable: true}
}

// asked starts r in a goroutine and returns its id, once it waits, and its outcome.
func asked(t *testing.T, q *Queue, ctx context.Context, r Request) (string, <-chan error) {
	t.Helper()
	before := map[string]bool{}
	for _, e := range q.Pending() {
		before[e.ID] = true
	}
	done := make(chan error, 1)
	go func() {
		_, err := q.Ask(ctx, r)
		done <- err
	}()
	synctest.Wait()
	for _, e := range q.Pending() {
		if !before[e.ID] {
			return e.ID, done
		}
	}
	t.Fatal("the request does not wait")
	return "", nil
}

func TestApproveDenyTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		q := NewQueue(Config{OnEvent: ev.add})
		ctx := context.Background()

		id, done := asked(t, q, ctx, write("src/a.go"))
		p := q.Pending()
		if len(p) != 1 || p[0].ID != id || len(id) != 24 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("pending = %+v", p)
		}
		if p[0].Target != "fs.write" || p[0].Path != "src/a.go" || p[0].Actor != session || p[0].Reason == "" ||
			string(p[0].Args) != `{"path":"src/a.go","content":"x"}` || p[0].Deadline.Sub(p[0].Since) != DefaultTimeout {
			t.Fatalf("entry = %+v", p[0])
		}
		if err := q.Approve(id, ByCLI, false); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("approved: %v", err)
		}
		if err := q.Approve(id, ByCLI, false); code(err) != CodeUnknownApproval {
			t.Fatalf("second approve: %v", err)
		}

		id, done = asked(t, q, ctx, write("src/b.go"))
		if err := q.Deny(id, ByPage); err != nil {
			t.Fatal(err)
		}
		if err := <-done; code(err) != CodeApprovalDenied {
			t.Fatalf("denied: %v", err)
		}
		if err := q.Deny(id, ByPage); code(err) != CodeUnknownApproval {
			t.Fatalf("second deny: %v", err)
		}

		start := time.Now()
		_, done = asked(t, q, ctx, write("src/c.go"))
		if err := <-done; code(err) != CodeApprovalTimeout {
			t.Fatalf("nobody answered: %v", err)
		}
		if waited := time.Since(start); waited != DefaultTimeout {
			t.Fatalf("waited %v, want %v", waited, DefaultTimeout)
		}
		if len(q.Pending()) != 0 {
			t.Fatalf("still pending: %+v", q.Pending())
		}
		want := "asked approved asked denied asked timed_out"
		if got := strings.Join(ev.types(), " "); got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
	})
}

func TestTimeoutsConfigured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQueue(Config{Timeout: 2 * time.Second})
		start := time.Now()
		_, err := q.Ask(context.Background(), write("a"))
		if code(err) != CodeApprovalTimeout || time.Since(start) != 2*time.Second {
			t.Fatalf("queue timeout: %v after %v", err, time.Since(start))
		}
		r := write("a")
		r.Timeout = 5 * time.Second
		start = time.Now()
		if _, err := q.Ask(context.Background(), r); code(err) != CodeApprovalTimeout || time.Since(start) != 5*time.Second {
			t.Fatalf("request timeout: %v after %v", err, time.Since(start))
		}
		r.Timeout = time.Hour
		start = time.Now()
		if _, err := q.Ask(context.Background(), r); code(err) != CodeApprovalTimeout || time.Since(start) != MaxTimeout {
			t.Fatalf("bounded timeout: %v after %v", err, time.Since(start))
		}
		if q := NewQueue(Config{Timeout: time.Hour}); q.timeout != MaxTimeout {
			t.Fatalf("queue timeout %v not bounded", q.timeout)
		}
	})
}

func TestCallerGoneIsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		q := NewQueue(Config{OnEvent: ev.add})
		ctx, cancel := context.WithCancel(context.Background())
		id, done := asked(t, q, ctx, write("a"))
		cancel()
		err := <-done
		if code(err) != CodeApprovalTimeout || !strings.Contains(err.Error(), "stopped waiting") {
			t.Fatalf("cancelled: %v", err)
		}
		if err := q.Approve(id, ByCLI, false); code(err) != CodeUnknownApproval {
			t.Fatalf("approve after the caller left: %v", err)
		}
		if got := strings.Join(ev.types(), " "); got != "asked timed_out" {
			t.Fatalf("events %q", got)
		}
	})
}

func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQueue(Config{})
		ctx, cancel := context.WithCancel(context.Background())
		var dones []<-chan error
		for i := range MaxPending {
			_, d := asked(t, q, ctx, write("f"+string(rune('a'+i%26))))
			dones = append(dones, d)
		}
		_, err := q.Ask(ctx, write("one-more"))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != CodeQueueFull || !pe.Retryable {
			t.Fatalf("full queue: %v", err)
		}
		cancel()
		for _, d := range dones {
			<-d
		}
	})
}

func TestRememberPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		q := NewQueue(Config{OnEvent: ev.add})
		ctx := context.Background()

		id, done := asked(t, q, ctx, write("src/a.go"))
		if err := q.Approve(id, ByCLI, true); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mem := q.Remembered()
		if len(mem) != 1 || mem[0].Path != "src/a.go" || mem[0].Target != "fs.write" || mem[0].From != id ||
			mem[0].Scope != (Scope{Session: "s1", Generation: 3}) {
			t.Fatalf("memories = %+v", mem)
		}

		// The same path runs at once; another path, target, generation or session waits.
		d, err := q.Ask(ctx, write("src/a.go"))
		if err != nil || d.By != ByRemembered || !d.Remembered {
			t.Fatalf("remembered: %+v %v", d, err)
		}
		for name, r := range map[string]Request{
			"other path":       write("src/b.go"),
			"other target":     func() Request { r := write("src/a.go"); r.Target = "fs.edit"; return r }(),
			"other generation": func() Request { r := write("src/a.go"); r.Actor.Generation = 4; return r }(),
			"other session":    func() Request { r := write("src/a.go"); r.Actor.Session = "s2"; return r }(),
			"not rememberable": func() Request { r := write("src/a.go"); r.Rememberable = false; return r }(),
		} {
			id, done := asked(t, q, ctx, r)
			if err := q.Deny(id, ByCLI); err != nil {
				t.Fatal(name, err)
			}
			if err := <-done; code(err) != CodeApprovalDenied {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if q.Remembered()[0].Uses != 1 {
			t.Fatalf("uses = %d", q.Remembered()[0].Uses)
		}

		// A glob remembers a tree; it must match the call's own path.
		id, done = asked(t, q, ctx, write("docs/x.md"))
		if err := q.ApproveRemember(id, ByPage, Remember{Pattern: "src/**"}); code(err) != CodeNotRememberable {
			t.Fatalf("pattern not matching the call: %v", err)
		}
		if err := q.ApproveRemember(id, ByPage, Remember{Pattern: "docs/[*"}); code(err) != CodeNotRememberable {
			t.Fatalf("bad glob: %v", err)
		}
		if err := q.ApproveRemember(id, ByPage, Remember{AnyArgs: true}); code(err) != CodeNotRememberable {
			t.Fatalf("any args on an fs call: %v", err)
		}
		if err := q.ApproveRemember(id, ByPage, Remember{Pattern: "docs/**"}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d, err := q.Ask(ctx, write("docs/deep/y.md")); err != nil || d.By != ByRemembered {
			t.Fatalf("glob: %+v %v", d, err)
		}

		// Memories are revocable, and end with their generation.
		mem = q.Remembered()
		if err := q.Forget(mem[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := q.Forget(mem[0].ID); code(err) != CodeUnknownApproval {
			t.Fatalf("forget twice: %v", err)
		}
		id, done = asked(t, q, ctx, write("src/a.go"))
		_ = q.Deny(id, ByCLI)
		<-done
		q.End(Scope{Session: "s1", Generation: 2})
		q.End(Scope{Session: "s2"})
		if len(q.Remembered()) != 1 {
			t.Fatal("an older generation's or another session's end forgot a memory")
		}
		q.End(Scope{Session: "s1", Generation: 3})
		if len(q.Remembered()) != 0 {
			t.Fatalf("after the generation ended: %+v", q.Remembered())
		}
		id, done = asked(t, q, ctx, write("docs/z.md"))
		_ = q.Deny(id, ByCLI)
		<-done

		n := strings.Count(strings.Join(ev.types(), " "), EventForgotten)
		if n != 2 || !strings.Contains(strings.Join(ev.types(), " "), EventRemembered) {
			t.Fatalf("events %v", ev.types())
		}
	})
}

// TestEndRefusesWaiting: the end of a session generation refuses its waiting requests with
// approval_timeout (a timed_out event each) and leaves another session's waiting.
func TestEndRefusesWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		q := NewQueue(Config{OnEvent: ev.add})
		ctx := context.Background()
		_, mine := asked(t, q, ctx, write("a"))
		other := write("b")
		other.Actor.Session = "s2"
		otherID, theirs := asked(t, q, ctx, other)
		q.End(Scope{Session: "s1", Generation: 3})
		if err := <-mine; code(err) != CodeApprovalTimeout || !strings.Contains(err.Error(), "generation ended") {
			t.Fatalf("the ended generation's request: %v", err)
		}
		if p := q.Pending(); len(p) != 1 || p[0].ID != otherID {
			t.Fatalf("pending after the end: %+v", p)
		}
		_ = q.Approve(otherID, ByCLI, false)
		if err := <-theirs; err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(ev.types(), " "); got != "asked asked timed_out approved" {
			t.Fatalf("events %q", got)
		}
	})
}

func TestRememberArgs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQueue(Config{})
		ctx := context.Background()
		host := gate.Actor{Door: gate.DoorRoom, Room: "kitchen", Host: "h1"}
		print := func(args string) Request {
			return Request{Kind: KindCall, Actor: host, Target: "printer.print", Args: json.RawMessage(args),
				Reason: "room approve-each", Rememberable: true}
		}
		id, done := asked(t, q, ctx, print(`{"copies": 1}`))
		if err := q.ApproveRemember(id, ByCLI, Remember{Pattern: "*"}); code(err) != CodeNotRememberable {
			t.Fatalf("a path pattern on an action: %v", err)
		}
		if err := q.Approve(id, ByCLI, true); err != nil {
			t.Fatal(err)
		}
		<-done
		if d, err := q.Ask(ctx, print(`{"copies":1}`)); err != nil || d.By != ByRemembered {
			t.Fatalf("exact args (compacted): %+v %v", d, err)
		}
		id, done = asked(t, q, ctx, print(`{"copies":3,"duplex":true}`))
		if err := q.Approve(id, ByCLI, true); err != nil {
			t.Fatal(err)
		}
		<-done
		if d, err := q.Ask(ctx, print(`{ "duplex": true, "copies": 3 }`)); err != nil || d.By != ByRemembered {
			t.Fatalf("exact args in another order: %+v %v", d, err)
		}
		id, done = asked(t, q, ctx, print(`{"copies":4,"copies":5}`))
		if err := q.ApproveRemember(id, ByCLI, Remember{}); code(err) != CodeNotRememberable {
			t.Fatalf("remembering arguments with a duplicate key: %v", err)
		}
		_ = q.Deny(id, ByCLI)
		<-done
		id, done = asked(t, q, ctx, print(`{"copies":2}`))
		if err := q.ApproveRemember(id, ByCLI, Remember{AnyArgs: true}); err != nil {
			t.Fatal(err)
		}
		<-done
		if d, err := q.Ask(ctx, print(`{"copies":9}`)); err != nil || d.By != ByRemembered {
			t.Fatalf("any args: %+v %v", d, err)
		}
		other := print(`{"copies":9}`)
		other.Actor.Host = "h2"
		id, done = asked(t, q, ctx, other)
		_ = q.Deny(id, ByCLI)
		if err := <-done; code(err) != CodeApprovalDenied {
			t.Fatalf("another host: %v", err)
		}
		q.End(Scope{Room: "kitchen"})
		if len(q.Remembered()) != 0 {
			t.Fatal("the room's end kept memories")
		}
	})
}

func TestNotRememberable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQueue(Config{})
		ctx := context.Background()
		for name, tc := range map[string]struct {
			r   Request
			why string // what the refusal says
		}{
			"proposal":   {Request{Kind: KindRun, Actor: session, Target: "adapter lamp", Detail: json.RawMessage(`{"command":"./lamp"}`), Reason: "agent proposal"}, "an adapter proposal is never remembered"},
			"no session": {Request{Kind: KindCall, Actor: gate.Actor{Door: gate.DoorSocket}, Target: "lamp.on", Reason: "host policy", Rememberable: true}, "only a call with a session or a room"},
		} {
			id, done := asked(t, q, ctx, tc.r)
			if err := q.Approve(id, ByCLI, true); code(err) != CodeNotRememberable || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("%s: %v", name, err)
			}
			if len(q.Pending()) != 1 {
				t.Fatalf("%s: a refused remember decided the request", name)
			}
			if err := q.Approve(id, ByCLI, false); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(name, err)
			}
		}
	})
}

func TestArgsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQueue(Config{})
		r := write("big")
		r.Args = json.RawMessage(`{"content":"` + strings.Repeat("é", MaxArgsBytes) + `"}`)
		id, done := asked(t, q, context.Background(), r)
		e := q.Pending()[0]
		var shown string
		if !e.ArgsTruncated || e.ArgsBytes != len(r.Args) || len(e.ArgsDigest) != 64 ||
			json.Unmarshal(e.Args, &shown) != nil || len(shown) > MaxArgsBytes || !strings.HasPrefix(shown, `{"content":"éé`) {
			t.Fatalf("entry: truncated=%v bytes=%d shown %d bytes", e.ArgsTruncated, e.ArgsBytes, len(shown))
		}
		// The entry is a copy: the caller's buffer may change.
		r.Args[2] = 'X'
		if q.Pending()[0].Args[2] == 'X' {
			t.Fatal("the entry shares the caller's args")
		}
		_ = q.Deny(id, ByCLI)
		<-done

		big := write("x")
		big.Detail = json.RawMessage(`"` + strings.Repeat("a", MaxDetailBytes) + `"`)
		if _, err := q.Ask(context.Background(), big); code(err) != protocol.CodeInvalidField {
			t.Fatalf("oversized detail: %v", err)
		}
	})
}

func TestDecisionNamesWho(t *testing.T) {
	q := NewQueue(Config{})
	if err := q.Approve("000000000000000000000000", "", false); code(err) != protocol.CodeInvalidField {
		t.Fatalf("no decider: %v", err)
	}
	if err := q.Approve("000000000000000000000000", ByRemembered, false); code(err) != protocol.CodeInvalidField {
		t.Fatalf("a human is not remembered: %v", err)
	}
}

// TestGateWaits runs the queue as the gate's approver: an ask verdict waits, an approval
// admits the call (the Before hooks run after the wait), a denial is reported to the hooks'
// After at StageApproval and never reaches Before.
func TestGateWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := policy.Parse([]byte(`{"default":"allow","rules":[{"operations":["fs.write"],"decision":"ask","why":"writes"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		h := &hook{}
		q := NewQueue(Config{})
		g := gate.New(gate.Config{Hooks: []gate.Hook{h}, Approver: q})
		ctx := context.Background()
		call := func() (*gate.Call, chan *protocol.Error) {
			c := &gate.Call{Actor: session, Kind: gate.KindTool, Operation: "fs.write", Path: "a", Args: json.RawMessage(`{}`)}
			done := make(chan *protocol.Error, 1)
			go func() { done <- g.Check(ctx, c, p) }()
			synctest.Wait()
			return c, done
		}

		c, done := call()
		pend := q.Pending()
		if len(pend) != 1 || h.count() != 0 || pend[0].Reason != "session policy rule 1 (writes): ask fs.write" {
			t.Fatalf("pending %+v, hooks %d", pend, h.count())
		}
		_ = q.Approve(pend[0].ID, ByCLI, false)
		if e := <-done; e != nil {
			t.Fatal(e)
		}
		if c.Approval.ID != pend[0].ID || c.Approval.By != ByCLI || h.befores() != 1 {
			t.Fatalf("approval %+v, befores %d", c.Approval, h.befores())
		}
		g.Done(c, "")

		_, done = call()
		_ = q.Deny(q.Pending()[0].ID, ByCLI)
		e := <-done
		if e == nil || e.Code != CodeApprovalDenied || gate.CodeOf(e) != CodeApprovalDenied || h.befores() != 1 || h.lastStage() != gate.StageApproval {
			t.Fatalf("denied: %v, befores %d, stage %q", e, h.befores(), h.lastStage())
		}

		g.SetApprover(nil)
		if e := g.Check(ctx, &gate.Call{Actor: session, Kind: gate.KindTool, Operation: "fs.write"}, p); e == nil || e.Code != gate.CodeApprovalRequired {
			t.Fatalf("without an approver: %v", e)
		}
	})
}

type hook struct {
	mu     sync.Mutex
	before int
	after  []gate.Outcome
}

func (h *hook) Before(context.Context, *gate.Call) error {
	h.mu.Lock()
	h.before++
	h.mu.Unlock()
	return nil
}

func (h *hook) After(_ *gate.Call, o gate.Outcome) {
	h.mu.Lock()
	h.after = append(h.after, o)
	h.mu.Unlock()
}

func (h *hook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.before + len(h.after)
}

func (h *hook) befores() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.before
}

func (h *hook) lastStage() gate.Stage {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.after) == 0 {
		return ""
	}
	return h.after[len(h.after)-1].Stage
}

// TestAskedGoesOutBeforeItsDecision: a request is pending, and so decidable, just before its
// asked event goes out; a decision that comes in between (an operator who listed it at once)
// waits for that event, so that a listener sees asked before denied. So does the end of the
// request's scope. OnEvent is held inside asked to open the window.
func TestAskedGoesOutBeforeItsDecision(t *testing.T) {
	for _, end := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ev := &events{}
			inAsked, release := make(chan struct{}), make(chan struct{})
			q := NewQueue(Config{OnEvent: func(e Event) {
				if e.Type == EventAsked {
					close(inAsked)
					<-release
				}
				ev.add(e)
			}})
			done := make(chan error, 1)
			go func() {
				_, err := q.Ask(context.Background(), write("src/a.go"))
				done <- err
			}()
			<-inAsked
			decided := make(chan error, 1)
			go func() {
				if end {
					q.End(ScopeOf(session))
					decided <- nil
					return
				}
				decided <- q.Deny(q.Pending()[0].ID, ByCLI)
			}()
			synctest.Wait()
			if got := ev.types(); len(got) != 0 {
				close(release)
				<-decided
				<-done
				t.Fatalf("events while asked was still going out: %v", got)
			}
			close(release)
			if err := <-decided; err != nil {
				t.Fatal(err)
			}
			<-done
			want := []string{EventAsked, EventDenied}
			if end {
				want = []string{EventAsked, EventTimedOut}
			}
			if got := ev.types(); !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
		})
	}
}

// TestRememberReleasesTheWaitingItMatches: approving one request and remembering a pattern
// approves the requests already waiting that the pattern matches, recorded as remembered;
// one it does not match, and one of another session, still wait.
func TestRememberReleasesTheWaitingItMatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &events{}
		q := NewQueue(Config{OnEvent: ev.add})
		ctx := context.Background()
		first, firstDone := asked(t, q, ctx, write("src/a.go"))
		_, sameDone := asked(t, q, ctx, write("src/b.go"))
		other, otherDone := asked(t, q, ctx, write("docs/c.md"))
		elsewhere := write("src/d.go")
		elsewhere.Actor.Session = "s2"
		foreign, foreignDone := asked(t, q, ctx, elsewhere)

		if err := q.ApproveRemember(first, ByCLI, Remember{Pattern: "src/**"}); err != nil {
			t.Fatal(err)
		}
		if err := <-firstDone; err != nil {
			t.Fatalf("the approved request: %v", err)
		}
		if err := <-sameDone; err != nil {
			t.Fatalf("a waiting request the pattern matches: %v", err)
		}
		var waiting []string
		for _, e := range q.Pending() {
			waiting = append(waiting, e.ID)
		}
		slices.Sort(waiting)
		want := []string{other, foreign}
		slices.Sort(want)
		if !slices.Equal(waiting, want) {
			t.Fatalf("still waiting %v, want %v", waiting, want)
		}
		if m := q.Remembered(); len(m) != 1 || m[0].Uses != 1 {
			t.Fatalf("remembered %+v", m)
		}
		var byMemory int
		ev.mu.Lock()
		for _, e := range ev.evs {
			if e.Type == EventApproved && e.Decision.By == ByRemembered && e.Entry.Path == "src/b.go" {
				byMemory++
			}
		}
		ev.mu.Unlock()
		if byMemory != 1 {
			t.Fatalf("events %v", ev.types())
		}
		_ = q.Deny(other, ByCLI)
		_ = q.Deny(foreign, ByCLI)
		<-otherDone
		<-foreignDone
	})
}
