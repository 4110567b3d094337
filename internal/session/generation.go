package session

// This file owns the generation rules: Open and Close, what makes a generation resident or
// retires it, and the errors for stale, busy and unknown generations.

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
	"github.com/airlockhq/airlock/internal/transcript"
	"github.com/airlockhq/airlock/internal/turn"
)

// OpenRequest is an admitted open.
type OpenRequest struct {
	SessionID  string
	Generation int64
	Version    protocol.Version
	Policy     *protocol.Policy
	// Tools is the validated host tool-adapter descriptor when the policy grants one; its
	// summary is already in Policy.ToolAdapter.
	Tools *tooladapter.Descriptor
	// ToolsBound, when set, is set to true by an Open that succeeds having bound Tools to the
	// generation (created, or a failed connection replaced), and left false by one that
	// reused the generation's connection: the caller then knows whether the grant behind
	// Tools is in use.
	ToolsBound *bool
}

// Open applies the generation rules: a lower generation than the session's is stale; the same
// generation with the same policy is reused (created:false while resident); the same generation
// with another policy conflicts; a higher generation replaces the resident one.
//
// A policy that grants a host tool adapter is connected and bound before anything is
// persisted, so a refused binding leaves no trace; the connection is revoked whenever the
// generation stops being resident.
//
// A session quarantined by a restart reopens only as the same generation with the retained
// policy: a tool-adapter session needs a descriptor bound to this host incarnation
// (tool_adapter_reprovision_required without one, session_policy_conflict for another policy),
// a session whose provider key was missing needs it present. Success clears the quarantine.
func (m *Manager) Open(ctx context.Context, req OpenRequest) (*protocol.OpenResult, error) {
	release := m.lockSession(req.SessionID)
	defer release()
	var ending *runtime // the generation this open replaces, while it admits no wake
	defer func() {
		if ending != nil {
			m.mu.Lock()
			ending.ending = false
			m.mu.Unlock()
		}
	}()

	digest := req.Policy.Digest()
	rec, err := m.cfg.Store.Record(req.SessionID)
	if err != nil {
		return nil, err
	}

	m.mu.Lock()
	rt := m.sessions[req.SessionID]
	current, known := int64(0), false
	switch {
	case rt != nil:
		current, known = rt.generation, true
	case rec != nil:
		current, known = rec.Generation, true
	}
	if known && req.Generation < current {
		m.mu.Unlock()
		return nil, staleGeneration(current, req.Generation)
	}
	sameDormant := rt == nil && rec != nil && req.Generation == current
	if sameDormant && rec.Recovery != nil && rec.Recovery.Code == protocol.CodeReprovisionRequired && req.Tools == nil {
		m.mu.Unlock()
		return nil, protocol.Retryable(protocol.CodeReprovisionRequired,
			"generation %d held a host tool adapter before the restart; reopen it with a descriptor bound to this host", current).
			With("generation", current)
	}
	if known && req.Generation == current {
		policyDigest := digest
		if rt != nil {
			policyDigest = rt.digest
		} else {
			policyDigest = rec.PolicyDigest
		}
		if policyDigest != digest {
			m.mu.Unlock()
			return nil, protocol.Errorf(protocol.CodeSessionPolicyConflict,
				"generation %d of this session was opened with a different policy", current)
		}
		if rt != nil && (rt.tools == nil || (rt.tools.Err() == nil && !rt.revoked)) {
			rt.lastUsed = m.now()
			m.metrics["openReused"]++
			res := &protocol.OpenResult{Created: false, Session: m.snapshotLocked(rt)}
			m.mu.Unlock()
			return res, nil
		}
		if rt != nil {
			// The same generation whose adapter connection failed or was revoked: bind it
			// again, unless the host is draining, which is what revoked it.
			if e := m.admitting(); e != nil {
				m.mu.Unlock()
				return nil, e
			}
			m.mu.Unlock()
			return m.rebind(ctx, rt, req)
		}
	}
	if e := m.admitting(); e != nil {
		m.mu.Unlock()
		return nil, e
	}
	if rt == nil {
		if len(m.sessions)+m.reserved >= m.cfg.MaxSessions {
			m.mu.Unlock()
			return nil, protocol.Retryable(protocol.CodeSessionCapacity, "the host holds its maximum of %d resident sessions", m.cfg.MaxSessions).
				With("maxSessions", m.cfg.MaxSessions)
		}
		m.reserved++
		defer func() {
			m.mu.Lock()
			m.reserved--
			m.mu.Unlock()
		}()
	} else if busyLocked(rt) {
		m.mu.Unlock()
		return nil, protocol.Retryable(protocol.CodeSessionBusy, "generation %d has a turn running or queued", rt.generation)
	} else {
		// From here on the generation being replaced admits no wake; a failed open lets it
		// go on.
		rt.ending = true
		ending = rt
	}
	m.mu.Unlock()

	if e := checkCwd(req.Policy.Cwd); e != nil {
		return nil, e
	}
	completer, e := m.modelFor(req.Policy.Model)
	if e != nil {
		return nil, e
	}
	var ref *protocol.ConversationRef
	if sameDormant {
		ref = rec.Conversation // the generation's own transcript, exactly
	}
	conv, hist, err := m.conversation(ctx, req.SessionID, req.Policy, ref)
	if err != nil {
		return nil, openError(err)
	}
	var conn *toolclient.Conn
	if req.Tools != nil {
		c, e := m.bind(ctx, req)
		if e != nil {
			closeConv(conv)
			return nil, e
		}
		conn = c
	}

	now := m.now().UTC()
	next := &protocol.CatalogRecord{
		SessionID:       req.SessionID,
		Name:            req.Policy.Name,
		Generation:      req.Generation,
		Residency:       protocol.Resident,
		State:           protocol.StateIdle,
		ProtocolVersion: req.Version.Raw,
		PolicyDigest:    digest,
		Policy:          *req.Policy,
		CreatedAt:       now,
		UpdatedAt:       now,
		LastUsedAt:      now,
		Conversation:    refOf(conv),
	}
	if rec != nil {
		next.CreatedAt = rec.CreatedAt
		next.Revision = rec.Revision
		next.LastTerminal = rec.LastTerminal
	}
	var manifest *store.Manifest
	if req.Policy.Mode != protocol.ModeMemory {
		manifest = &store.Manifest{
			ProtocolVersion: req.Version.Raw,
			SessionID:       req.SessionID,
			Generation:      req.Generation,
			Policy:          *req.Policy,
			Conversation:    next.Conversation,
			CreatedAt:       now,
			UpdatedAt:       now,
		}
	}
	if err := m.cfg.Store.SaveSession(next, manifest); err != nil {
		if conn != nil {
			m.cfg.Tools.Revoke(req.Tools.Incarnation())
		}
		closeConv(conv)
		return nil, err
	}

	m.mu.Lock()
	old := m.sessions[req.SessionID]
	if old != nil {
		m.failQueueLocked(old, protocol.Retryable(protocol.CodeAborted, "the session generation was replaced"))
		m.retireLocked(old, protocol.SessionClosedData{RetainSession: true, Reason: ReasonReplaced})
	}
	ending = nil
	if known && req.Generation > current {
		defer m.generationEnded(req.SessionID, req.Generation-1) // runs last, without mu
	}
	defer m.revoke(old)
	defer m.mu.Unlock()
	rt = m.residentRuntime(req.SessionID, req.Generation, req.Version.Raw, req.Policy, digest)
	rt.tools, rt.conv, rt.history = conn, conv, hist
	rt.spec = m.turnSpec(rt, completer, conn)
	if old != nil {
		// The sequence is per session, not per generation: a client that follows a session
		// across a replacement never sees it go back.
		rt.sequence = old.sequence
	}
	m.sessions[req.SessionID] = rt
	m.known[req.SessionID] = struct{}{}
	m.clearQuarantineLocked(req.SessionID)
	m.metrics["openCreated"]++
	if conn != nil && req.ToolsBound != nil {
		*req.ToolsBound = true
	}
	m.log.Info("session opened", "sessionId", req.SessionID, "generation", req.Generation)
	return &protocol.OpenResult{Created: true, Session: m.snapshotLocked(rt)}, nil
}

