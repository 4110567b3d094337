// Package gate is the one place every call that can change or reveal something passes in
// the daemon: an owner-socket invokeTool, an MCP tool call (which reaches the daemon as an
// owner-socket command), a tool call in an agent turn, a local capability observe or invoke,
// and a room call this host provides.
//
// The order is fixed (DESIGN.md, "One gate for every effect"):
//
//  1. the session's grant and path checks — the door's own client runs them (toolclient's
//     prepare for fs operations) and hands the gate the path it resolved;
//  2. the policy: the host's (airlockd --policy) and the session's, the stricter wins;
//  3. ask: a call the policy marks ask waits for a human in the approver (the daemon's
//     approval queue, internal/approval); a gate without an approver refuses it with
//     approval_required (see Gate.Check);
//  4. the hooks' Before — "record before the adapter" (the audit journal): a hook that
//     fails refuses the call;
//  5. the adapter (the door calls it);
//  6. the result's screens (they stay in the clients);
//  7. the hooks' After — "record the outcome" and "observe the call" (audit, metrics): the
//     door calls Gate.Done with the outcome code before the answer leaves;
//  8. the answer.
//
// A refusal in 1–4 never reaches the adapter; the hooks' After sees it too, with the stage
// that refused, so that a decision is accounted for like an effect: the door reports a
// refusal of its own checks (1) with Gate.Refuse.
//
// Every call carries its Actor, fixed when its connection was accepted: the policy decides on
// the actor's session, and the hooks record it.
package gate

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Codes of the refusals the gate makes. They travel unchanged through every door: a
// response error on the owner socket, an isError tool result over MCP, the tool message an
// agent turn's model reads, and a room reply's code.
const (
	// CodePolicyDenied: a deny rule of the host's or the session's policy matched the call.
	CodePolicyDenied = "policy_denied"
	// CodeApprovalRequired: an ask rule matched, and this gate has no approver (no approval
	// queue): the call is refused, never run, as a deny is. See docs/operations.md.
	CodeApprovalRequired = "approval_required"
	// CodeApprovalDenied: an ask rule matched and the operator denied the call.
	CodeApprovalDenied = "approval_denied"
	// CodeApprovalTimeout: an ask rule matched and nobody decided within the approval bound,
	// or the caller went away while it waited.
	CodeApprovalTimeout = "approval_timeout"
	// CodeApprovalQueueFull: an ask rule matched and the approval queue already holds as
	// many waiting requests as it may; retryable.
	CodeApprovalQueueFull = "approval_queue_full"
	// CodeRecordFailed: a Before hook (the audit journal) could not record the call, so it
	// did not run.
	CodeRecordFailed = "record_failed"
)

// Door names where a call entered the daemon.
type Door string

// Doors.
const (
	DoorSocket Door = "socket" // an owner-socket command from a harness or the CLI
	DoorMCP    Door = "mcp"    // an owner-socket command from airlock mcp (Actor.Client names its client)
	DoorTurn   Door = "turn"   // a tool call of an agent turn's model
	DoorRoom   Door = "room"   // a room call this host provides (Actor.Room, Actor.Host)
)

