package daemon

// This file routes every door through the one gate (internal/gate): invokeTool on the owner
// socket (and so every MCP fs tool call, which airlock mcp sends as invokeTool), an agent
// turn's tool call, observeCapability and invokeCapability (and so MCP capability tools),
// and a room call this host provides. Each door builds a gate.Call with its actor and calls
// its adapter only when Gate.Check admitted it, then reports the outcome with Gate.Done
// before its answer leaves.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/turn"
)

// Gate returns the daemon's gate, where the audit journal and the metrics install their
// hooks (gate.Gate.AddHook).
func (d *Daemon) Gate() *gate.Gate { return d.srv.gate }

// actor is the actor of a command that arrived on c (nil for a command the daemon runs for
// its web page): the owner socket's door, or mcp when the command names its MCP client.
func (s *Server) actor(c *conn, cmd *protocol.Command) gate.Actor {
	a := gate.Actor{Door: gate.DoorSocket, UID: s.ownerUID}
	if c != nil && c.slot != nil {
		a.PID, a.Peer = c.slot.PID(), c.peer
	}
	if cmd.Client != "" {
		a.Door, a.Client = gate.DoorMCP, cmd.Client
	}
	if cmd.HasSession {
		a.Session, a.Generation = cmd.SessionID, cmd.Generation
	}
	return a
}

// gated is one call at the gate for a door whose adapter answers through a done function:
// check runs where the adapter client has run its own grant and path checks, done once the
// call ended.
type gated struct {
	g        *gate.Gate
	ctx      context.Context
	rules    *policy.Policy
	call     gate.Call
	checked  bool // the grant checks passed and the gate's Check ran
	admitted bool
}

// check is the toolclient's check: the gate decides on the path the grant check resolved.
func (x *gated) check(path string) *protocol.Error {
	x.call.Path = path
	x.checked = true
	if e := x.g.Check(x.ctx, &x.call, x.rules); e != nil {
		return e
	}
	x.admitted = true
	return nil
}

// done reports the outcome of a call: an admitted call's to Done, a refusal of the door's
// own checks (the check never ran) to Refuse. A call the gate refused was reported by Check.
func (x *gated) done(code string) {
	switch {
	case x.admitted:
		x.g.Done(&x.call, code)
	case !x.checked && code != "":
		x.g.Refuse(&x.call, code)
	}
}

func codeOf(e *protocol.Error) string {
	if e == nil {
		return ""
	}
	return e.Code
}

// gateTool builds the gate's call of an invokeTool command; its rules are the session's,
// once the door found its generation.
func (s *Server) gateTool(ctx context.Context, c *conn, cmd *protocol.Command, p *protocol.InvokeToolPayload, key string) *gated {
	return &gated{g: s.gate, ctx: ctx, call: gate.Call{
		Actor: s.actor(c, cmd), Kind: gate.KindTool, Operation: p.Operation, Args: p.Arguments, Key: key}}
}

// turnTools is what an agent turn's model calls for a host tool: the generation's adapter
// connection behind the gate (session.Config.GateTools).
type turnTools struct {
	srv        *Server
	id         string
	generation int64
	rules      *policy.Policy
}

var _ turn.Invoker = (*turnTools)(nil)

func (s *Server) gateTurnTools(id string, generation int64, rules *policy.Policy) turn.Invoker {
	return &turnTools{srv: s, id: id, generation: generation, rules: rules}
}

