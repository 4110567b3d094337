package bus

import "time"

// SetRearmAfter sets how late c's answers are re-armed first (Conn.respondMsg).
func SetRearmAfter(c *Conn, d time.Duration) { c.rearmAfter = d }
