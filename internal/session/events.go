package session

// This file owns attachments and events: subscribers, Attach and Detach, and the emission of
// a session's sequenced events to every subscriber.

import "github.com/airlockhq/airlock/internal/protocol"

// Subscriber receives the events of the sessions a connection attached to.
type Subscriber interface {
	// Deliver queues one encoded event line for sending. It is called with the Manager's lock
	// held, so it must not block and must not call back into the Manager.
	Deliver(line []byte)
}

// EventEncoder turns an event into the line every subscriber gets, or nil to drop it. The
// daemon's encoder enforces the event size limit once per event, not once per subscriber.
type EventEncoder func(*protocol.Event) []byte

// Attach subscribes sub to the events of exactly this session generation.
func (m *Manager) Attach(id string, generation int64, sub Subscriber) (*protocol.AttachResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return nil, e
	}
	rt.subs[sub] = struct{}{}
	return &protocol.AttachResult{Attached: true, Generation: rt.generation, Sequence: rt.sequence}, nil
}

// Detach ends sub's subscription to this session generation.
func (m *Manager) Detach(id string, generation int64, sub Subscriber) (*protocol.DetachResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return nil, e
	}
	_, was := rt.subs[sub]
	delete(rt.subs, sub)
	return &protocol.DetachResult{Detached: was, Generation: rt.generation, Sequence: rt.sequence}, nil
}

// DetachAll drops every subscription of sub, when its connection ends.
func (m *Manager) DetachAll(sub Subscriber) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rt := range m.sessions {
		delete(rt.subs, sub)
	}
}

// emitLocked assigns the next sequence of rt to an event and delivers it to rt's subscribers.
// m.mu must be held, which orders every session's events.
func (m *Manager) emitLocked(rt *runtime, name, requestID string, data any) {
	rt.sequence++
	if len(rt.subs) == 0 {
		return
	}
	ev := &protocol.Event{
		ProtocolVersion: rt.version,
		Kind:            protocol.KindEvent,
		Event:           name,
		HostInstanceID:  m.cfg.HostInstanceID,
		SessionID:       rt.id,
		Generation:      rt.generation,
		Sequence:        rt.sequence,
		RequestID:       requestID,
		Data:            data,
	}
	line := m.cfg.EncodeEvent(ev)
	if line == nil {
		m.metrics["eventsDropped"]++
		return
	}
	for sub := range rt.subs {
		sub.Deliver(line)
	}
}

// Sequence returns the current sequence of a resident session, for response envelopes.
func (m *Manager) Sequence(id string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rt := m.sessions[id]; rt != nil {
		return rt.sequence, true
	}
	return 0, false
}
