package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/roomhost"
	"github.com/airlockhq/airlock/internal/turn"
)

// RoomsConfig configures the daemon's room service; a nil *RoomsConfig runs none.
type RoomsConfig struct {
	// NATSVia joins the embedded bus of the daemon whose owner socket this is (a daemon of
	// the same user on this machine) instead of embedding one: this host is admitted there
	// through admitBusHost.
	NATSVia string
	// Listen is the embedded server's address; empty means 127.0.0.1 on a random port.
	Listen string
	// Fabric makes the embedded server a node of a room fabric (bus.LoadFabric); exclusive
	// with NATSVia and Listen.
	Fabric *bus.Fabric
	// ApprovalWait bounds how long this host's calls wait for a provider's per-call approval.
	ApprovalWait time.Duration
	// InviteTTL is how long a join code stays valid.
	InviteTTL time.Duration
}

// startRooms starts the room service after the adapters are restored, so the restored
// publications find their capabilities. A failure is logged and leaves the room operations
// answering unavailable.
func (d *Daemon) startRooms(ctx context.Context) {
	rc := d.cfg.Rooms
	if rc == nil {
		return
	}
	defer func() {
		d.srv.withdrawMu.Lock()
		d.srv.roomsPending, d.srv.withdrawnEarly = false, nil
		d.srv.withdrawMu.Unlock()
	}()
	var via roomhost.Admission
	if rc.NATSVia != "" {
		via = socketAdmission(rc.NATSVia)
	}
	caps := d.srv.adapters.sup
	svc, err := roomhost.Start(ctx, roomhost.Config{
		StateDir: d.cfg.StateDir, Store: d.store, Capabilities: caps, Logger: d.log,
		Invoker: &providerInvoker{srv: d.srv, sup: caps}, ErrorCode: providerErrorCode,
		Via: via, Listen: rc.Listen, Fabric: rc.Fabric, ApprovalWait: rc.ApprovalWait, InviteTTL: rc.InviteTTL,
		RoomClosed: d.roomClosed, Approver: roomApprover{d.srv.approvals},
		NodeStarted: d.srv.node.Store,
	})
	d.srv.node.Store(nil)
	if err != nil {
		d.log.Error("room service not started; room operations answer unavailable", "err", err)
		d.srv.roomsFailed.Store(&err)
		return
	}
	// A withdrawal while the service started (a lease that ended, a room-tied adapter removed)
	// did not reach it: it holds the publications it restored until told.
	d.srv.withdrawMu.Lock()
	early := d.srv.withdrawnEarly
	d.srv.withdrawnEarly = nil
	if len(early) > 0 {
		svc.Withdraw(early)
	}
	d.srv.rooms.Store(svc)
	d.srv.withdrawMu.Unlock()
	st := svc.Status()
	d.log.Info("room service started", "hostId", st.HostID, "natsUrl", st.NATSURL, "embedded", st.Embedded)
	d.removeForGoneRooms(ctx)
}

// roomClosed is the room service's RoomClosed hook: the journal records it (room.closed),
// the temporary adapters tied to the room
// stop, their registrations go, and their publications in other rooms are withdrawn (by the
// removal hook, before each child stops).
func (d *Daemon) roomClosed(ctx context.Context, id string) {
	d.srv.auditEvent(audit.KindEvent, audit.DoorDaemon, audit.Actor{Room: id}, audit.Target{Op: "room.closed"}, "")
	d.srv.approvals.End(approval.Scope{Room: id})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adapterStopTimeout)
	defer cancel()
	names, err := d.srv.adapters.RemoveForRoom(ctx, id)
	if err != nil {
		d.log.Error("adapters tied to a closed room not all removed", "room", id, "err", err)
	}
	for _, n := range names {
		d.log.Info("temporary adapter removed: its room closed", "adapter", n, "room", id)
	}
}

