package daemon

// This file writes the audit journal (internal/audit): the gate's hook that writes every
// call's record before its adapter gets it and makes it durable with its outcome's before the
// answer leaves (one fdatasync per call, shared by the calls that end together), the records of
// room calls this host makes, and the events (sessions, grants, adapters, rooms, bus hosts)
// and decisions the daemon's operations cause, through Server.auditEvent.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/web"
)

// AuditConfig configures the audit journal; a nil *AuditConfig keeps none (airlockd keeps
// one unless --audit=false).
type AuditConfig struct {
	// Dir is the journal directory; "" is audit/ in the state directory.
	Dir string
	// RecordArgs keeps each call's canonical arguments, up to MaxArgsBytes, beside their
	// digest (airlockd --audit-args).
	RecordArgs   bool
	MaxArgsBytes int
	// HeadEvery is how often the chain head is exported to the log while it moves
	// (audit.DefaultHeadEvery when zero); it is exported once more at shutdown.
	HeadEvery time.Duration
	// HeadFile, when set, also receives each exported head (audit.WriteHeadFile).
	HeadFile string
	// Journal tunes rotation and retention; its RecordArgs, MaxArgsBytes and OnSync are
	// the daemon's.
	Journal audit.Options
}

// Operations (target.op) of the records the daemon writes beside the fs operations.
const (
	auditOpCapInvoke   = "capability.invoke"
	auditOpCapObserve  = "capability.observe"
	auditOpRoomMade    = "room.call.made"     // a room call this host made, as the caller
	auditOpRoomProvide = "room.call.provided" // a room call this host provided (door room)
)

// auditOutcomeOK is the outcome of an effect or event that succeeded.
const auditOutcomeOK = "ok"

// auditLog is the daemon's journal and what writes to it. A nil *auditLog records nothing.
type auditLog struct {
	j   *audit.Journal
	log *slog.Logger
	// interval is true under --audit-sync=interval: an outcome's append does not wait for
	// an fdatasync, so a call ends on the adapter connection's reader (offReader).
	interval bool
	// started maps a call admitted by the gate to the seq of its started record, from its
	// Before to its After (the gate passes the same *gate.Call to both).
	started sync.Map // *gate.Call → uint64
	// made holds the record of a room call the connection's reader recorded but could not
	// send without waiting, for the handler goroutine that sends it (startRoomCall).
	made sync.Map // *protocol.Command → *roomCallRecord
	// finishing are the goroutines offReader started; closeAudit waits for them before it
	// closes the journal.
	finishing sync.WaitGroup
}

// defer_ hands rec to the handler that will make cmd's room call.
func (a *auditLog) defer_(cmd *protocol.Command, rec *roomCallRecord) {
	if a != nil && rec != nil {
		a.made.Store(cmd, rec)
	}
}

// deferred returns the record defer_ left for cmd, if any.
func (a *auditLog) deferred(cmd *protocol.Command) *roomCallRecord {
	if a == nil {
		return nil
	}
	if v, ok := a.made.LoadAndDelete(cmd); ok {
		return v.(*roomCallRecord)
	}
	return nil
}

