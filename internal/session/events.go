package session

// This file owns attachments and events: subscribers, Attach and Detach, and the emission of
// a session's sequenced events to every subscriber.

import "github.com/airlockhq/airlock/internal/protocol"

// Subscriber receives the events of the sessions a connection attached to.
type Subscriber interface {
	// Deliver queues one encoded event line for sending. It is called with the Manager's lock
	// held, so it must not block and must not call back into the Manager.
	Deliver(line []byte)
	// Evict queues line as the subscriber's last and closes its connection once it is out:
	// its attachment made room for another at an attachment bound. It is called with the
	// Manager's lock held, under the same rules as Deliver. The Manager has already dropped
	// every subscription of the subscriber when it calls Evict.
	Evict(line []byte)
	// Peer identifies the subscriber's process (the pid of its connection's peer): the
	// attachment bounds make room at the expense of the process holding the most.
	Peer() int
}

// Attachment bounds by default. Each is below the owner socket's default connection limit
// (64), so attachments can never take every connection (issue 24.3): an attached connection
// is busy and never evicted by the connection pool.
const (
	DefaultMaxAttachmentsPerSession = 8
	DefaultMaxAttachments           = 32
)

// attachment is one subscription of a runtime.
type attachment struct {
	peer int
	at   uint64 // Manager.attachClock at the attach: orders "least recently attached"
}

// EventEncoder turns an event into the line every subscriber gets, or nil to drop it. The
// daemon's encoder enforces the event size limit once per event, not once per subscriber.
type EventEncoder func(*protocol.Event) []byte

// Attach subscribes sub to the events of exactly this session generation.
//
// Attachments are bounded per session (MaxAttachmentsPerSession) and in total
// (MaxAttachments). When a new attachment would pass a bound, one within that bound makes
// room: the least recently attached one of the process holding the most there, counting
// sub's process with this attachment and preferring it on a tie, so that a flood makes room
// out of its own attachments first. Its connection is told why (attachmentEvicted) and
// closed. An attachment on sub's own connection is never chosen, nor the single attachment
// of another process: when only such attachments are left, the attach is refused with
// attachment_capacity instead.
func (m *Manager) Attach(id string, generation int64, sub Subscriber) (*protocol.AttachResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return nil, e
	}
	m.attachClock++
	if a, ok := rt.subs[sub]; ok {
		a.at = m.attachClock
		return &protocol.AttachResult{Attached: true, Generation: rt.generation, Sequence: rt.sequence}, nil
	}
	perSession, total := m.cfg.MaxAttachmentsPerSession, m.cfg.MaxAttachments
	var scope []*runtime
	limit := ""
	switch {
	case len(rt.subs) >= perSession:
		scope, limit = []*runtime{rt}, protocol.AttachmentLimitPerSession
	case m.attachments >= total:
		for _, other := range m.sessions {
			scope = append(scope, other)
		}
		limit = protocol.AttachmentLimitTotal
	}
	if limit != "" {
		victim, vrt := m.attachmentVictimLocked(scope, sub)
		if victim == nil {
			m.metrics["attachmentsRefused"]++
			return nil, protocol.Retryable(protocol.CodeAttachmentCapacity,
				"no attachment can make room: every other process holds a single one within the bound").
				With("limit", limit).With("maxAttachments", total).With("maxAttachmentsPerSession", perSession)
		}
		m.evictLocked(victim, vrt, protocol.AttachmentEvictedData{Limit: limit, MaxAttachments: total, MaxAttachmentsPerSession: perSession})
	}
	rt.subs[sub] = &attachment{peer: sub.Peer(), at: m.attachClock}
	m.attachments++
	return &protocol.AttachResult{Attached: true, Generation: rt.generation, Sequence: rt.sequence}, nil
}

// attachmentVictimLocked chooses the attachment within the runtimes of scope that makes room
// for a new one of sub, and its runtime; nil when none may (see Attach). m.mu must be held.
func (m *Manager) attachmentVictimLocked(scope []*runtime, sub Subscriber) (Subscriber, *runtime) {
	requester := sub.Peer()
	held := map[int]int{requester: 1} // attachments by process within the bound, the new one included
	for _, rt := range scope {
		for _, a := range rt.subs {
			held[a.peer]++
		}
	}
	var (
		victim Subscriber
		vrt    *runtime
		vHeld  int
		vMine  bool
		vAt    uint64
	)
	for _, rt := range scope {
		for s, a := range rt.subs {
			if s == sub {
				continue
			}
			// The largest holder first; on a tie the requester's own, then the least
			// recently attached.
			n, mine := held[a.peer], a.peer == requester
			if victim == nil || n > vHeld || n == vHeld && (mine && !vMine || mine == vMine && a.at < vAt) {
				victim, vrt, vHeld, vMine, vAt = s, rt, n, mine, a.at
			}
		}
	}
	// Another process's single attachment never makes room for a newcomer.
	if victim == nil || vHeld < 2 {
		return nil, nil
	}
	return victim, vrt
}

// evictLocked ends every subscription of sub, which made room for another at a bound, and
// hands its connection the attachmentEvicted event of rt to send before it closes. The event
// carries rt's current sequence: no other subscriber sees it, so it takes none of its own.
// m.mu must be held.
func (m *Manager) evictLocked(sub Subscriber, rt *runtime, data protocol.AttachmentEvictedData) {
	m.detachAllLocked(sub)
	m.metrics["attachmentsEvicted"]++
	line := m.cfg.EncodeEvent(&protocol.Event{
		ProtocolVersion: rt.version,
		Kind:            protocol.KindEvent,
		Event:           protocol.EventAttachmentEvicted,
		HostInstanceID:  m.cfg.HostInstanceID,
		SessionID:       rt.id,
		Generation:      rt.generation,
		Sequence:        rt.sequence,
		Data:            data,
	})
	sub.Evict(line)
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
	if was {
		delete(rt.subs, sub)
		m.attachments--
	}
	return &protocol.DetachResult{Detached: was, Generation: rt.generation, Sequence: rt.sequence}, nil
}

// DetachAll drops every subscription of sub, when its connection ends.
func (m *Manager) DetachAll(sub Subscriber) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.detachAllLocked(sub)
}

func (m *Manager) detachAllLocked(sub Subscriber) {
	for _, rt := range m.sessions {
		if _, ok := rt.subs[sub]; ok {
			delete(rt.subs, sub)
			m.attachments--
		}
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

// Emit delivers an event named name with data to the subscribers of exactly generation of
// resident session id, at the session's next sequence: the daemon tells a session's clients
// that a call of theirs waits for the operator (internal/approval). It reports whether that
// generation is resident. data must be JSON-serializable and hold nothing secret.
func (m *Manager) Emit(id string, generation int64, name string, data any) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return false
	}
	m.emitLocked(rt, name, "", data)
	return true
}