// removeForGoneRooms removes, at start, the registrations tied to a room this host is no
// longer in (closed while the daemon was down, or never created or joined): the stored rooms
// are the truth, so a room that is stored but could not be rejoined keeps its adapters.
func (d *Daemon) removeForGoneRooms(ctx context.Context) {
	regs, err := d.store.Registrations()
	if err != nil {
		d.log.Error("capability adapter registrations not readable", "err", err)
		return
	}
	recs, err := d.store.Rooms()
	if err != nil {
		d.log.Error("rooms not readable; temporary adapters tied to rooms are kept", "err", err)
		return
	}
	stored := make(map[string]bool, len(recs))
	for _, r := range recs {
		stored[r.ID] = true
	}
	gone := map[string]bool{}
	for _, r := range regs {
		if r.Room != "" && !stored[r.Room] && !gone[r.Room] {
			gone[r.Room] = true
			d.roomClosed(ctx, r.Room)
		}
	}
}

// stopRooms closes the room service, if it runs.
func (d *Daemon) stopRooms() {
	if svc := d.srv.rooms.Swap(nil); svc != nil {
		if err := svc.Close(); err != nil {
			d.log.Warn("room service did not stop cleanly", "err", err)
		}
	}
}

// withdraw withdraws capabilities from every room: their adapter is being removed or
// replaced. Without the room service (before it starts, or with rooms off) their stored
// publications are deleted, so that they do not come back when it starts, and a service
// that is starting is told once it is installed.
func (s *Server) withdraw(capabilities []string) {
	if len(capabilities) == 0 {
		return
	}
	s.withdrawMu.Lock()
	svc := s.rooms.Load()
	if svc == nil && s.roomsPending {
		s.withdrawnEarly = append(s.withdrawnEarly, capabilities...)
		slices.Sort(s.withdrawnEarly)
		s.withdrawnEarly = slices.Compact(s.withdrawnEarly)
	}
	s.withdrawMu.Unlock()
	if svc != nil {
		svc.Withdraw(capabilities)
		return
	}
	for _, c := range capabilities {
		if _, err := s.adapters.store.DeletePublications("", c); err != nil {
			s.log.Error("withdrawn publications not deleted from the store", "capability", c, "err", err)
		}
	}
}

// roomTools gives a session's turns the tools of its room. The room service may start after
// the session (it starts once recovery is done), so it is looked up at each turn; a turn
// without it, or of a room this host left, offers no room tools.
func (s *Server) roomTools(roomID, id string, generation int64) turn.RoomTools {
	return &sessionRoom{srv: s, room: roomID, id: id, generation: generation}
}

type sessionRoom struct {
	srv        *Server
	room       string
	id         string // the session and generation whose turns call
	generation int64
}

func (r *sessionRoom) Tools(ctx context.Context) []turn.RoomTool {
	if svc := r.srv.rooms.Load(); svc != nil {
		return svc.AgentTools(r.room).Tools(ctx)
	}
	return nil
}

func (r *sessionRoom) Call(ctx context.Context, t turn.RoomTool, args json.RawMessage) (json.RawMessage, *protocol.Error) {
	svc := r.srv.rooms.Load()
	if svc == nil {
		return nil, protocol.Retryable(room.CodeUnavailable, "the room service is not running")
	}
	rec, rerr := r.srv.auditRoomCall(audit.DoorTurn, audit.Actor{Session: r.id, Generation: uint64(max(r.generation, 0))},
		t.Room, t.Provider, t.Capability, t.Action, args)
	if rerr != nil {
		return nil, protocol.AsError(rerr)
	}
	start := time.Now()
	res, e := svc.AgentTools(r.room).Call(ctx, t, args)
	var err error
	if e != nil {
		err = e
	}
	rec.done(err)
	r.srv.meterRoomCall(metrics.DoorTurn, t.Action != "", start, err)
	return res, e
}