// openAudit opens the journal: Open checks the newest segment's chain and cuts a torn tail;
// a broken chain fails the start with audit_chain_broken.
func (d *Daemon) openAudit() error {
	ac := d.cfg.Audit
	if ac == nil {
		return nil
	}
	dir := ac.Dir
	if dir == "" {
		dir = audit.DirIn(d.cfg.StateDir)
	}
	opt := ac.Journal
	opt.RecordArgs, opt.MaxArgsBytes = ac.RecordArgs, ac.MaxArgsBytes
	// d.srv.prom is set before the journal opens and never changes (startMetrics).
	if prom := d.srv.prom; prom != nil {
		opt.OnSync = prom.ObserveAuditAppend
	}
	// Open checks the newest segment and its link to the one before; VerifyTail checks both
	// newest segments whole, in time bounded by two segments.
	if tail, err := audit.VerifyTail(dir); err == nil && tail.Break != nil {
		return protocol.Errorf(audit.CodeChainBroken,
			"the audit journal in %s is broken: %s; run 'airlock audit verify --dir %s', keep the evidence, and move the directory aside to start a new chain",
			dir, tail.Break, dir)
	}
	j, rep, err := audit.Open(dir, opt)
	if err != nil {
		return err
	}
	// The head file is written now, not first in 5 minutes: a path it cannot be written to
	// refuses the start, where it would have failed unseen but for a warning at each export.
	if ac.HeadFile != "" {
		if err := audit.WriteHeadFile(ac.HeadFile, rep.Head); err != nil {
			j.Close()
			return err
		}
	}
	if rep.TornBytes > 0 {
		d.log.Warn("audit journal: cut a torn tail (a record being written when the daemon stopped)",
			"segment", rep.TornSegment, "bytes", rep.TornBytes)
	}
	if rep.RemovedEmpty != "" {
		d.log.Warn("audit journal: removed an empty newest segment", "segment", rep.RemovedEmpty)
	}
	d.log.Info("audit journal open", "dir", dir, "head", rep.Head.String(), "recordArgs", ac.RecordArgs, "sync", opt.Sync.String())
	a := &auditLog{j: j, log: d.log, interval: opt.Sync == audit.SyncInterval}
	d.srv.audit = a
	d.srv.gate.AddHook(a)
	return nil
}

// startAuditExport runs the head's export until ctx ends (at shutdown, after the last call
// was answered); d.auditDone is closed when it has exported the final head.
func (d *Daemon) startAuditExport(ctx context.Context) {
	a := d.srv.audit
	if a == nil {
		close(d.auditDone)
		return
	}
	ac := d.cfg.Audit
	go func() {
		defer close(d.auditDone)
		a.j.ExportHeads(ctx, ac.HeadEvery, func(h audit.Head) {
			d.log.Info("audit head", "head", h.String(), "segment", h.Segment, "time", h.Time)
			if ac.HeadFile != "" {
				if err := audit.WriteHeadFile(ac.HeadFile, h); err != nil {
					d.log.Warn("audit head not written", "file", ac.HeadFile, "err", err)
				}
			}
		})
	}()
}

// closeAudit stops the head's export (which exports the final head) and closes the journal.
func (d *Daemon) closeAudit() {
	if d.stopAuditExport != nil {
		d.stopAuditExport()
		<-d.auditDone
	}
	if a := d.srv.audit; a != nil {
		a.finishing.Wait()
		if err := a.j.Close(); err != nil {
			d.log.Error("audit journal did not close cleanly", "err", err)
		}
	}
}

var _ gate.Hook = (*auditLog)(nil)

func auditDoor(d gate.Door) audit.Door {
	switch d {
	case gate.DoorMCP:
		return audit.DoorMCP
	case gate.DoorTurn:
		return audit.DoorTurn
	case gate.DoorRoom:
		return audit.DoorRoom
	}
	return audit.DoorOwner
}

// callEntry is the record of c: its door and actor (exe, the peer's executable), its target,
// its arguments and key.
func callEntry(kind audit.Kind, c *gate.Call, exe string) audit.Entry {
	a := c.Actor
	e := audit.Entry{Kind: kind, Door: auditDoor(a.Door), Args: c.Args, IdempotencyKey: c.Key, Actor: auditActor(a, exe)}
	switch c.Kind {
	case gate.KindTool:
		e.Target = audit.Target{Op: c.Operation, Path: c.Path}
	case gate.KindObserve:
		e.Target = audit.Target{Op: auditOpCapObserve, Capability: c.Capability}
	default:
		e.Target = audit.Target{Op: auditOpCapInvoke, Capability: c.Capability, Action: c.Action}
	}
	if a.Door == gate.DoorRoom {
		e.Target.Op = auditOpRoomProvide
		if c.Kind == gate.KindObserve {
			e.Target.Action = "observe"
		}
	}
	return e
}

