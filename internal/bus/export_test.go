package bus

import "time"

// SetRearmAfter sets how late c's answers are re-armed first (Conn.respondMsg).
func SetRearmAfter(c *Conn, d time.Duration) { c.rearmAfter = d }

// NumClients is how many client connections s has registered.
func NumClients(s *Server) int { return s.ns.NumClients() }
