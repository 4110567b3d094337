package session

// This file owns what the manager shows without changing anything: session snapshots, the
// host view of status, and the durable catalog's listing.

import (
	"sort"

	"github.com/airlockhq/airlock/internal/protocol"
)

func (m *Manager) snapshotLocked(rt *runtime) protocol.SessionSnapshot {
	now := m.now()
	s := protocol.SessionSnapshot{
		SessionID:       rt.id,
		Generation:      rt.generation,
		ProtocolVersion: rt.version,
		Name:            rt.policy.Name,
		State:           rt.state,
		Residency:       protocol.Resident,
		Sequence:        rt.sequence,
		Attached:        len(rt.subs),
		LastUsedAt:      rt.lastUsed.UTC(),
		IdleForMs:       max(0, now.Sub(rt.lastUsed).Milliseconds()),
	}
	if rt.policy.Model != nil {
		s.Model = &protocol.ModelRef{Provider: rt.policy.Model.Provider, ID: rt.policy.Model.ID}
	}
	s.QueuedTurns = len(rt.queue)
	if rt.active != nil {
		s.ActiveRequestID = rt.active.rec.requestID
	}
	s.LastErrorCode = rt.lastError
	if rt.tools != nil {
		s.HostToolAdapterQueue = rt.tools.Telemetry()
	}
	return s
}

// Session returns the snapshot of a resident session. A generation, when given, must be the
// resident one.
func (m *Manager) Session(id string, generation int64, checkGen bool) (*protocol.SessionSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, checkGen)
	if e != nil {
		return nil, e
	}
	s := m.snapshotLocked(rt)
	return &s, nil
}

// HostView is the session part of host status.
type HostView struct {
	Ready       bool
	Draining    bool
	Recovery    protocol.RecoveryHealth
	Sessions    []protocol.SessionSnapshot
	Dormant     int
	ActiveTurns int
	QueuedTurns int
	Metrics     map[string]uint64
}

// Host returns the session part of host status. Sessions are in sessionId order.
func (m *Manager) Host() HostView {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := HostView{
		Draining: m.draining,
		Recovery: m.recoveryLocked(),
		Sessions: make([]protocol.SessionSnapshot, 0, len(m.sessions)),
		Dormant:  len(m.known) - len(m.sessions),
		Metrics:  make(map[string]uint64, len(m.metrics)),

		ActiveTurns: m.activeTurns,
		QueuedTurns: m.queuedTurns,
	}
	v.Ready = !m.draining && v.Recovery.Phase == protocol.PhaseReady
	for _, rt := range m.sessions {
		v.Sessions = append(v.Sessions, m.snapshotLocked(rt))
	}
	sort.Slice(v.Sessions, func(i, j int) bool { return v.Sessions[i].SessionID < v.Sessions[j].SessionID })
	for k, n := range m.metrics {
		v.Metrics[k] = n
	}
	return v
}

// Describe returns the durable record of a session and its snapshot when resident.
func (m *Manager) Describe(id string) (*protocol.SessionDescription, error) {
	rec, err := m.cfg.Store.Record(id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, notFound(id)
	}
	d := &protocol.SessionDescription{Record: *rec}
	m.mu.Lock()
	if rt := m.sessions[id]; rt != nil && rt.generation == rec.Generation {
		s := m.snapshotLocked(rt)
		d.Snapshot = &s
	}
	m.mu.Unlock()
	return d, nil
}

// List returns a page of the durable catalog.
func (m *Manager) List(cursor string, limit int) (*protocol.SessionPage, error) {
	recs, next, err := m.cfg.Store.Page(cursor, limit)
	if err != nil {
		return nil, err
	}
	if recs == nil {
		recs = []protocol.CatalogRecord{}
	}
	return &protocol.SessionPage{Sessions: recs, NextCursor: next}, nil
}