// Invoke runs one tool call of the model through the gate, on the generation's connection of
// the moment: a turn that outlives airlockd's airlock-fs goes on with the grant restored from
// the next one (managedFS.restore), and meanwhile is told fs_adapter_unavailable, retryable,
// as the socket door is (toolCall).
func (t *turnTools) Invoke(ctx context.Context, op, key string, args json.RawMessage) (json.RawMessage, *protocol.Error) {
	x := &gated{g: t.srv.gate, ctx: ctx, rules: t.rules, call: gate.Call{
		Actor: gate.Actor{Door: gate.DoorTurn, UID: t.srv.ownerUID, Session: t.id, Generation: t.generation},
		Kind:  gate.KindTool, Operation: op, Args: args, Key: key}}
	tc, _, err := t.srv.sessions.GatedTool(t.id, t.generation)
	if err != nil {
		e := protocol.AsError(err)
		x.done(e.Code)
		return nil, e
	}
	if f := tc.Err(); f != nil && t.srv.fsys.awaiting(t.id, t.generation, f) {
		e := awaitingError()
		x.done(e.Code)
		return nil, e
	}
	data, e := tc.InvokeChecked(ctx, op, key, args, x.check)
	x.done(codeOf(e))
	return data, e
}

// gateCapability checks an observeCapability or invokeCapability command at the gate: the
// session's rules apply when the command names a session (airlock mcp names its own). It
// returns the admitted call, or the refusal to answer (one of the session's, reported to the
// gate's hooks with Refuse).
func (s *Server) gateCapability(ctx context.Context, c *conn, cmd *protocol.Command, cc *capabilityCall) (*gated, error) {
	x, err := s.capabilityGate(cmd, c, cc)
	if err != nil {
		return nil, err
	}
	x.ctx = ctx
	if e := x.check(""); e != nil {
		return nil, e
	}
	return x, nil
}

// capabilityGate builds the gate's call of an observeCapability or invokeCapability command,
// with the session's rules; the caller sets its ctx and checks it. A refusal of the session's
// is reported to the gate's hooks (Refuse).
func (s *Server) capabilityGate(cmd *protocol.Command, c *conn, cc *capabilityCall) (*gated, error) {
	x := &gated{g: s.gate, call: gate.Call{
		Actor: s.actor(c, cmd), Kind: gate.KindInvoke, Capability: cc.id, Action: cc.action, Args: cc.args}}
	if cc.observe {
		x.call.Kind = gate.KindObserve
	}
	if cmd.HasSession {
		r, err := s.sessions.Rules(cmd.SessionID, cmd.Generation)
		if err != nil {
			x.done(protocol.AsError(err).Code)
			return nil, err
		}
		x.rules = r
	}
	return x, nil
}

// capabilityCode is the code a capability call's caller gets for err ("" for success).
func capabilityCode(err error) string {
	if err == nil {
		return ""
	}
	return capadapter.WireCode(err)
}

// providerInvoker is the room provider's invoker: the capability supervisor behind the gate.
// Room authorization (membership, publication, MACs, approve-each) ran before it, in
// internal/room; the gate's actor is the room and the calling host. A room call to this
// host's own publication reaches it once, through the provider, like any other.
type providerInvoker struct {
	srv *Server
	sup room.StartInvoker
}

var _ room.StartInvoker = (*providerInvoker)(nil)

func (p *providerInvoker) call(ctx context.Context, kind gate.Kind, capability, action string, args json.RawMessage) (*gated, error) {
	a := gate.Actor{Door: gate.DoorRoom}
	if rc, ok := room.CallOf(ctx); ok {
		a.Room, a.Host = rc.Room, string(rc.Caller)
	}
	x := &gated{g: p.srv.gate, ctx: ctx, call: gate.Call{Actor: a, Kind: kind, Capability: capability, Action: action, Args: args}}
	if e := x.check(""); e != nil {
		return nil, e
	}
	return x, nil
}

// Observe observes through the gate.
func (p *providerInvoker) Observe(ctx context.Context, capability string) (json.RawMessage, error) {
	x, err := p.call(ctx, gate.KindObserve, capability, "", nil)
	if err != nil {
		return nil, err
	}
	raw, err := p.sup.Observe(ctx, capability)
	x.done(capabilityCode(err))
	return raw, err
}