// Actor is who makes a call: fixed when its connection was accepted (Door, PID, UID,
// Client) and when the call named its session (Session, Generation) or arrived over a room
// (Room, Host). Fields that do not apply are zero.
type Actor struct {
	Door       Door   `json:"door"`
	PID        int    `json:"pid,omitempty"`
	UID        int    `json:"uid,omitempty"`
	Session    string `json:"session,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	Room       string `json:"room,omitempty"`
	Host       string `json:"host,omitempty"`
	// Client is the MCP client's name as airlock mcp was told it at initialize: a label the
	// client chose, not an authenticated identity.
	Client string `json:"client,omitempty"`
	// Peer, when set, is the connection's peer process, whose executable it reads once for
	// every call of the connection (Executable). It is the process of PID.
	Peer *Peer `json:"-"`
}

// Executable returns the path of the peer's executable (/proc/PID/exe), "" when unknown.
// It is read on demand, not at accept: only a hook that records it pays for it, and with a
// Peer only once per connection.
func (a Actor) Executable() string {
	if a.Peer != nil {
		return a.Peer.Executable()
	}
	return readExe(a.PID)
}

// Describe is who makes the call, in one line, as the approval queue's listings show it:
// "mcp client claude · session s1 generation 3 · pid 42", "agent turn · session …",
// "room kitchen · host …".
func (a Actor) Describe() string {
	var parts []string
	switch a.Door {
	case DoorRoom:
		return "room " + a.Room + " · host " + a.Host
	case DoorMCP:
		parts = append(parts, "mcp client "+a.Client)
	case DoorTurn:
		parts = append(parts, "agent turn")
	default:
		parts = append(parts, "owner socket")
	}
	if a.Session != "" {
		parts = append(parts, "session "+a.Session+" generation "+strconv.FormatInt(a.Generation, 10))
	}
	if a.PID > 0 {
		parts = append(parts, "pid "+strconv.Itoa(a.PID))
	}
	return strings.Join(parts, " · ")
}

// Peer is the process at the other end of one connection. A connection's peer process is
// fixed when it is accepted (its credentials), so its executable is read once, at the first
// call that asks, and kept for the connection's life: a peer that execs another program
// after that call is still recorded as the program it was then. That saves a readlink of /proc per journaled call (about 1.5%
// of airlockd's CPU on a stream of small calls). Its methods are safe for concurrent use.
type Peer struct {
	pid  int
	once sync.Once
	exe  string
}

// NewPeer returns the peer process pid, its executable not read yet.
func NewPeer(pid int) *Peer { return &Peer{pid: pid} }

// Executable returns the peer's executable as it was first read, "" when unknown.
func (p *Peer) Executable() string {
	p.once.Do(func() { p.exe = readExe(p.pid) })
	return p.exe
}

// readExe reads /proc/PID/exe, "" when there is no such process or it cannot be read.
func readExe(pid int) string {
	if pid <= 0 {
		return ""
	}
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return ""
	}
	return p
}

// Kind is what a call does.
type Kind int

// Kinds.
const (
	KindTool    Kind = iota // an fs operation of a host tool adapter
	KindObserve             // a capability observation
	KindInvoke              // a capability action
)

// Call is one call at the gate. The door fills Actor, Kind, the target and Args; the gate
// fills Verdict and Started.
type Call struct {
	Actor Actor
	Kind  Kind
	// Operation is the fs operation (KindTool); Path the path the grant check resolved it
	// to, relative to the session's working directory.
	Operation string
	Path      string
	// Capability and Action name a capability call; Action is "" for an observation.
	Capability string
	Action     string
	// Args are the call's arguments as the adapter will get them. Valid only during Check
	// and the Before hooks: a hook that keeps them must copy them.
	Args json.RawMessage
	// Key is the call's idempotency key, where it has one.
	Key string
	// Verdict is the policy's decision and the rule that gave it; Policy says whose rule:
	// PolicyHost or PolicySession.
	Verdict policy.Verdict
	Policy  string
	// Approval is the approver's decision on a call the policy marked ask (zero for any
	// other call): which request in the queue, and who approved it.
	Approval Approval
	// Started is when the gate admitted the call (zero when no hook is installed: nothing
	// reads it then). For a call that waited for approval it is when the wait ended.
	Started time.Time
}

// Approval is an approver's yes to one call.
type Approval struct {
	// ID names the request in the approval queue (24 lowercase hex digits).
	ID string
	// By is who decided: "cli", "page", or "remembered" for a remembered decision.
	By string
	// Remembered is set when a remembered decision answered without a wait.
	Remembered bool
}

// Approver asks a human about a call the policy marks ask: the daemon's approval queue
// (internal/approval). AskCall blocks until the call is approved (a nil error, and the
// decision), denied (approval_denied), not decided within the approval bound or ctx ended
// (approval_timeout), or cannot wait because the queue is full (approval_queue_full). It runs
// on the door's goroutine and must be safe for concurrent use; it must not keep c, and it
// must copy c.Args if it keeps them.
type Approver interface {
	AskCall(ctx context.Context, c *Call) (Approval, *protocol.Error)
}

// Target is the call's operation or capability action, for a message: "fs.write",
// "printer.print", "lamp.observe".
func (c *Call) Target() string {
	switch c.Kind {
	case KindTool:
		return c.Operation
	case KindObserve:
		return c.Capability + "." + policy.ActionObserve
	}
	return c.Capability + "." + c.Action
}

// Whose policy decided a call (Call.Policy).
const (
	PolicyHost    = "host"
	PolicySession = "session"
)

// Stage is where a call ended.
type Stage string

// Stages.
const (
	StageGrant    Stage = "grant"    // refused by the door's own checks: the session, its grant, the path
	StagePolicy   Stage = "policy"   // refused by the policy (deny, or ask without an approver)
	StageApproval Stage = "approval" // an ask the approver refused: denied, timed out, queue full
	StageRecord   Stage = "record"   // refused because a Before hook failed
	StageAdapter  Stage = "adapter"  // ran: the adapter answered, failed or timed out
)

// Outcome is how a call ended: Code is "" for success, else the code the caller got.
type Outcome struct {
	Stage    Stage
	Code     string
	Duration time.Duration
}

// Hook is told of every call at the gate. The audit journal and the metrics are hooks.
//
// Before runs after the policy allowed the call and before the adapter gets it: it may
// block (a journal's group commit) and an error refuses the call with record_failed. It
// runs on the door's goroutine, which for the owner socket's invokeTool and capability calls
// is the connection's reader: a slow Before slows that connection's next command.
//
// After runs exactly once for every call Check or Refuse saw — refused or run — with its
// outcome, before the answer leaves the daemon. It must not block for long, and it may run on an
// adapter connection's reader goroutine.
//
// Both must be safe for concurrent use and must not keep c beyond the call.
type Hook interface {
	Before(ctx context.Context, c *Call) error
	After(c *Call, o Outcome)
}

// Config configures a Gate.
type Config struct {
	// Host is the host's policy, applied to every call at every door; nil allows all.
	Host *policy.Policy
	// Hooks are told of every call, in order.
	Hooks []Hook
	// Approver decides the calls the policy marks ask; nil refuses them with
	// approval_required.
	Approver Approver
}

// Gate is the one gate. Its methods are safe for concurrent use.
type Gate struct {
	host *policy.Policy

	mu       sync.RWMutex
	hooks    []Hook   // guarded by mu; copied on write
	approver Approver // guarded by mu
}

// New returns a gate.
func New(cfg Config) *Gate {
	h := cfg.Host
	if h == nil {
		h = policy.AllowAll()
	}
	return &Gate{host: h, hooks: append([]Hook(nil), cfg.Hooks...), approver: cfg.Approver}
}

// SetApprover installs the approver of ask verdicts (nil removes it); a call already waiting
// keeps the approver it waits on.
func (g *Gate) SetApprover(a Approver) {
	g.mu.Lock()
	g.approver = a
	g.mu.Unlock()
}

func (g *Gate) approverNow() Approver {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.approver
}

// Host returns the host's policy.
func (g *Gate) Host() *policy.Policy { return g.host }

// AddHook adds a hook; calls admitted before it was added are not told to it.
func (g *Gate) AddHook(h Hook) {
	g.mu.Lock()
	g.hooks = append(append([]Hook(nil), g.hooks...), h)
	g.mu.Unlock()
}

func (g *Gate) hooksNow() []Hook {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.hooks
}

// Check runs the policy, the approver on an ask verdict, and the Before hooks on c; session
// is the session's policy (nil when the call has none). It returns nil when the door may give
// c to its adapter, which it must then do and call Done with the outcome; otherwise the
// refusal, already reported to the hooks' After, which the door answers as it answers an
// adapter's error.
//
// On an ask verdict Check blocks in the approver until a human decides, the approval bound
// passes or ctx ends; the wait comes before the Before hooks, so a journal records a call
// when it is about to run, and a denial or timeout reaches the hooks' After at StageApproval.
func (g *Gate) Check(ctx context.Context, c *Call, session *policy.Policy) *protocol.Error {
	c.Verdict, c.Policy = g.decide(c, session)
	hooks := g.hooksNow()
	if len(hooks) > 0 {
		c.Started = time.Now()
	}
	switch c.Verdict.Decision {
	case policy.Deny:
		return g.refuse(hooks, c, StagePolicy, protocol.Errorf(CodePolicyDenied, "the policy denies %s (%s)", c.Target(), c.Verdict.Reason()))
	case policy.Ask:
		a := g.approverNow()
		if a == nil {
			return g.refuse(hooks, c, StagePolicy, protocol.Errorf(CodeApprovalRequired, "the policy asks the operator before %s (%s), and this daemon has no approval queue: the call was not run", c.Target(), c.Verdict.Reason()))
		}
		ap, e := a.AskCall(ctx, c)
		if e != nil {
			return g.refuse(hooks, c, StageApproval, e)
		}
		c.Approval = ap
		if len(hooks) > 0 {
			c.Started = time.Now()
		}
	}
	for _, h := range hooks {
		if err := h.Before(ctx, c); err != nil {
			return g.refuse(hooks, c, StageRecord, protocol.Retryable(CodeRecordFailed, "the call could not be recorded, so it was not run"))
		}
	}
	return nil
}

// MayAsk reports whether Check could wait in the approver for c, whatever the path of an fs
// operation: an approver is installed and the host's or the session's policy can answer ask.
// A door whose Check runs on a goroutine that must not block (an owner-socket connection's
// reader) moves such a call to a goroutine of its own first. It does not allocate.
func (g *Gate) MayAsk(c *Call, session *policy.Policy) bool {
	if g.approverNow() == nil {
		return false
	}
	if c.Kind == KindTool {
		return g.host.MayAskFS(c.Operation) || (session != nil && session.MayAskFS(c.Operation))
	}
	v, _ := g.decide(c, session)
	return v.Decision == policy.Ask
}

// Done reports the outcome of a call Check admitted: code is "" for success, else the code
// the caller gets. It must run before the answer leaves the daemon.
func (g *Gate) Done(c *Call, code string) {
	hooks := g.hooksNow()
	if len(hooks) == 0 {
		return
	}
	o := Outcome{Stage: StageAdapter, Code: code, Duration: time.Since(c.Started)}
	for _, h := range hooks {
		h.After(c, o)
	}
}

// Refuse reports a call that the door's own checks refused before Check (step 1: the
// session, its grant, the path): the hooks' After see it with StageGrant and code, the code
// the caller gets; Before never runs for it. Its Duration is zero: the door does not time its
// own checks. A door calls Refuse or Check for a call, never both.
func (g *Gate) Refuse(c *Call, code string) {
	for _, h := range g.hooksNow() {
		h.After(c, Outcome{Stage: StageGrant, Code: code})
	}
}

func (g *Gate) refuse(hooks []Hook, c *Call, stage Stage, e *protocol.Error) *protocol.Error {
	e = e.With("target", c.Target())
	if stage == StagePolicy || stage == StageApproval {
		e = e.With("policy", c.Policy)
		if c.Verdict.Rule >= 0 {
			e = e.With("rule", c.Verdict.Rule+1)
		}
	}
	var d time.Duration
	if !c.Started.IsZero() {
		d = time.Since(c.Started)
	}
	for _, h := range hooks {
		h.After(c, Outcome{Stage: stage, Code: e.Code, Duration: d})
	}
	return e
}

// decide is the stricter verdict of the host's policy and the session's, and whose it is
// (the host's when both decide alike).
func (g *Gate) decide(c *Call, session *policy.Policy) (policy.Verdict, string) {
	v := g.verdict(g.host, c)
	if session != nil && v.Decision != policy.Deny {
		if s := g.verdict(session, c); policy.Stricter(v.Decision, s.Decision) != v.Decision {
			return s, PolicySession
		}
	}
	return v, PolicyHost
}

func (g *Gate) verdict(p *policy.Policy, c *Call) policy.Verdict {
	if p.Trivial() {
		return policy.Verdict{Decision: policy.Allow, Rule: -1}
	}
	switch c.Kind {
	case KindTool:
		return p.DecideFS(c.Operation, c.Path)
	case KindObserve:
		return p.DecideAction(c.Capability, policy.ActionObserve)
	}
	return p.DecideAction(c.Capability, c.Action)
}

// CodeOf returns the code of a refusal the gate made ("" for any other error), so that a door
// that maps errors to a closed code set (the room provider's) keeps it.
func CodeOf(err error) string {
	pe, ok := err.(*protocol.Error)
	if !ok {
		return ""
	}
	switch pe.Code {
	case CodePolicyDenied, CodeApprovalRequired, CodeRecordFailed,
		CodeApprovalDenied, CodeApprovalTimeout, CodeApprovalQueueFull:
		return pe.Code
	}
	return ""
}