// residentRuntime builds the runtime of a generation becoming resident.
func (m *Manager) residentRuntime(id string, generation int64, version string, policy *protocol.Policy, digest string) *runtime {
	return &runtime{
		id:         id,
		generation: generation,
		version:    version,
		policy:     *policy,
		rules:      m.parseRules(id, policy.Rules),
		digest:     digest,
		state:      protocol.StateIdle,
		lastUsed:   m.now(),
		subs:       make(map[Subscriber]*attachment),
	}
}

// parseRules parses a generation's stored policy document. One that no longer parses (a
// catalog written by a daemon with other rules) fails closed: every call is denied.
func (m *Manager) parseRules(id string, raw []byte) *policy.Policy {
	if len(raw) == 0 {
		return nil
	}
	p, err := policy.Parse(raw)
	if err != nil {
		m.log.Warn("session policy unreadable; denying every call", "sessionId", id, "err", err)
		p, _ = policy.Named("deny-all")
	}
	return p
}

// Rules returns the policy of exactly this resident generation (nil: none of its own).
func (m *Manager) Rules(id string, generation int64) (*policy.Policy, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.usableLocked(id, generation)
	if e != nil {
		return nil, e
	}
	return rt.rules, nil
}

// toolInvoker is what a turn of rt calls for a host tool: conn behind the gate when the
// daemon installed one.
func (m *Manager) toolInvoker(rt *runtime, conn *toolclient.Conn) turn.Invoker {
	if m.cfg.GateTools != nil {
		return m.cfg.GateTools(rt.id, rt.generation, rt.rules)
	}
	return conn
}

