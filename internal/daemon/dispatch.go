package daemon

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/session"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// dispatch runs one command and builds its response. Every response echoes the command's exact
// protocol version.
func (s *Server) dispatch(ctx context.Context, c *conn, cmd *protocol.Command) *protocol.Response {
	if s.hook != nil {
		s.hook(cmd)
	}
	data, err := s.run(ctx, c, cmd)
	s.auditCommand(c, cmd, err)
	return s.respond(cmd, data, err)
}

// open runs an open: a managed grant is minted first (tools mode "airlock-fs"), and is
// revoked unless the open binds it; a connection-scoped generation is recorded under the
// connection that opened it.
func (s *Server) open(ctx context.Context, c *conn, cmd *protocol.Command, p *protocol.OpenPayload, policy *protocol.Policy) (any, error) {
	if policy.Lifetime == protocol.LifetimeConnection && c == nil {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "lifetime %q needs an owner-socket connection", protocol.LifetimeConnection).
			With("field", "payload.lifetime")
	}
	if e := resolvePolicy(p, policy); e != nil {
		return nil, e
	}
	minted := ""
	if ops := p.ManagedOperations(); ops != nil {
		raw, id, e := s.fsys.mint(ctx, cmd.SessionID, cmd.Generation, policy.Cwd, ops)
		if e != nil {
			return nil, e
		}
		p.SetToolDescriptor(raw)
		minted = id
	}
	req := sessionOpen(cmd, policy)
	bound := false
	req.ToolsBound = &bound
	res, err := s.openBound(ctx, p, &req)
	if minted != "" && (err != nil || !bound) {
		s.fsys.drop(cmd.SessionID, cmd.Generation, minted, "open did not bind it")
	}
	s.auditOpen(c, cmd, minted != "", bound, err)
	if err == nil && res.Created && policy.Lifetime == protocol.LifetimeConnection {
		// Only the connection whose open created the generation owns it: another
		// connection's open of it reuses it, and that connection's end must not end it.
		s.own(c, cmd.SessionID, cmd.Generation)
	}
	return res, err
}

// openBound parses the open's descriptor, if any, against this host incarnation and opens.
func (s *Server) openBound(ctx context.Context, p *protocol.OpenPayload, req *session.OpenRequest) (*protocol.OpenResult, error) {
	if raw := p.ToolDescriptor(); raw != nil {
		d, e := tooladapter.ParseDescriptor(raw, tooladapter.Binding{
			HostInstanceID: s.hostID, SessionID: req.SessionID, Generation: req.Generation})
		if e != nil {
			return nil, e
		}
		req.Policy.ToolAdapter = d.Summary().Canonical()
		req.Tools = d
	}
	return s.sessions.Open(ctx, *req)
}

// respond builds the response to cmd from its handler's result.
func (s *Server) respond(cmd *protocol.Command, data any, err error) *protocol.Response {
	// The response and its sequence share one allocation.
	st := &struct {
		resp protocol.Response
		seq  uint64
	}{resp: protocol.Response{
		ProtocolVersion: cmd.Version.Raw,
		Kind:            protocol.KindResponse,
		RequestID:       cmd.RequestID,
		HostInstanceID:  s.hostID,
	}}
	resp := &st.resp
	if cmd.HasSession {
		resp.SessionID = cmd.SessionID
	}
	if err != nil {
		resp.Error = s.wireError(cmd, err)
	} else {
		resp.OK, resp.Data = true, data
	}
	if cmd.HasSession {
		if seq, ok := s.sessions.Sequence(cmd.SessionID); ok {
			st.seq = seq
			resp.Sequence = &st.seq
		}
	}
	return resp
}

// wireError maps a handler error to its wire form. Errors without a protocol code are logged
// here, with their cause, and answered as internal_error without detail.
func (s *Server) wireError(cmd *protocol.Command, err error) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	s.log.Error("command failed", "operation", cmd.Operation, "requestId", cmd.RequestID, "err", err)
	return protocol.AsError(err)
}