// Before records that c is about to reach its adapter; it returns once the record is
// written, not waiting for its fdatasync: After's outcome record, synced before the answer
// leaves, makes both durable with one. An error refuses the call (record_failed).
func (a *auditLog) Before(_ context.Context, c *gate.Call) error {
	e := callEntry(audit.KindStarted, c, c.Actor.Executable())
	ref, err := a.write(e)
	if err != nil {
		return err
	}
	a.started.Store(c, startedCall{seq: ref.Seq, exe: e.Actor.Exe})
	return nil
}

// startedCall is what After needs of Before's record: its seq, and the executable it read.
type startedCall struct {
	seq uint64
	exe string
}

// After records how c ended: the outcome of a call Before recorded, or the policy's refusal
// of one that never reached Before (a decision).
func (a *auditLog) After(c *gate.Call, o gate.Outcome) {
	code := o.Code
	if code == "" {
		code = auditOutcomeOK
	}
	v, ok := a.started.LoadAndDelete(c)
	if !ok {
		if o.Stage != gate.StagePolicy {
			return // Before failed: nothing was recorded, and nothing ran
		}
		e := callEntry(audit.KindDecision, c, c.Actor.Executable())
		e.Outcome, e.Duration = code, o.Duration
		a.appendLogged(e)
		return
	}
	sc := v.(startedCall)
	e := callEntry(audit.KindOutcome, c, sc.exe)
	e.Ref, e.Outcome, e.Duration = sc.seq, code, o.Duration
	// An outcome carries no arguments: its started record has their digest.
	e.Args, e.IdempotencyKey = nil, ""
	a.appendLogged(e)
}

// append appends e, returning once it is as durable as the journal's sync mode says
// (audit.Journal.Append). An entry the journal refuses for its shape (a path or client name
// with a character the journal does not keep, a peer's executable whose path is not UTF-8)
// is appended again without those fields, and only those, rather than refusing the call: the
// arguments' digest still pins a path, and a record without an executable beats none.
func (a *auditLog) append(e audit.Entry) (audit.Ref, error) { return a.add(a.j.Append, e) }

// write is append of a started record: it returns once e is written, and e becomes durable
// with the outcome's record (audit.Journal.AppendNoWait).
func (a *auditLog) write(e audit.Entry) (audit.Ref, error) { return a.add(a.j.AppendNoWait, e) }

func (a *auditLog) add(appendFn func(audit.Entry) (audit.Ref, error), e audit.Entry) (audit.Ref, error) {
	ref, err := appendFn(e)
	if errors.Is(err, &protocol.Error{Code: audit.CodeInvalidEntry}) {
		// Leave out what the peer chose that the journal does not keep, and only that.
		if !audit.PathKept(e.Target.Path) {
			e.Target.Path = ""
		}
		if !audit.NameKept(e.Actor.MCPClient) {
			e.Actor.MCPClient = ""
		}
		if !audit.PathKept(e.Actor.Exe) {
			e.Actor.Exe = ""
		}
		ref, err = appendFn(e)
	}
	if err != nil {
		a.log.Error("audit journal: record not written", "kind", e.Kind, "op", e.Target.Op, "err", err)
	}
	return ref, err
}

// appendLogged appends e where nothing can be refused any more (the effect has happened):
// a failure is logged by append.
func (a *auditLog) appendLogged(e audit.Entry) { _, _ = a.append(e) }

// auditEvent records an event or a decision that is no call at the gate: a session opened or
// closed, a grant, an adapter registered, approved or removed, a room joined or left, a bus
// host admitted or removed; and (kind decision) an approval asked, decided or timed out.
// outcome is "" for ok. It returns once the record is on disk; without a journal it does
// nothing. A failure is logged, not returned: the operation it records has happened.
func (s *Server) auditEvent(kind audit.Kind, door audit.Door, actor audit.Actor, target audit.Target, outcome string) {
	if s.audit == nil {
		return
	}
	if outcome == "" {
		outcome = auditOutcomeOK
	}
	s.audit.appendLogged(audit.Entry{Kind: kind, Door: door, Actor: actor, Target: target, Outcome: outcome})
}

