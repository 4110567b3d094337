package daemon

// This file owns connection-scoped session generations (open with lifetime "connection"):
// which connection opened each, and closing them when it goes.
//
// Such a generation lives as long as the owner-socket connection whose open created it. When
// that connection ends for any reason (the client closed it, its process was killed, the
// daemon is stopping), the generation is closed without retaining its records, which ends its
// grant (managedfs.go); a daemon that did not see the connection end (it was killed) deletes
// the generation at its next start (session.Recover). The connection is held in the pool
// while it owns a generation, as an attached one is: eviction must not end a session that a
// client is using.

import (
	"errors"
	"sync"

	"github.com/airlockhq/airlock/internal/protocol"
)

// owners maps each connection to the connection-scoped generations it opened.
type owners struct {
	mu sync.Mutex
	by map[*conn]map[string]int64 // conn → session → generation
}

// own records that c opened generation of session id with lifetime "connection". It runs on
// the command's goroutine, before the connection's close can run (close waits for its
// commands).
func (s *Server) own(c *conn, id string, generation int64) {
	s.owned.mu.Lock()
	defer s.owned.mu.Unlock()
	if s.owned.by == nil {
		s.owned.by = make(map[*conn]map[string]int64)
	}
	m := s.owned.by[c]
	if m == nil {
		m = make(map[string]int64)
		s.owned.by[c] = m
	}
	if _, held := m[id]; !held {
		c.slot.Hold() // released with the connection
	}
	m[id] = max(m[id], generation)
}

// endOwned closes and deletes the generations c owns; a generation replaced or closed
// meanwhile by another client is left as it is.
func (s *Server) endOwned(c *conn) {
	s.owned.mu.Lock()
	m := s.owned.by[c]
	delete(s.owned.by, c)
	s.owned.mu.Unlock()
	for id, generation := range m {
		_, err := s.sessions.Close(id, generation, false)
		var pe *protocol.Error
		switch {
		case err == nil:
			s.log.Info("connection-scoped session closed with its connection", "sessionId", id, "generation", generation)
		case errors.As(err, &pe) && (pe.Code == protocol.CodeSessionNotFound || pe.Code == protocol.CodeStaleGeneration):
		default:
			s.log.Warn("connection-scoped session not closed with its connection", "sessionId", id, "generation", generation, "err", err)
		}
	}
}