// turnSpec fixes what every turn of a generation runs with; nil without a model.
func (m *Manager) turnSpec(rt *runtime, c turn.Completer, conn *toolclient.Conn) *turn.Spec {
	policy := &rt.policy
	if c == nil || policy.Model == nil {
		return nil
	}
	spec := &turn.Spec{
		Model:              c,
		ModelID:            policy.Model.ID,
		Reasoning:          reasoningEffort(policy.Model.ThinkingLevel),
		SystemPrompt:       policy.SystemPrompt,
		MaxToolOutputBytes: m.cfg.MaxToolOutputBytes,
	}
	if conn != nil {
		sum := conn.Summary()
		spec.Tools, spec.Operations, spec.Limits = m.toolInvoker(rt, conn), sum.Operations, sum.Limits
	}
	if policy.Room != "" && m.cfg.RoomTools != nil {
		spec.Room = m.cfg.RoomTools(policy.Room, rt.id, rt.generation)
	}
	if m.cfg.HostTools != nil {
		spec.Host = m.cfg.HostTools(rt.id, rt.generation, rt.rules)
	}
	return spec
}

// busyLocked reports whether a runtime has a turn running or wakes queued. m.mu must be held.
func busyLocked(rt *runtime) bool {
	return rt.active != nil || len(rt.queue) > 0 || rt.admitting > 0
}

// openError keeps a coded transcript error and classes anything else as open_failed.
func openError(err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	return protocol.Errorf(protocol.CodeOpenFailed, "the session's transcript could not be opened")
}

func closeConv(f *transcript.File) {
	if f != nil {
		f.Close()
	}
}

// Reasons a sessionClosed event gives.
const (
	ReasonClosed   = "closed"
	ReasonReplaced = "replaced"
	ReasonDrained  = "shutdown"
)

// retireLocked ends a resident runtime: its subscribers get a last sessionClosed event and are
// dropped, so that older attachments become inert. m.mu must be held.
func (m *Manager) retireLocked(rt *runtime, data protocol.SessionClosedData) {
	rt.state = protocol.StateClosing
	data.Session = m.snapshotLocked(rt)
	data.Session.Sequence++ // the snapshot describes the session as of this, its last event
	m.emitLocked(rt, protocol.EventSessionClosed, "", data)
	m.attachments -= len(rt.subs)
	rt.subs = nil
	delete(m.sessions, rt.id)
	if !rt.working && rt.active == nil {
		closeConv(rt.conv) // else the worker closes it when it stops
	}
}

// checkCwd refuses a cwd that is not an existing directory.
func checkCwd(cwd string) *protocol.Error {
	fi, err := os.Stat(cwd)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return protocol.Errorf(protocol.CodeOpenFailed, "cwd does not exist").With("field", "payload.cwd")
	case err != nil:
		return protocol.Errorf(protocol.CodeOpenFailed, "cwd cannot be read").With("field", "payload.cwd")
	case !fi.IsDir():
		return protocol.Errorf(protocol.CodeOpenFailed, "cwd is not a directory").With("field", "payload.cwd")
	}
	return nil
}

func staleGeneration(current, received int64) *protocol.Error {
	return protocol.Errorf(protocol.CodeStaleGeneration, "generation %d is older than the current generation %d", received, current).
		With("currentGeneration", current).With("receivedGeneration", received)
}

