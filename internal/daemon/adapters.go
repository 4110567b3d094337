package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
)

// adapterHost joins the capability-adapter supervisor to the durable registrations: a
// registration is persisted only after its adapter started and passed validation, and a
// restart restores every persisted registration.
type adapterHost struct {
	sup   *capclient.Supervisor
	store *store.Store
	// withdraw withdraws capabilities from every room before their adapter is replaced or
	// removed, so that no room call reaches the new or the stopping child.
	withdraw func(capabilities []string)

	// mu serializes register and remove with their persistence, so the store and the
	// supervisor never disagree about which registration is current.
	mu sync.Mutex
}

// restore starts every persisted registration. An adapter that fails to start is kept and
// retried with backoff by the supervisor; a stored registration the supervisor refuses is
// reported by name and stays stored, so the operator can see and remove it.
func (a *adapterHost) restore(ctx context.Context, log *slog.Logger) (restored int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	regs, err := a.store.Registrations()
	if err != nil {
		return 0, err
	}
	for _, r := range regs {
		if _, err := a.sup.Restore(ctx, capclient.Registration(r)); err != nil {
			log.Error("capability adapter registration not restored", "adapter", r.Name, "code", capadapter.CodeOf(err), "err", err)
			continue
		}
		restored++
	}
	return restored, nil
}

// RegisterResult is the data of registerAdapter.
type RegisterResult struct {
	Adapter capclient.AdapterStatus `json:"adapter"`
}

func (a *adapterHost) register(ctx context.Context, p *protocol.RegisterAdapterPayload) (*RegisterResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.status(p.Name); ok && a.withdraw != nil {
		a.withdraw(old.Capabilities)
	}
	reg, err := a.sup.Register(ctx, capclient.Registration{Name: p.Name, Command: p.Command, Args: p.Args})
	if err != nil {
		return nil, adapterError(err, false)
	}
	if err := a.store.PutRegistration(store.Registration(reg)); err != nil {
		// What is not persisted must not run: after a restart the operator would find it gone.
		a.sup.Remove(context.WithoutCancel(ctx), reg.Name)
		return nil, err
	}
	st, _ := a.status(reg.Name)
	return &RegisterResult{Adapter: st}, nil
}

// RemoveResult is the data of removeAdapter.
type RemoveResult struct {
	Removed bool `json:"removed"`
}

// remove forgets a registration, durable record first: if that fails nothing changed, and once
// it is gone the adapter is stopped. A stored registration the supervisor never ran (its
// command was missing at startup) is removed all the same.
func (a *adapterHost) remove(ctx context.Context, name string) (*RemoveResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.status(name); ok && a.withdraw != nil {
		a.withdraw(old.Capabilities)
	}
	stored, err := a.store.DeleteRegistration(name)
	if err != nil {
		return nil, err
	}
	if err := a.sup.Remove(ctx, name); err != nil {
		if stored && capadapter.CodeOf(err) == capadapter.CodeUnknownAdapter {
			return &RemoveResult{Removed: true}, nil
		}
		return nil, adapterError(err, false)
	}
	return &RemoveResult{Removed: true}, nil
}

func (a *adapterHost) status(name string) (capclient.AdapterStatus, bool) {
	for _, st := range a.sup.Status() {
		if st.Name == name {
			return st, true
		}
	}
	return capclient.AdapterStatus{}, false
}

// AdapterList is the data of listAdapters.
type AdapterList struct {
	Adapters []capclient.AdapterStatus `json:"adapters"`
}

// AdapterLogs is the data of adapterLogs: the adapter's kept stderr lines, for the operator
// who owns the socket and nobody else.
type AdapterLogs struct {
	Name  string   `json:"name"`
	Lines []string `json:"lines"`
}

// CapabilityList is the data of listCapabilities.
type CapabilityList struct {
	Capabilities []capclient.CapabilitySummary `json:"capabilities"`
}

// CapabilityDescription is the data of describeCapability.
type CapabilityDescription struct {
	Descriptor capadapter.Descriptor `json:"descriptor"`
}

// CapabilityResult is the data of observeCapability and invokeCapability: bounded semantic
// data, always an object. A non-object result is wrapped, {"state": v} for an observation and
// {"value": v} for an action, as the original runtime does.
type CapabilityResult struct {
	CapabilityID string          `json:"capabilityId"`
	Action       string          `json:"action,omitempty"`
	Result       json.RawMessage `json:"result"`
}

func wrapResult(raw json.RawMessage, key string) json.RawMessage {
	if len(raw) > 0 && raw[0] == '{' {
		return raw
	}
	wrapped, err := json.Marshal(map[string]json.RawMessage{key: raw})
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return wrapped
}

// adapterError maps a supervisor error to the wire. Observations and actions are projected
// with the protocol's closed code set; administration keeps the supervisor's finer codes.
// The supervisor's messages never quote adapter output, arguments or results.
func adapterError(err error, project bool) *protocol.Error {
	code := capadapter.CodeOf(err)
	if project {
		code = capadapter.WireCode(err)
	}
	e := &protocol.Error{Code: code, Message: err.Error()}
	switch code {
	case capadapter.CodeUnavailable, capadapter.CodeTimeout:
		e.Retryable = true
	}
	return e
}