// checkOpenRoom refuses an open, or an adapter registration tied to a room, that names a
// room this host is not in (unknown_room), or any room while the room service is not
// running (unavailable). An empty roomID passes.
func (s *Server) checkOpenRoom(roomID string) *protocol.Error {
	if roomID == "" {
		return nil
	}
	svc := s.rooms.Load()
	if svc == nil {
		return protocol.Retryable(room.CodeUnavailable, "the room service is not running")
	}
	if !svc.InRoom(roomID) {
		return protocol.Errorf(roomhost.CodeUnknownRoom, "this host is not in that room")
	}
	return nil
}

// RoomResult is the data of createRoom and joinRoom.
type RoomResult struct {
	Room roomhost.Room `json:"room"`
}

// RoomList is the data of listRooms.
type RoomList struct {
	Rooms []roomhost.Room `json:"rooms"`
}

// RoomClosed is the data of closeRoom.
type RoomClosed struct {
	Room   string `json:"room"`
	Closed bool   `json:"closed"`
}

// PublishResult is the data of publishCapability.
type PublishResult struct {
	Capability roomhost.Capability `json:"capability"`
}

// UnpublishResult is the data of unpublishCapability.
type UnpublishResult struct {
	Unpublished bool `json:"unpublished"`
}

// RoomCapabilityList is the data of listRoomCapabilities.
type RoomCapabilityList struct {
	Room         string                `json:"room"`
	Capabilities []roomhost.Capability `json:"capabilities"`
}

// RoomCallResult is the data of observeRoomCapability and invokeRoomCapability.
type RoomCallResult struct {
	Room         string          `json:"room"`
	Provider     string          `json:"provider"`
	CapabilityID string          `json:"capabilityId"`
	Action       string          `json:"action,omitempty"`
	Result       json.RawMessage `json:"result"`
}

// BusHostList is the data of listBusHosts.
type BusHostList struct {
	Hosts []roomhost.BusHost `json:"hosts"`
}

// BusHostAdmitted is the data of admitBusHost: the URL of the bus the host may now join.
type BusHostAdmitted struct {
	NATSURL string `json:"natsUrl"`
}

// RoomMemberRemoved is the data of removeRoomMember: removed is false for a host that was not
// a member.
type RoomMemberRemoved struct {
	Room    string `json:"room"`
	HostID  string `json:"hostId"`
	Removed bool   `json:"removed"`
}

// BusHostRemoved is the data of removeBusHost.
type BusHostRemoved struct {
	HostID  string `json:"hostId"`
	Removed bool   `json:"removed"`
}

// socketAdmission admits this host to the embedded bus of the daemon at a socket path: one
// admitBusHost on a connection of its own per call. The socket is that daemon's owner socket,
// which serves only its own user (peer credentials), so only a daemon of the same user is
// admitted.
type socketAdmission string

// AdmitBusHost implements roomhost.Admission.
func (path socketAdmission) AdmitBusHost(ctx context.Context, req roomhost.AdmitRequest) (string, error) {
	c, err := client.Dial(ctx, string(path))
	if err != nil {
		return "", fmt.Errorf("--nats-via: the daemon at %s: %w", string(path), err)
	}
	defer c.Close()
	p := protocol.AdmitBusHostPayload{HostID: string(req.Host), Nkey: req.Nkey}
	for _, m := range req.Rooms {
		p.Rooms = append(p.Rooms, protocol.BusHostRoom{Room: m.Room, Owner: m.Owner})
	}
	r, err := c.Call(ctx, client.Command{Operation: protocol.OpAdmitBusHost, Payload: &p})
	if err != nil {
		return "", fmt.Errorf("--nats-via: the daemon at %s: %w", string(path), err)
	}
	if err := r.Err(); err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return "", roomhost.ErrorOf(pe.Code, "the daemon at "+string(path)+": "+pe.Message)
		}
		return "", err
	}
	var out BusHostAdmitted
	if err := r.Decode(&out); err != nil || out.NATSURL == "" {
		return "", fmt.Errorf("--nats-via: the daemon at %s answered no bus URL", string(path))
	}
	return out.NATSURL, nil
}