// commandActor is the journal's actor of a command on c: the peer's pid and executable, the
// session it names, its MCP client. c is nil for the web page's commands (door web).
func (s *Server) commandActor(c *conn, cmd *protocol.Command) (audit.Door, audit.Actor) {
	if c == nil {
		return audit.DoorWeb, audit.Actor{}
	}
	ga := s.actor(c, cmd)
	return auditDoor(ga.Door), auditActor(ga, ga.Executable())
}

// auditActor is the journal's actor of a gate actor whose executable is exe ("" when not
// read); a generation below 1 is none.
func auditActor(a gate.Actor, exe string) audit.Actor {
	out := audit.Actor{PID: a.PID, Exe: exe, Session: a.Session, Room: a.Room, Host: a.Host, MCPClient: a.Client}
	if a.Generation > 0 {
		out.Generation = uint64(a.Generation)
	}
	return out
}

// auditedCommands are the administrative commands recorded as events, each with its
// target's op. An open is recorded by auditOpen, with its grant.
var auditedCommands = map[string]string{
	protocol.OpClose:               "session.close",
	protocol.OpRegisterAdapter:     "adapter.register",
	protocol.OpApproveAdapter:      "adapter.approve",
	protocol.OpCreateRoom:          "room.create",
	protocol.OpJoinRoom:            "room.join",
	protocol.OpCloseRoom:           "room.close",
	protocol.OpRemoveRoomMember:    "room.remove",
	protocol.OpPublishCapability:   "room.publish",
	protocol.OpUnpublishCapability: "room.unpublish",
	protocol.OpAdmitBusHost:        "bus.admit",
	protocol.OpRemoveBusHost:       "bus.remove",
}

// auditCommand records the event of an administrative command once it has run (ok or its
// error code): which of them are events, and what each targets, is auditedCommands. Payload
// members that may hold a secret (a tool descriptor's handle, a join code) are never read.
func (s *Server) auditCommand(c *conn, cmd *protocol.Command, err error) {
	if s.audit == nil {
		return
	}
	op, ok := auditedCommands[cmd.Operation]
	if !ok {
		return
	}
	door, actor := s.commandActor(c, cmd)
	// Only these members are read: names and ids the operator chose, never a descriptor,
	// a key, a code or arguments.
	var p struct {
		Name         string `json:"name"`
		Room         string `json:"room"`
		CapabilityID string `json:"capabilityId"`
		HostID       string `json:"hostId"`
	}
	_ = json.Unmarshal(cmd.Payload, &p)
	target := audit.Target{Op: op, Adapter: p.Name, Capability: p.CapabilityID}
	if p.Room != "" {
		actor.Room = p.Room
	}
	if p.HostID != "" {
		actor.Host = p.HostID
	}
	code := ""
	if err != nil {
		code = protocol.AsError(err).Code
	}
	s.auditEvent(audit.KindEvent, door, actor, target, code)
}

// auditRemoval records that an adapter registration stopped serving (adapterHost's
// OnAdapterRemoved): removed by the operator, replaced, its lease, room or session ended.
// The reason is the record's outcome.
func (s *Server) auditRemoval(r capclient.Removal) {
	s.auditEvent(audit.KindEvent, audit.DoorDaemon,
		audit.Actor{Session: r.Registration.Session, Generation: uint64(max(r.Registration.Generation, 0)), Room: r.Registration.Room},
		audit.Target{Op: "adapter.remove", Adapter: r.Registration.Name}, r.Reason)
}

// auditChanged records that an adapter's executable or script was found changed since it
// was approved (capclient's OnChanged): it does not start until approveAdapter.
func (s *Server) auditChanged(r capclient.Registration) {
	s.auditEvent(audit.KindEvent, audit.DoorDaemon,
		audit.Actor{Session: r.Session, Generation: uint64(max(r.Generation, 0)), Room: r.Room},
		audit.Target{Op: "adapter.changed", Adapter: r.Name}, capadapter.CodeAdapterChanged)
}