func (s *Server) run(ctx context.Context, c *conn, cmd *protocol.Command) (any, error) {
	switch cmd.Operation {
	case protocol.OpHandshake:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return s.handshake(cmd.Version), nil

	case protocol.OpOpen:
		var p protocol.OpenPayload
		if e := protocol.DecodePayload(cmd, &p); e != nil {
			return nil, e
		}
		policy, e := p.Validate(cmd.Version)
		if e != nil {
			return nil, e
		}
		if e := s.checkOpenRoom(policy.Room); e != nil {
			return nil, e
		}
		return s.open(ctx, c, cmd, &p, policy)

	case protocol.OpInvokeTool:
		if c != nil {
			var done func()
			ctx, done = c.tools.track(ctx, cmd.RequestID)
			defer done()
		}
		return s.invokeTool(ctx, c, cmd)

	case protocol.OpAbortTool:
		return c.abortTool(cmd)

	case protocol.OpStatus:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		if !cmd.HasSession {
			return s.host(cmd.Version.V2()), nil
		}
		return s.sessions.Session(cmd.SessionID, cmd.Generation, cmd.HasGeneration)

	case protocol.OpAttach:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return s.sessions.Attach(cmd.SessionID, cmd.Generation, c)

	case protocol.OpDetach:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return s.sessions.Detach(cmd.SessionID, cmd.Generation, c)

	case protocol.OpClose:
		var p protocol.ClosePayload
		if e := protocol.DecodePayload(cmd, &p); e != nil {
			return nil, e
		}
		return s.sessions.Close(cmd.SessionID, cmd.Generation, p.Retain())

	case protocol.OpDrain:
		var p protocol.DrainPayload
		if e := protocol.DecodePayload(cmd, &p); e != nil {
			return nil, e
		}
		ms, e := p.Validate()
		if e != nil {
			return nil, e
		}
		return s.sessions.Drain(time.Duration(ms) * time.Millisecond), nil

	case protocol.OpListSessions:
		var p protocol.ListSessionsPayload
		if e := protocol.DecodePayload(cmd, &p); e != nil {
			return nil, e
		}
		limit, e := p.Validate()
		if e != nil {
			return nil, e
		}
		return s.sessions.List(p.Cursor, limit)

	case protocol.OpDescribeSession:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		d, err := s.sessions.Describe(cmd.SessionID)
		if err != nil {
			return nil, err
		}
		d.HostDeniesProposals = s.gate.Host().DeniesProposals()
		return d, nil

	case protocol.OpRegisterAdapter, protocol.OpRemoveAdapter, protocol.OpListAdapters, protocol.OpAdapterLogs, protocol.OpApproveAdapter,
		protocol.OpListCapabilities, protocol.OpDescribeCapability, protocol.OpObserveCapability, protocol.OpInvokeCapability:
		return s.runAdapters(ctx, c, cmd)

	case protocol.OpRoomStatus, protocol.OpCreateRoom, protocol.OpListRooms, protocol.OpShowRoom, protocol.OpCloseRoom,
		protocol.OpInviteRoom, protocol.OpJoinRoom, protocol.OpRemoveRoomMember, protocol.OpPublishCapability, protocol.OpUnpublishCapability,
		protocol.OpListRoomCapabilities, protocol.OpObserveRoomCapability, protocol.OpInvokeRoomCapability,
		protocol.OpFabricStatus,
		protocol.OpAdmitBusHost, protocol.OpListBusHosts, protocol.OpRemoveBusHost:
		return s.runRooms(ctx, cmd)
	case protocol.OpListApprovals, protocol.OpDecideApproval, protocol.OpListRememberedApprovals, protocol.OpForgetApproval:
		return s.runApprovals(cmd)
	case protocol.OpRoomUILogin:
		return s.uiLogin(cmd)

	case protocol.OpProposeAdapter, protocol.OpListProposals:
		return s.runProposals(c, cmd)

	case protocol.OpWake:
		var p protocol.WakePayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		return s.sessions.Wake(ctx, session.WakeRequest{
			SessionID: cmd.SessionID, Generation: cmd.Generation, IdempotencyKey: cmd.IdempotencyKey,
			RequestID: cmd.RequestID, Payload: &p,
		})

	case protocol.OpSteer, protocol.OpFollowUp:
		var p protocol.MessagePayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		return s.sessions.Control(cmd.SessionID, cmd.Generation, cmd.Operation, cmd.IdempotencyKey, p.Message)

	case protocol.OpAbort:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		return s.sessions.Abort(cmd.SessionID, cmd.Generation)

	case protocol.OpTicket:
		var p protocol.TicketPayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		return s.sessions.Ticket(p.TicketID)

	case protocol.OpReconcile:
		var p protocol.ReconcilePayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		return s.sessions.Reconcile(p.TicketID, p.Outcome)
	}
	// ParseCommand admits only operations of the table above.
	return nil, protocol.Errorf(protocol.CodeUnknownOperation, "unknown operation").With("operation", cmd.Operation)
}

// handshake describes this host to a client of the given version. A 2.x client also learns the
// versions the host speaks, under both names the sources use.
func (s *Server) handshake(v protocol.Version) *protocol.Handshake {
	h := &protocol.Handshake{
		ProtocolVersion: protocol.Version1,
		PackageVersion:  s.version,
		GoVersion:       runtime.Version(),
		Capabilities: protocol.Capabilities{
			Operations: protocol.Operations(v.Major),
			Transport:  "unix-ndjson",
			Durable:    true,
			AgentTurns: true,
		},
		Limits: s.wireLimits(),
		Host:   s.host(v.V2()),
	}
	if v.V2() {
		yes := true
		h.ProtocolVersion = protocol.Version2
		h.SupportedVersions = protocol.SupportedVersions
		h.SupportedProtocolVersions = protocol.SupportedVersions
		h.Capabilities.HostToolAdapter = &yes
		ops := len(tooladapter.Operations)
		h.Capabilities.HostToolOperationCount = &ops
		// Every session snapshot of a generation with an adapter connection carries its
		// hostToolAdapterQueue (internal/session/view.go).
		h.Capabilities.HostToolAdapterQueueTelemetry = &yes
		h.Capabilities.HostToolAdapterRecommendedQueueLimits = &protocol.QueueLimits{
			MaxConcurrentRequests: tooladapter.RecommendedMaxConcurrentRequests,
			MaxQueuedRequests:     tooladapter.RecommendedMaxQueuedRequests,
		}
		h.Capabilities.ConfiguredOpen = &yes
		h.Capabilities.SessionDir = &yes
	}
	return h
}

func sessionOpen(cmd *protocol.Command, policy *protocol.Policy) session.OpenRequest {
	return session.OpenRequest{
		SessionID:  cmd.SessionID,
		Generation: cmd.Generation,
		Version:    cmd.Version,
		Policy:     policy,
	}
}