// roomError maps a room service error to the wire: its code, its message, and retryable for
// the conditions that pass.
func roomError(err error) error {
	var re *roomhost.Error
	if !errors.As(err, &re) {
		return err
	}
	if re.Code() == room.CodeInternal {
		return protocol.Wrap(protocol.Errorf(protocol.CodeInternal, "internal error"), err)
	}
	e := &protocol.Error{Code: re.Code(), Message: re.Message()}
	switch re.Code() {
	case room.CodeUnavailable, room.CodeBusy, room.CodeTimeout:
		e.Retryable = true
	}
	return e
}

func (s *Server) runRooms(ctx context.Context, cmd *protocol.Command) (any, error) {
	data, err := s.roomOp(ctx, cmd)
	if err != nil {
		return nil, roomError(err)
	}
	return data, nil
}

// startRoomCall runs an admitted observeRoomCapability or invokeRoomCapability command
// without a goroutine of its own, as startCapability does the local calls: the reader
// goroutine decodes and checks it, and the room service authenticates the call and puts it
// on the bus at once; the answer is sent by the goroutine that ends the call, normally the
// bus connection's reply goroutine once the provider's reply is verified. A call that cannot
// start without waiting (the room service not running, the provider's key record still to be
// read from the bus) runs on a goroutine of its own like any other room operation. The
// handlers group counts the call until its answer is queued, so that close answers it first.
func (c *conn) startRoomCall(cmd *protocol.Command) {
	c.handlers.Add(1)
	svc := c.srv.rooms.Load()
	if svc == nil {
		go c.runHandler(cmd)
		return
	}
	var p protocol.RoomCallPayload
	if e := protocol.DecodePayload(cmd, &p); e != nil {
		c.endCapability(cmd, nil, e)
		return
	}
	invoke := cmd.Operation == protocol.OpInvokeRoomCapability
	if e := p.Validate(invoke); e != nil {
		c.endCapability(cmd, nil, e)
		return
	}
	adoor, actor := c.srv.commandActor(c, cmd)
	rec, e := c.srv.auditRoomCall(adoor, actor, p.Room, p.Provider, p.CapabilityID, p.Action, p.Args)
	if e != nil {
		c.endCapability(cmd, nil, e)
		return
	}
	door, start := string(c.srv.actor(c, cmd).Door), time.Now()
	done := func(raw json.RawMessage, err error) {
		rec.done(err)
		if err != nil {
			err = roomError(err)
			c.srv.meterRoomCall(door, invoke, start, err)
			c.endCapability(cmd, nil, err)
			return
		}
		c.srv.meterRoomCall(door, invoke, start, nil)
		c.endCapability(cmd, &RoomCallResult{Room: p.Room, Provider: p.Provider, CapabilityID: p.CapabilityID, Action: p.Action, Result: raw}, nil)
	}
	var started bool
	if invoke {
		started = svc.StartInvoke(c.ctx, p.Room, p.Provider, p.CapabilityID, p.Action, p.Args, done)
	} else {
		started = svc.StartObserve(c.ctx, p.Room, p.Provider, p.CapabilityID, done)
	}
	if !started {
		// The call was not sent: the handler makes it, under the record made above.
		c.srv.audit.defer_(cmd, rec)
		go c.runHandler(cmd)
	}
}

// runHandler runs cmd on a handler goroutine counted in c.handlers.
func (c *conn) runHandler(cmd *protocol.Command) {
	defer c.handlers.Done()
	c.run(cmd)
}

func decodeRoom[P any, PP interface {
	*P
	Validate() *protocol.Error
}](cmd *protocol.Command) (*P, *protocol.Error) {
	p := new(P)
	if e := protocol.DecodePayload(cmd, p); e != nil {
		return nil, e
	}
	if e := PP(p).Validate(); e != nil {
		return nil, e
	}
	return p, nil
}