func (s *Server) runAdapters(ctx context.Context, cmd *protocol.Command) (any, error) {
	a := s.adapters
	switch cmd.Operation {
	case protocol.OpRegisterAdapter:
		var p protocol.RegisterAdapterPayload
		if e := protocol.DecodePayload(cmd, &p); e != nil {
			return nil, e
		}
		if e := p.Validate(); e != nil {
			return nil, e
		}
		// A registration during recovery would race the restore of the stored ones; one while
		// draining would start work on a host that is going away.
		if e := s.sessions.Admitting(); e != nil {
			return nil, e
		}
		return a.register(ctx, &p)
	case protocol.OpRemoveAdapter:
		var p protocol.AdapterNamePayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		return a.remove(ctx, p.Name)
	case protocol.OpListAdapters:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return &AdapterList{Adapters: nonNil(a.sup.Status())}, nil
	case protocol.OpAdapterLogs:
		var p protocol.AdapterNamePayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		lines, err := a.sup.Logs(p.Name)
		if err != nil {
			return nil, adapterError(err, false)
		}
		return &AdapterLogs{Name: p.Name, Lines: nonNil(lines)}, nil
	case protocol.OpListCapabilities:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return &CapabilityList{Capabilities: nonNil(a.sup.List())}, nil
	case protocol.OpDescribeCapability:
		p, e := protocol.DecodeCapabilityPayload(cmd)
		if e != nil {
			return nil, e
		}
		d, err := a.sup.Describe(p.CapabilityID)
		if err != nil {
			return nil, adapterError(err, true)
		}
		return &CapabilityDescription{Descriptor: d}, nil
	case protocol.OpObserveCapability, protocol.OpInvokeCapability:
		cc, e := capabilityCallOf(cmd)
		if e != nil {
			return nil, e
		}
		var raw json.RawMessage
		var err error
		if cc.observe {
			raw, err = a.sup.Observe(ctx, cc.id)
		} else {
			raw, err = a.sup.Invoke(ctx, cc.id, cc.action, cc.args)
		}
		return cc.result(raw, err)
	}
	return nil, protocol.Errorf(protocol.CodeUnknownOperation, "unknown operation").With("operation", cmd.Operation)
}

// capabilityCall is a decoded and checked observeCapability or invokeCapability command.
type capabilityCall struct {
	observe    bool
	id, action string
	args       json.RawMessage
}

func capabilityCallOf(cmd *protocol.Command) (*capabilityCall, *protocol.Error) {
	if cmd.Operation == protocol.OpObserveCapability {
		p, e := protocol.DecodeCapabilityPayload(cmd)
		if e != nil {
			return nil, e
		}
		return &capabilityCall{observe: true, id: p.CapabilityID}, nil
	}
	var p protocol.InvokeCapabilityPayload
	if e := protocol.DecodePayload(cmd, &p); e != nil {
		return nil, e
	}
	if e := p.Validate(); e != nil {
		return nil, e
	}
	args := p.Args
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	return &capabilityCall{id: p.CapabilityID, action: p.Action, args: args}, nil
}

// result is the command's data, or its wire error, from the supervisor's outcome.
func (cc *capabilityCall) result(raw json.RawMessage, err error) (any, error) {
	if err != nil {
		return nil, adapterError(err, true)
	}
	if cc.observe {
		return &CapabilityResult{CapabilityID: cc.id, Result: wrapResult(raw, "state")}, nil
	}
	return &CapabilityResult{CapabilityID: cc.id, Action: cc.action, Result: wrapResult(raw, "value")}, nil
}

// startCapability runs an admitted observeCapability or invokeCapability command without a
// goroutine of its own, as startTool does for invokeTool: the reader goroutine decodes and
// checks it and hands it to the adapter's client, which writes the request at once when the
// child is idle and never waits for the pipe; the answer is sent by whichever goroutine ends
// the call, normally the child's stdout reader as soon as the result is decoded and screened.
// A slow adapter never stalls this connection: a call waits without holding a goroutine, and
// calls to a busy child queue in its client. The handlers group counts the call until its
// answer is queued, so that close answers it first.
func (c *conn) startCapability(cmd *protocol.Command) {
	c.handlers.Add(1)
	cc, e := capabilityCallOf(cmd)
	if e != nil {
		c.endCapability(cmd, nil, e)
		return
	}
	done := func(raw json.RawMessage, err error) {
		data, werr := cc.result(raw, err)
		c.endCapability(cmd, data, werr)
	}
	if cc.observe {
		c.srv.adapters.sup.StartObserve(c.ctx, cc.id, done)
	} else {
		c.srv.adapters.sup.StartInvoke(c.ctx, cc.id, cc.action, cc.args, done)
	}
}

func (c *conn) endCapability(cmd *protocol.Command, data any, err error) {
	defer c.handlers.Done()
	c.reply(cmd.RequestID, c.srv.respond(cmd, data, err))
}

func decodeValid(cmd *protocol.Command, p *protocol.AdapterNamePayload) *protocol.Error {
	if e := protocol.DecodePayload(cmd, p); e != nil {
		return e
	}
	return p.Validate()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
