// Package approval is the daemon's one queue of requests that wait for a human: a call the
// policy marks ask at any local door (through the gate's Approver hook), a room call to a
// publication marked approve-each, and an agent's adapter proposal (run, then publish).
//
// Every waiting request is an Entry: who asks (the gate's Actor), what (Target, the resolved
// Path of an fs call, the arguments bounded to MaxArgsBytes, a kind-specific Detail), why
// (Reason: the rule) and until when (Deadline). A human approves or denies it by ID from the
// CLI or the web page; nobody deciding within its timeout refuses it with approval_timeout.
//
// An approval of a call may be remembered: a Memory, scoped to the caller's session
// generation (or its room membership), that answers the next call with the same target and
// a matching argument pattern at once, with Decision.By "remembered". Memories are listed,
// revocable (Forget), and end with their scope (End).
//
// The queue starts no goroutine: a request waits on its caller's goroutine, and its timer
// is the caller's. It is safe for concurrent use.
package approval

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Codes of the queue's refusals. A caller that waited gets approval_denied,
// approval_timeout or approval_queue_full (the gate's codes, the same strings a room caller
// gets); an operator's verb on an id the queue does not hold gets unknown_approval.
const (
	CodeApprovalDenied  = gate.CodeApprovalDenied
	CodeApprovalTimeout = gate.CodeApprovalTimeout
	CodeQueueFull       = gate.CodeApprovalQueueFull
	// CodeUnknownApproval: Approve, Deny or Forget named an id that no waiting request or
	// memory has (never had, or already decided, timed out or forgotten).
	CodeUnknownApproval = "unknown_approval"
	// CodeNotRememberable: Approve asked to remember a decision on a request that cannot be
	// remembered (a proposal, a call without a session or room), or gave a pattern that does
	// not fit the request; nothing was decided.
	CodeNotRememberable = "not_rememberable"
)

// Bounds of the queue.
const (
	// DefaultTimeout is how long a request waits when neither it nor the queue says
	// otherwise: as room.ApprovalTimeout, long enough for a person to read the call, short
	// enough that the caller's own deadline stays meaningful.
	DefaultTimeout = 60 * time.Second
	// MaxTimeout bounds any request's wait: a proposal the operator reads at length still
	// ends.
	MaxTimeout = 10 * time.Minute
	// MaxPending bounds the requests waiting at once; one more is refused
	// approval_queue_full (each door bounds its own in-flight calls below this).
	MaxPending = 64
	// MaxMemories bounds the remembered decisions; remembering one more is refused
	// approval_queue_full, and the call is not decided.
	MaxMemories = 256
	// MaxArgsBytes bounds the arguments an entry holds, as room.MaxArgsBytes bounds a room
	// call's: longer arguments are shown as their first MaxArgsBytes bytes, as a JSON
	// string, with ArgsTruncated set.
	MaxArgsBytes = 8 << 10
	// MaxDetailBytes bounds a request's Detail (a proposal's command, file digests and
	// validator report); a longer one is refused invalid_field.
	MaxDetailBytes = 64 << 10
)

// By names of who decided.
const (
	ByCLI        = "cli"
	ByPage       = "page"
	ByRemembered = "remembered"
)

// Kind is what a request asks.
type Kind string

// Kinds.
const (
	KindCall    Kind = "call"    // run a gated call (policy ask, room approve-each)
	KindRun     Kind = "run"     // execute a proposed adapter
	KindPublish Kind = "publish" // project a proposed adapter into a room
)

// Request is what waits for a human.
type Request struct {
	Kind Kind `json:"kind"`
	// Actor is who asks: door, pid, session and generation, room and host, MCP client.
	Actor gate.Actor `json:"actor"`
	// Target is "fs.write", "printer.print", or for a proposal "adapter NAME".
	Target string `json:"target"`
	// Path is an fs call's resolved path, relative to the session's working directory.
	Path string `json:"path,omitempty"`
	// Args are the call's arguments; Ask copies them, bounded to MaxArgsBytes.
	Args json.RawMessage `json:"args,omitempty"`
	// Reason says why the request waits: the rule ("session policy rule 2: ask writes"),
	// "room approve-each", "agent proposal".
	Reason string `json:"reason"`
	// Detail is a kind-specific JSON object the human decides on (a proposal's command,
	// argv, file digests, validator report); at most MaxDetailBytes.
	Detail json.RawMessage `json:"detail,omitempty"`
	// Timeout bounds the wait; zero means the queue's (Config.Timeout, else
	// DefaultTimeout), and it is at most MaxTimeout.
	Timeout time.Duration `json:"-"`
	// Rememberable says whether an approval may be remembered (calls yes, proposals no).
	// Only a request whose actor has a session or a room can be remembered.
	Rememberable bool `json:"rememberable"`
}