// Invoke invokes through the gate.
func (p *providerInvoker) Invoke(ctx context.Context, capability, action string, args json.RawMessage) (json.RawMessage, error) {
	x, err := p.call(ctx, gate.KindInvoke, capability, action, args)
	if err != nil {
		return nil, err
	}
	raw, err := p.sup.Invoke(ctx, capability, action, args)
	x.done(capabilityCode(err))
	return raw, err
}

// StartObserve is Observe without the wait.
func (p *providerInvoker) StartObserve(ctx context.Context, capability string, done func(json.RawMessage, error)) {
	x, err := p.call(ctx, gate.KindObserve, capability, "", nil)
	if err != nil {
		done(nil, err)
		return
	}
	p.sup.StartObserve(ctx, capability, func(raw json.RawMessage, err error) {
		finish := func(raw json.RawMessage) {
			x.done(capabilityCode(err))
			done(raw, err)
		}
		if !p.srv.offReader(x, raw, finish) {
			finish(raw)
		}
	})
}

// StartInvoke is Invoke without the wait.
func (p *providerInvoker) StartInvoke(ctx context.Context, capability, action string, args json.RawMessage, done func(json.RawMessage, error)) {
	x, err := p.call(ctx, gate.KindInvoke, capability, action, args)
	if err != nil {
		done(nil, err)
		return
	}
	p.sup.StartInvoke(ctx, capability, action, args, func(raw json.RawMessage, err error) {
		finish := func(raw json.RawMessage) {
			x.done(capabilityCode(err))
			done(raw, err)
		}
		if !p.srv.offReader(x, raw, finish) {
			finish(raw)
		}
	})
}

// providerErrorCode maps the provider invoker's errors to a room reply's code: the gate's
// refusals keep theirs, the supervisor's are projected as for a local caller.
func providerErrorCode(err error) string {
	if code := gate.CodeOf(err); code != "" {
		return code
	}
	return capadapter.WireCode(err)
}

// CodeInvalidPolicy is the code of an open whose policy member names no built-in policy, or
// a file that is not a valid policy the operator owns.
const CodeInvalidPolicy = policy.CodeInvalidPolicy

// resolvePolicy resolves the open's policy member into the session policy's rules: a
// built-in policy by name, or the operator's policy file, read now. The rules, not the
// reference, are what the generation keeps, so a later edit of the file does not change a
// running session (a new open with the edited file is a policy conflict, as any other change
// of policy is).
func resolvePolicy(p *protocol.OpenPayload, pol *protocol.Policy) *protocol.Error {
	ref := p.PolicyRef()
	if ref == nil {
		return nil
	}
	var rules *policy.Policy
	if ref.Name != "" {
		r, ok := policy.Named(ref.Name)
		if !ok {
			return protocol.Errorf(CodeInvalidPolicy, "no built-in policy is named %q: the built-in policies are %s; a policy file is named by a path with a / (./%s)",
				ref.Name, strings.Join(policy.Names(), ", "), ref.Name).
				With("field", "payload.policy.name").With("names", policy.Names())
		}
		rules = r
	} else {
		r, err := policy.ReadFile(ref.File)
		if err != nil {
			e := protocol.Errorf(CodeInvalidPolicy, "%v", err).With("field", "payload.policy.file")
			var pe *policy.Error
			if errors.As(err, &pe) && pe.Field != "" {
				e = e.With("policyField", pe.Field)
			}
			return e
		}
		if f := r.Check(); len(f) > 0 {
			return protocol.Errorf(CodeInvalidPolicy, "example %d of the policy file expects %s and gets %s", f[0].Index+1, f[0].Example.Expect, f[0].Got.Decision).
				With("field", "payload.policy.file")
		}
		rules = r
	}
	b, err := json.Marshal(rules.Document())
	if err != nil {
		return protocol.Errorf(protocol.CodeInternal, "the policy is not serializable")
	}
	pol.Rules = b
	return nil
}