// roomsDown is the refusal of a room operation while the room service does not run: it is
// starting (its fabric node waiting for a JetStream leader), or it did not start, and why.
func (s *Server) roomsDown() *protocol.Error {
	if s.node.Load() != nil {
		return protocol.Retryable(room.CodeUnavailable, "the room service is starting: its fabric node waits for a JetStream leader (airlock fabric status shows the node's routes)")
	}
	if err := s.roomsFailed.Load(); err != nil {
		return protocol.Retryable(room.CodeUnavailable, "the room service is not running: it did not start: %v", *err)
	}
	return protocol.Retryable(room.CodeUnavailable, "the room service is not running")
}

func (s *Server) roomOp(ctx context.Context, cmd *protocol.Command) (any, error) {
	svc := s.rooms.Load()
	if svc == nil {
		if node := s.node.Load(); node != nil {
			// The service waits for its fabric node's peers: the node's status says why.
			if cmd.Operation == protocol.OpFabricStatus {
				if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
					return nil, e
				}
				st, err := node.Status()
				if err != nil {
					return nil, protocol.Wrap(protocol.Errorf(protocol.CodeInternal, "internal error"), err)
				}
				return &st, nil
			}
		}
		return nil, s.roomsDown()
	}
	switch cmd.Operation {
	case protocol.OpRoomStatus, protocol.OpListRooms, protocol.OpFabricStatus:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		switch cmd.Operation {
		case protocol.OpRoomStatus:
			return svc.Status(), nil
		case protocol.OpFabricStatus:
			st, err := svc.FabricStatus()
			if err != nil {
				return nil, err
			}
			return &st, nil
		default:
			rooms, err := svc.Rooms(ctx)
			return &RoomList{Rooms: rooms}, err
		}
	case protocol.OpCreateRoom:
		p, e := decodeRoom[protocol.CreateRoomPayload](cmd)
		if e != nil {
			return nil, e
		}
		r, err := svc.Create(ctx, p.Room, p.Title)
		if err != nil {
			return nil, err
		}
		return &RoomResult{Room: r}, nil
	case protocol.OpShowRoom, protocol.OpCloseRoom, protocol.OpListRoomCapabilities:
		p, e := decodeRoom[protocol.RoomPayload](cmd)
		if e != nil {
			return nil, e
		}
		switch cmd.Operation {
		case protocol.OpShowRoom:
			d, err := svc.Room(ctx, p.Room)
			if err != nil {
				return nil, err
			}
			return &d, nil
		case protocol.OpCloseRoom:
			if err := svc.CloseRoom(ctx, p.Room); err != nil {
				return nil, err
			}
			return &RoomClosed{Room: p.Room, Closed: true}, nil
		default:
			caps, err := svc.Capabilities(ctx, p.Room)
			if err != nil {
				return nil, err
			}
			return &RoomCapabilityList{Room: p.Room, Capabilities: caps}, nil
		}
	case protocol.OpInviteRoom:
		p, e := decodeRoom[protocol.InviteRoomPayload](cmd)
		if e != nil {
			return nil, e
		}
		inv, err := svc.Invite(ctx, p.Room, p.Name)
		if err != nil {
			return nil, err
		}
		return &inv, nil
	case protocol.OpJoinRoom:
		p, e := decodeRoom[protocol.JoinRoomPayload](cmd)
		if e != nil {
			return nil, e
		}
		r, err := svc.Join(ctx, p.Code)
		if err != nil {
			return nil, err
		}
		return &RoomResult{Room: r}, nil
	case protocol.OpRemoveRoomMember:
		p, e := decodeRoom[protocol.RoomMemberPayload](cmd)
		if e != nil {
			return nil, e
		}
		removed, err := svc.RemoveMember(ctx, p.Room, room.HostID(p.HostID))
		if err != nil {
			return nil, err
		}
		return &RoomMemberRemoved{Room: p.Room, HostID: p.HostID, Removed: removed}, nil
	case protocol.OpPublishCapability:
		p, e := decodeRoom[protocol.PublishCapabilityPayload](cmd)
		if e != nil {
			return nil, e
		}
		pub := roomhost.Publish{Room: p.Room, Capability: p.CapabilityID, Actions: p.Actions, Observe: p.Observe, ApproveEach: p.ApproveEach}
		for _, m := range p.Members {
			pub.Members = append(pub.Members, room.HostID(m))
		}
		c, err := svc.Publish(ctx, pub)
		if err != nil {
			return nil, err
		}
		return &PublishResult{Capability: c}, nil
	case protocol.OpUnpublishCapability:
		p, e := decodeRoom[protocol.RoomCapabilityPayload](cmd)
		if e != nil {
			return nil, e
		}
		was, err := svc.Unpublish(ctx, p.Room, p.CapabilityID)
		if err != nil {
			return nil, err
		}
		return &UnpublishResult{Unpublished: was}, nil
	case protocol.OpObserveRoomCapability, protocol.OpInvokeRoomCapability:
		var p protocol.RoomCallPayload
		if e := protocol.DecodePayload(cmd, &p); e != nil {
			return nil, e
		}
		invoke := cmd.Operation == protocol.OpInvokeRoomCapability
		if e := p.Validate(invoke); e != nil {
			return nil, e
		}
		rec := s.audit.deferred(cmd)
		var e error
		if rec == nil {
			// Run here only under a test's dispatch hook: the connection is not known.
			rec, e = s.auditRoomCall(audit.DoorOwner, audit.Actor{}, p.Room, p.Provider, p.CapabilityID, p.Action, p.Args)
		}
		if e != nil {
			return nil, e
		}
		var raw json.RawMessage
		var err error
		start := time.Now()
		if invoke {
			raw, err = svc.Invoke(ctx, p.Room, p.Provider, p.CapabilityID, p.Action, p.Args)
		} else {
			raw, err = svc.Observe(ctx, p.Room, p.Provider, p.CapabilityID)
		}
		rec.done(err)
		s.meterRoomCall(string(s.actor(nil, cmd).Door), invoke, start, roomError(err))
		if err != nil {
			return nil, err
		}
		return &RoomCallResult{Room: p.Room, Provider: p.Provider, CapabilityID: p.CapabilityID, Action: p.Action, Result: raw}, nil
	case protocol.OpAdmitBusHost:
		p, e := decodeRoom[protocol.AdmitBusHostPayload](cmd)
		if e != nil {
			return nil, e
		}
		req := roomhost.AdmitRequest{Host: room.HostID(p.HostID), Nkey: p.Nkey}
		for _, r := range p.Rooms {
			req.Rooms = append(req.Rooms, bus.Membership{Room: r.Room, Owner: r.Owner})
		}
		url, err := svc.AdmitBusHost(ctx, req)
		if err != nil {
			return nil, err
		}
		return &BusHostAdmitted{NATSURL: url}, nil
	case protocol.OpListBusHosts:
		if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
			return nil, e
		}
		hosts, err := svc.BusHosts()
		if err != nil {
			return nil, err
		}
		return &BusHostList{Hosts: hosts}, nil
	case protocol.OpRemoveBusHost:
		p, e := decodeRoom[protocol.BusHostPayload](cmd)
		if e != nil {
			return nil, e
		}
		if err := svc.RemoveBusHost(room.HostID(p.HostID)); err != nil {
			return nil, err
		}
		return &BusHostRemoved{HostID: p.HostID, Removed: true}, nil
	}
	return nil, protocol.Errorf(protocol.CodeUnknownOperation, "unknown operation").With("operation", cmd.Operation)
}