// roomCallRecord is a room call this host makes, recorded before it leaves for the bus.
type roomCallRecord struct {
	a     *auditLog
	e     audit.Entry
	seq   uint64
	start time.Time
}

// auditRoomCall records the started room call of a command on c (nil: the web page's) or
// of an agent turn (door turn, actor given). It returns nil when the journal is off; a
// non-nil error means the call must not be made.
func (s *Server) auditRoomCall(door audit.Door, actor audit.Actor, roomID, provider, capability, action string, args json.RawMessage) (*roomCallRecord, error) {
	if s.audit == nil {
		return nil, nil
	}
	if action == "" {
		action = "observe"
	}
	actor.Room, actor.Host = roomID, provider
	e := audit.Entry{Kind: audit.KindStarted, Door: door, Actor: actor, Args: args,
		Target: audit.Target{Op: auditOpRoomMade, Capability: capability, Action: action}}
	ref, err := s.audit.write(e) // durable with done's outcome, before the answer leaves
	if err != nil {
		return nil, protocol.Retryable(gate.CodeRecordFailed, "the call could not be recorded, so it was not made")
	}
	return &roomCallRecord{a: s.audit, e: e, seq: ref.Seq, start: time.Now()}, nil
}

// done records the room call's outcome before its answer leaves: code "" is ok.
func (r *roomCallRecord) done(err error) {
	if r == nil {
		return
	}
	e := r.e
	e.Kind, e.Ref, e.Args, e.Duration = audit.KindOutcome, r.seq, nil, time.Since(r.start)
	e.Outcome = auditOutcomeOK
	if err != nil {
		if code := protocol.AsError(roomError(err)).Code; code != "" {
			e.Outcome = code
		}
	}
	r.a.appendLogged(e)
}

// auditOpen records an open that reached the session manager (session.open, ok or its
// code) and, when it bound a tool adapter, the grant (session.grant; adapter airlock-fs when
// airlockd minted it). Neither record holds the descriptor or its handle.
func (s *Server) auditOpen(c *conn, cmd *protocol.Command, managed, bound bool, err error) {
	if s.audit == nil {
		return
	}
	door, actor := s.commandActor(c, cmd)
	code := ""
	if err != nil {
		code = protocol.AsError(err).Code
	}
	s.auditEvent(audit.KindEvent, door, actor, audit.Target{Op: "session.open"}, code)
	if err == nil && bound {
		t := audit.Target{Op: "session.grant"}
		if managed {
			t.Adapter = "airlock-fs"
		}
		s.auditEvent(audit.KindEvent, door, actor, t, "")
	}
}

// webAuditError is the page's form of a room call the journal could not record.
func webAuditError(err error) error {
	pe := protocol.AsError(err)
	return &web.Error{Code: pe.Code, Message: pe.Message, Err: err}
}

// webHistory is the web page's history view: the journal's files (nil without a journal).
func (d *Daemon) webHistory() web.History {
	if d.srv.audit == nil {
		return nil
	}
	return web.JournalHistory(d.srv.audit.j.Dir())
}

// offReader runs finish(a copy of data) on a goroutine of its own when the journal records
// the call x, and reports whether it did. The outcome's record is made durable before the
// answer leaves (an fdatasync shared by the outcomes that wait together); on the adapter
// connection's reader, which ends every call of that connection, each outcome would wait
// for its own fdatasync in turn, and the calls of 64 clients would be answered one sync at a
// time. The goroutine is the journal's (closeAudit waits for it); an owner-socket caller's
// handlers group also counts the call until finish answers it. Under --audit-sync=interval
// an outcome waits for no fdatasync, and the call ends on the reader, as without a journal.
func (s *Server) offReader(x *gated, data json.RawMessage, finish func(json.RawMessage)) bool {
	if s.audit == nil || s.audit.interval || !x.admitted {
		return false
	}
	data = bytes.Clone(data)
	s.audit.finishing.Go(func() { finish(data) })
	return true
}