// Close ends the resident generation of a session. With retain it keeps the catalog record,
// dormant; without it deletes the session's durable records, resident or not.
func (m *Manager) Close(id string, generation int64, retain bool) (*protocol.CloseResult, error) {
	release := m.lockSession(id)
	defer release()

	rec, err := m.cfg.Store.Record(id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if !m.completed {
		// Recovery is still deciding what each session becomes.
		m.mu.Unlock()
		return nil, protocol.Retryable(protocol.CodeHostNotReady, "host is recovering").With("phase", m.recovery.Phase)
	}
	rt := m.sessions[id]
	if rt == nil && rec == nil {
		m.mu.Unlock()
		return nil, notFound(id)
	}
	current := int64(0)
	if rt != nil {
		current = rt.generation
	} else {
		current = rec.Generation
	}
	m.mu.Unlock()
	if generation < current {
		return nil, staleGeneration(current, generation)
	}
	if generation > current {
		return nil, notFound(id).With("currentGeneration", current).With("receivedGeneration", generation)
	}
	// No wake is admitted while the records change; a failed close lets the generation go on.
	setEnding := func(v bool) {
		if rt != nil {
			m.mu.Lock()
			rt.ending = v
			m.mu.Unlock()
		}
	}
	setEnding(true)
	if rt != nil {
		// Wakes admitted before ending was set may still be writing their journal entries:
		// the close changes the records only after they are written, so that a delete cannot
		// leave one behind for a session that no longer exists.
		m.mu.Lock()
		for rt.admitting > 0 {
			m.admitted.Wait()
		}
		m.mu.Unlock()
	}

	res := &protocol.CloseResult{Closed: rt != nil}
	if retain {
		if rec != nil && rec.Residency != protocol.Dormant {
			rec.Residency, rec.State = protocol.Dormant, protocol.StateIdle
			rec.UpdatedAt = m.now().UTC()
			if err := m.cfg.Store.SaveSession(rec, nil); err != nil {
				setEnding(false)
				return nil, err
			}
		}
	} else {
		existed, err := m.cfg.Store.DeleteSession(id)
		if err != nil {
			setEnding(false)
			return nil, err
		}
		res.Deleted = existed
	}

	m.mu.Lock()
	if !retain {
		delete(m.known, id)
		m.clearQuarantineLocked(id)
		// The journal went with the session: what is still queued or running ends without
		// a journal record.
		for _, j := range rt.jobsLocked() {
			j.rec.seq = 0
		}
		m.forgetSessionLocked(id)
	}
	var stopped chan struct{}
	if rt != nil && m.sessions[id] == rt {
		m.failQueueLocked(rt, protocol.Retryable(protocol.CodeAborted, "the session was closed"))
		m.retireLocked(rt, protocol.SessionClosedData{RetainSession: retain, Reason: ReasonClosed})
		m.metrics["closed"]++
		if rt.working {
			stopped = rt.stopped
		}
	}
	m.mu.Unlock()
	m.revoke(rt)
	if stopped != nil {
		// The aborted turn records its outcome and closes the transcript; an open of the same
		// generation, which waits for this close, must not meet its last append. Aborting
		// cancels the model call and the tool calls, so the wait is short; it is bounded all
		// the same.
		t := time.NewTimer(closeWait)
		select {
		case <-stopped:
		case <-t.C:
			m.log.Warn("closed session's aborted turn has not stopped", "sessionId", id, "waited", closeWait)
		}
		t.Stop()
	}
	m.generationEnded(id, generation)
	m.log.Info("session closed", "sessionId", id, "generation", generation, "retain", retain)
	return res, nil
}

// generationEnded tells Config.GenerationEnded that generation of session id, and every
// older one, will never be resident again. m.mu must not be held.
func (m *Manager) generationEnded(id string, generation int64) {
	if m.cfg.GenerationEnded != nil {
		m.cfg.GenerationEnded(id, generation)
	}
}

// closeWait bounds how long a close waits for the turn it aborted to stop.
const closeWait = 10 * time.Second

func notFound(id string) *protocol.Error {
	return protocol.Errorf(protocol.CodeSessionNotFound, "no such session").With("sessionId", id)
}

// resident returns the runtime of exactly this generation, or the error that says why there is
// none. m.mu must be held.
func (m *Manager) residentLocked(id string, generation int64, checkGen bool) (*runtime, *protocol.Error) {
	rt := m.sessions[id]
	if rt == nil {
		e := protocol.Errorf(protocol.CodeSessionNotFound, "session is not resident").With("sessionId", id)
		if _, ok := m.known[id]; ok {
			e.With("residency", protocol.Dormant)
		}
		return nil, e
	}
	if checkGen && generation < rt.generation {
		return nil, staleGeneration(rt.generation, generation)
	}
	if checkGen && generation > rt.generation {
		return nil, notFound(id).With("currentGeneration", rt.generation).With("receivedGeneration", generation)
	}
	return rt, nil
}