// Entry is a waiting request as the human sees it.
type Entry struct {
	ID string `json:"id"`
	Request
	// ArgsTruncated is set when Args are the first MaxArgsBytes bytes of longer arguments,
	// as a JSON string; ArgsBytes and ArgsDigest (lowercase hex SHA-256) are of the whole.
	ArgsTruncated bool      `json:"argsTruncated,omitempty"`
	ArgsBytes     int       `json:"argsBytes"`
	ArgsDigest    string    `json:"argsDigest,omitempty"`
	Since         time.Time `json:"since"`
	Deadline      time.Time `json:"expiresAt"`
}

// Decision is a yes: who gave it, and whether a memory answered.
type Decision struct {
	By         string `json:"by"`
	Remembered bool   `json:"remembered,omitempty"`
	// ID names the request (for a remembered answer, the id the call would have waited
	// under; the memory is Event.Memory).
	ID string `json:"id"`
}

// Scope is what a memory lives as long as: a session generation, or a room membership
// (a room and the calling host).
type Scope struct {
	Session    string `json:"session,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	Room       string `json:"room,omitempty"`
	Host       string `json:"host,omitempty"`
}

// ScopeOf is the scope of a's decisions; zero when a has neither a session nor a room.
func ScopeOf(a gate.Actor) Scope {
	switch {
	case a.Session != "":
		return Scope{Session: a.Session, Generation: a.Generation}
	case a.Room != "":
		return Scope{Room: a.Room, Host: a.Host}
	}
	return Scope{}
}

// IsZero reports whether s is no scope.
func (s Scope) IsZero() bool { return s == Scope{} }

// String describes s for a human.
func (s Scope) String() string {
	if s.Session != "" {
		return "session " + s.Session + " generation " + strconv.FormatInt(s.Generation, 10)
	}
	if s.Room != "" {
		return "room " + s.Room + " host " + s.Host
	}
	return "none"
}

// Remember is what an approval remembers.
type Remember struct {
	// Pattern, for a call with a Path, is a glob (policy path syntax: "src/**") the next
	// calls' paths must match; it must match this call's path. Empty: this exact path.
	Pattern string
	// AnyArgs, for a call without a Path (a capability action), matches any arguments;
	// otherwise the next call's arguments must equal these as canonical JSON (audit.Canonical:
	// members in any order, spaced any way).
	AnyArgs bool
}

// Memory is a remembered approval: the next call in Scope with Target and matching
// arguments runs without waiting.
type Memory struct {
	ID     string `json:"id"`
	Scope  Scope  `json:"scope"`
	Target string `json:"target"`
	// Path is an exact path; Pattern a glob. At most one is set, and neither for a
	// capability action.
	Path    string `json:"path,omitempty"`
	Pattern string `json:"pattern,omitempty"`
	// Args are the exact arguments (canonical JSON, audit.Canonical) a capability action must
	// have; AnyArgs matches any.
	Args    json.RawMessage `json:"args,omitempty"`
	AnyArgs bool            `json:"anyArgs,omitempty"`
	// From is the id of the request whose approval it remembers; By who approved it.
	From  string    `json:"from"`
	By    string    `json:"by"`
	Since time.Time `json:"since"`
	// Uses counts the calls it answered.
	Uses int64 `json:"uses"`

	glob    policy.Glob
	hasPath bool
}

// Event types.
const (
	EventAsked      = "asked"
	EventApproved   = "approved"
	EventDenied     = "denied"
	EventTimedOut   = "timed_out"
	EventRemembered = "remembered"
	EventForgotten  = "forgotten"
)

// Event tells of a change of the queue: a request asked, approved (Decision.By
// "remembered" when a memory answered it at once: Entry then never was pending), denied or
// timed out; a memory stored (remembered) or removed (forgotten).
type Event struct {
	Type     string   `json:"type"`
	Entry    Entry    `json:"entry"`
	Decision Decision `json:"decision"`
	// Memory is the memory of a remembered or forgotten event, and of an approval a memory
	// answered.
	Memory *Memory `json:"memory,omitempty"`
	// Time is when it happened.
	Time time.Time `json:"time"`
}

// Config configures a Queue.
type Config struct {
	// OnEvent, when not nil, is told of every event, in order per request, on the goroutine
	// that caused it and outside the queue's lock. It must not block (hand off, as a
	// journal's or a page's buffered channel does) and must not keep Entry.Args beyond the
	// call unless it copies them.
	OnEvent func(Event)
	// Timeout is the wait of a request without its own; zero means DefaultTimeout. At most
	// MaxTimeout.
	Timeout time.Duration
}

// Queue holds the requests waiting for a human and the remembered decisions.
type Queue struct {
	onEvent func(Event)
	timeout time.Duration

	mu       sync.Mutex
	pending  map[string]*waiter // guarded by mu
	memories []*Memory          // guarded by mu; oldest first
}

type waiter struct {
	entry    Entry
	decision chan Decision // buffered 1: one decision, never blocking the decider; By "" is a denial, ID "" the end of the caller's scope
	// announced is closed once the asked event is out. The entry is pending (a decision can
	// take it) just before: a decider waits for it, so that asked goes out first.
	announced chan struct{}
}

// NewQueue returns an empty queue.
func NewQueue(cfg Config) *Queue {
	t := cfg.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return &Queue{onEvent: cfg.OnEvent, timeout: min(t, MaxTimeout), pending: make(map[string]*waiter)}
}

func (q *Queue) emit(ev Event) {
	if q.onEvent != nil {
		ev.Time = time.Now().UTC()
		q.onEvent(ev)
	}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Ask puts r in the queue and blocks until a human approves it (the decision, nil error),
// denies it (approval_denied), nobody decides within its timeout or ctx ends
// (approval_timeout); it refuses at once with approval_queue_full when MaxPending requests
// already wait. A memory that matches r answers at once, By "remembered". Errors are
// *protocol.Error.
func (q *Queue) Ask(ctx context.Context, r Request) (Decision, error) {
	d, e := q.ask(ctx, r)
	if e != nil {
		return d, e
	}
	return d, nil
}

func (q *Queue) ask(ctx context.Context, r Request) (Decision, *protocol.Error) {
	if len(r.Detail) > MaxDetailBytes {
		return Decision{}, protocol.Errorf(protocol.CodeInvalidField, "the request's detail is over %d bytes", MaxDetailBytes).With("field", "detail")
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = q.timeout
	}
	timeout = min(timeout, MaxTimeout)
	now := time.Now().UTC()
	w := &waiter{entry: newEntry(r, now, now.Add(timeout)), decision: make(chan Decision, 1), announced: make(chan struct{})}

	q.mu.Lock()
	if m := q.match(&w.entry); m != nil {
		m.Uses++
		mc := *m
		q.mu.Unlock()
		d := Decision{By: ByRemembered, Remembered: true, ID: w.entry.ID}
		q.emit(Event{Type: EventApproved, Entry: w.entry, Decision: d, Memory: &mc})
		return d, nil
	}
	if len(q.pending) >= MaxPending {
		q.mu.Unlock()
		return Decision{}, protocol.Retryable(CodeQueueFull, "%d requests already wait for the operator", MaxPending)
	}
	q.pending[w.entry.ID] = w
	q.mu.Unlock()
	q.emit(Event{Type: EventAsked, Entry: w.entry})
	close(w.announced)

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case d := <-w.decision:
		return q.answer(w, d)
	case <-timer.C:
	case <-ctx.Done():
	}
	q.mu.Lock()
	_, still := q.pending[w.entry.ID]
	delete(q.pending, w.entry.ID)
	q.mu.Unlock()
	if !still {
		// A decision raced the timeout and took the entry first: honour it.
		return q.answer(w, <-w.decision)
	}
	q.emit(Event{Type: EventTimedOut, Entry: w.entry})
	why := "nobody decided within " + timeout.String()
	if ctx.Err() != nil && timer.Stop() {
		why = "the caller stopped waiting"
		// A cause the caller's context names says it better ("the daemon is stopping").
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
			why = c.Error()
		}
	}
	return Decision{}, protocol.Errorf(CodeApprovalTimeout, "the request was not approved: %s", why).With("approvalId", w.entry.ID)
}

// answer is the waiting call's end once a decision reached it (the decider emitted its
// event).
func (q *Queue) answer(w *waiter, d Decision) (Decision, *protocol.Error) {
	if d.ID == "" {
		return Decision{}, protocol.Errorf(CodeApprovalTimeout, "the request was not approved: its session generation ended").With("approvalId", w.entry.ID)
	}
	if d.By == "" {
		return Decision{}, protocol.Errorf(CodeApprovalDenied, "the operator denied the request").With("approvalId", w.entry.ID)
	}
	return d, nil
}

func newEntry(r Request, since, deadline time.Time) Entry {
	e := Entry{ID: newID(), Request: r, Since: since, Deadline: deadline}
	e.Detail = bytes.Clone(r.Detail)
	e.ArgsBytes = len(r.Args)
	if len(r.Args) == 0 {
		e.Args = nil
		return e
	}
	sum := sha256.Sum256(r.Args)
	e.ArgsDigest = hex.EncodeToString(sum[:])
	if len(r.Args) <= MaxArgsBytes && json.Valid(r.Args) {
		var b bytes.Buffer
		if json.Compact(&b, r.Args) == nil {
			e.Args = b.Bytes()
			return e
		}
	}
	// Show the first bytes as text: cut back to a rune boundary, as fs.read cuts a range.
	cut := r.Args[:min(len(r.Args), MaxArgsBytes)]
	for len(cut) > 0 && !utf8.Valid(cut) {
		cut = cut[:len(cut)-1]
	}
	s, _ := json.Marshal(string(cut))
	e.Args, e.ArgsTruncated = s, true
	return e
}

// Pending returns the waiting requests, oldest first.
func (q *Queue) Pending() []Entry {
	q.mu.Lock()
	out := make([]Entry, 0, len(q.pending))
	for _, w := range q.pending {
		out = append(out, w.entry)
	}
	q.mu.Unlock()
	slices.SortFunc(out, func(a, b Entry) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return compareStrings(a.ID, b.ID)
	})
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Timeout returns how long a request without its own timeout waits (Config.Timeout, else
// DefaultTimeout).
func (q *Queue) Timeout() time.Duration { return q.timeout }

// Len returns the number of waiting requests (a gauge).
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// Approve lets the waiting request id proceed; by is who decided ("cli", "page"). With
// remember, the decision is remembered for the exact path (an fs call) or the exact
// arguments (a capability action) in the caller's scope. An unknown id is refused
// unknown_approval; remember on a request that cannot be remembered not_rememberable.
func (q *Queue) Approve(id string, by string, remember bool) error {
	var rem *Remember
	if remember {
		rem = &Remember{}
	}
	return q.decide(id, by, true, rem)
}

// ApproveRemember is Approve with remember, with the pattern the human gave: a glob for an
// fs call's path, or any arguments for a capability action.
func (q *Queue) ApproveRemember(id string, by string, r Remember) error {
	return q.decide(id, by, true, &r)
}

// Deny refuses the waiting request id with approval_denied; an unknown id is refused
// unknown_approval.
func (q *Queue) Deny(id string, by string) error { return q.decide(id, by, false, nil) }

func (q *Queue) decide(id, by string, ok bool, rem *Remember) error {
	if by == "" || by == ByRemembered {
		return protocol.Errorf(protocol.CodeInvalidField, "a decision names who decided").With("field", "by")
	}
	q.mu.Lock()
	w, found := q.pending[id]
	if !found {
		q.mu.Unlock()
		return protocol.Errorf(CodeUnknownApproval, "no request waits under that approval id: it was decided or timed out already, or the id is wrong (airlock approvals lists the waiting ones)")
	}
	var m *Memory
	if rem != nil {
		var e *protocol.Error
		if m, e = newMemory(&w.entry, *rem, by); e != nil {
			q.mu.Unlock()
			return e
		}
		if len(q.memories) >= MaxMemories {
			q.mu.Unlock()
			return protocol.Retryable(CodeQueueFull, "%d decisions are remembered already: forget one first", MaxMemories)
		}
		q.memories = append(q.memories, m)
	}
	delete(q.pending, id)
	// The requests already waiting that the new memory answers go with this one: the
	// operator has just said yes to all of them.
	var also []*waiter
	if m != nil && ok {
		for oid, o := range q.pending {
			var canon []byte
			if m.matches(&o.entry, &canon) {
				delete(q.pending, oid)
				m.Uses++
				also = append(also, o)
			}
		}
	}
	var mc Memory // m as it is now, for the events: Ask changes its Uses under q.mu
	if m != nil {
		mc = *m
	}
	q.mu.Unlock()

	d := Decision{ID: id}
	typ := EventDenied
	if ok {
		d.By, typ = by, EventApproved
	}
	// The event goes out after the request's asked (a decision may follow listApprovals
	// faster than the asker's event), and before the waiter can return, so that a listener
	// sees "approved" before the call's own effects.
	<-w.announced
	ev := Event{Type: typ, Entry: w.entry, Decision: d}
	if !ok {
		ev.Decision.By = by
	}
	q.emit(ev)
	if m != nil {
		m1 := mc
		q.emit(Event{Type: EventRemembered, Entry: w.entry, Decision: d, Memory: &m1})
	}
	w.decision <- d
	for _, o := range also {
		od := Decision{By: ByRemembered, Remembered: true, ID: o.entry.ID}
		<-o.announced
		m1 := mc
		q.emit(Event{Type: EventApproved, Entry: o.entry, Decision: od, Memory: &m1})
		o.decision <- od
	}
	return nil
}

func newMemory(e *Entry, r Remember, by string) (*Memory, *protocol.Error) {
	if e.Kind != KindCall {
		// Said apart: a proposal has a session, and the message below made the operator
		// look for one.
		return nil, protocol.Errorf(CodeNotRememberable, "an adapter proposal is never remembered: approve it without remembering")
	}
	scope := ScopeOf(e.Actor)
	if !e.Rememberable || scope.IsZero() {
		return nil, protocol.Errorf(CodeNotRememberable, "this request cannot be remembered (only a call with a session or a room can)")
	}
	m := &Memory{ID: newID(), Scope: scope, Target: e.Target, From: e.ID, By: by, Since: time.Now().UTC()}
	hasPath := e.Path != "" || isFS(e.Target)
	switch {
	case hasPath && r.AnyArgs:
		return nil, protocol.Errorf(CodeNotRememberable, "an fs call is remembered by its path or a path pattern, not by any arguments")
	case hasPath && r.Pattern != "":
		g, err := policy.ParseGlob(r.Pattern)
		if err != nil {
			return nil, protocol.Errorf(CodeNotRememberable, "the pattern is not a valid path glob: %v", err).With("field", "pattern")
		}
		if !g.Match(e.Path) {
			return nil, protocol.Errorf(CodeNotRememberable, "the pattern does not match the call's own path").With("field", "pattern")
		}
		m.Pattern, m.glob = r.Pattern, g
	case hasPath:
		m.Path = e.Path
	case r.Pattern != "":
		return nil, protocol.Errorf(CodeNotRememberable, "a capability action is remembered by its exact arguments or any arguments, not by a path pattern").With("field", "pattern")
	case r.AnyArgs:
		m.AnyArgs = true
	case e.ArgsTruncated:
		return nil, protocol.Errorf(CodeNotRememberable, "the arguments are too long to remember exactly: remember any arguments instead")
	case len(e.Args) == 0:
		// No arguments: it matches the calls that have none.
	default:
		c, err := audit.Canonical(e.Args)
		if err != nil {
			return nil, protocol.Errorf(CodeNotRememberable, "arguments with a duplicate key have no one meaning to remember: remember any arguments instead")
		}
		m.Args = c
	}
	m.hasPath = hasPath
	return m, nil
}

func isFS(target string) bool { return len(target) > 3 && target[:3] == "fs." }

// match returns the memory that answers e, nil when none does. q.mu is held.
func (q *Queue) match(e *Entry) *Memory {
	var canon []byte // e's arguments as canonical JSON, made at their first comparison
	for _, m := range q.memories {
		if m.matches(e, &canon) {
			return m
		}
	}
	return nil
}

// matches reports whether m answers e. *canon caches e's arguments as canonical JSON across
// the memories one entry is held against (nil until they are first compared).
func (m *Memory) matches(e *Entry, canon *[]byte) bool {
	if !e.Rememberable || e.Kind != KindCall || m.Target != e.Target {
		return false
	}
	if scope := ScopeOf(e.Actor); scope.IsZero() || m.Scope != scope {
		return false
	}
	switch {
	case m.hasPath && m.Pattern != "":
		return m.glob.Match(e.Path)
	case m.hasPath:
		return m.Path == e.Path
	case m.AnyArgs:
		return true
	case e.ArgsTruncated:
		return false
	case len(m.Args) == 0 || len(e.Args) == 0:
		return len(m.Args) == len(e.Args)
	}
	if *canon == nil {
		*canon, _ = audit.Canonical(e.Args) // nil, matching nothing, with a duplicate key
	}
	return *canon != nil && bytes.Equal(m.Args, *canon)
}

// Remembered returns the remembered decisions, oldest first.
func (q *Queue) Remembered() []Memory {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]Memory, 0, len(q.memories))
	for _, m := range q.memories {
		out = append(out, *m)
	}
	return out
}

// Forget removes the memory id; an unknown id is refused unknown_approval.
func (q *Queue) Forget(id string) error {
	q.mu.Lock()
	i := slices.IndexFunc(q.memories, func(m *Memory) bool { return m.ID == id })
	if i < 0 {
		q.mu.Unlock()
		return protocol.Errorf(CodeUnknownApproval, "no remembered decision has that id")
	}
	m := q.memories[i]
	q.memories = slices.Delete(q.memories, i, i+1)
	q.mu.Unlock()
	q.emit(Event{Type: EventForgotten, Memory: m})
	return nil
}

// End forgets the memories of a scope that ended: a session generation and every older one
// (every generation of the session when s.Generation is zero), or a room membership (every
// host of the room when s.Host is empty: the room ended). The requests of that scope still
// waiting end too: their callers get approval_timeout, and the queue a timed_out event.
func (q *Queue) End(s Scope) {
	if s.IsZero() {
		return
	}
	q.mu.Lock()
	var gone []*Memory
	q.memories = slices.DeleteFunc(q.memories, func(m *Memory) bool {
		if ends(s, m.Scope) {
			gone = append(gone, m)
			return true
		}
		return false
	})
	var ended []*waiter
	for id, w := range q.pending {
		if sc := ScopeOf(w.entry.Actor); !sc.IsZero() && ends(s, sc) {
			delete(q.pending, id)
			ended = append(ended, w)
		}
	}
	q.mu.Unlock()
	for _, m := range gone {
		q.emit(Event{Type: EventForgotten, Memory: m})
	}
	for _, w := range ended {
		<-w.announced
		q.emit(Event{Type: EventTimedOut, Entry: w.entry})
		w.decision <- Decision{}
	}
}

func ends(s, m Scope) bool {
	if s.Session != "" {
		return m.Session == s.Session && (s.Generation == 0 || m.Generation <= s.Generation)
	}
	return s.Room != "" && m.Room == s.Room && (s.Host == "" || m.Host == s.Host)
}

var _ gate.Approver = (*Queue)(nil)

// AskCall is the gate's Approver: a call the policy marks ask waits in the queue, as a
// rememberable KindCall whose Reason names the rule.
func (q *Queue) AskCall(ctx context.Context, c *gate.Call) (gate.Approval, *protocol.Error) {
	r := Request{Kind: KindCall, Actor: c.Actor, Target: c.Target(), Path: c.Path, Args: c.Args,
		Reason: ReasonOf(c), Rememberable: true}
	d, e := q.ask(ctx, r)
	if e != nil {
		return gate.Approval{}, e
	}
	return gate.Approval{ID: d.ID, By: d.By, Remembered: d.Remembered}, nil
}

// ReasonOf says why the gate asks about c: whose policy, which rule and why, what:
// "session policy rule 2 (writes outside src): ask fs.write".
func ReasonOf(c *gate.Call) string {
	who := c.Policy
	if who == "" {
		who = gate.PolicyHost
	}
	s := who + " policy default"
	if c.Verdict.Rule >= 0 {
		s = who + " policy rule " + strconv.Itoa(c.Verdict.Rule+1)
	}
	if c.Verdict.Why != "" {
		s += " (" + c.Verdict.Why + ")"
	}
	return s + ": " + string(c.Verdict.Decision) + " " + c.Target()
}
