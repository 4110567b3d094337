package toolclient

// This file owns what goes to the adapter after bind: the writer goroutine, its batching of
// control frames before invokes, and the direct non-blocking write of a caller's small frame.

import (
	"net"
	"slices"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// writeTimeoutFactor sets the write deadline to this many request timeouts. Requests time out
// on their own clock from admission; the deadline only detects an adapter that stopped reading,
// and it is long enough that requests stuck behind a blocked write time out first, unsent and
// therefore not indeterminate (TestWriteBlockedTimeout).
const writeTimeoutFactor = 2

// maxDirectWrite is the largest invoke frame a caller writes itself. It is well below a Unix
// socket's send buffer, so such a write normally completes at once; larger frames go through
// the writer goroutine.
const maxDirectWrite = 32 << 10

func (c *Conn) writeLoop() {
	defer c.wg.Done()
	defer close(c.writerDone)
	var batch net.Buffers
	for {
		c.mu.Lock()
		for (c.state == stateOpen || c.state == stateClosing) && (c.writing || c.partial == nil && len(c.control) == 0 && len(c.outbox) == 0) {
			c.cond.Wait()
		}
		if c.state != stateOpen && c.state != stateClosing {
			c.mu.Unlock()
			return
		}
		// One write takes the rest of a partly written frame, then the control frames, then
		// invokes: the first in any case, more while the batch stays small enough to go out at
		// once, since a frame taken for writing counts as possibly received.
		batch = batch[:0]
		size := 0
		if c.partial != nil {
			batch = append(batch, c.partial)
			size += len(c.partial)
			c.partial = nil
		}
		for _, b := range c.control {
			batch = append(batch, b)
			size += len(b)
		}
		last := c.revoke && len(c.control) > 0
		c.control = nil
		n := 0
		for _, cl := range c.outbox {
			if n > 0 && size+len(cl.frame) > maxDirectWrite {
				break
			}
			cl.written = true
			batch = append(batch, cl.frame)
			size += len(cl.frame)
			n++
		}
		c.outbox = c.outbox[n:]
		c.writing = true
		c.mu.Unlock()
		if !c.write(batch) || last {
			return
		}
	}
}

// write writes a batch of frames from the writer goroutine; the caller has set c.writing, so it
// is the only writer. It clears c.writing and reports whether the write succeeded (a failure
// has failed the connection).
func (c *Conn) write(batch net.Buffers) bool {
	_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeoutFactor * c.timeout))
	_, err := batch.WriteTo(c.nc)
	// Cleared again: writeDirect sets no deadline, and a past one fails its write.
	_ = c.nc.SetWriteDeadline(time.Time{})
	c.mu.Lock()
	defer c.unlock()
	c.writing = false
	if err != nil {
		c.fail(protocol.Retryable(tooladapter.CodeConnectionFailed, "cannot write to the tool adapter"))
		return false
	}
	return true
}

// writeDirect makes one non-blocking attempt to write the invoke frame of cl from the calling
// goroutine; admit has set c.writing and cl.written. What the socket does not take at once is
// left to the writer goroutine: a frame of which nothing went out goes back to the head of the
// outbox, unsent, and times out as such; the rest of a partly written frame is written before
// anything else, since the stream is corrupt until it is complete.
func (c *Conn) writeDirect(cl *call) {
	n, err := c.direct.Write(cl.frame) // admit writes directly only when c.direct is Ready
	c.mu.Lock()
	defer c.unlock()
	c.writing = false
	switch {
	case err != nil:
		c.fail(protocol.Retryable(tooladapter.CodeConnectionFailed, "cannot write to the tool adapter"))
		return
	case n == 0:
		if cl.state == callActive {
			cl.written = false
			c.outbox = slices.Insert(c.outbox, 0, cl)
		}
	case n < len(cl.frame):
		c.partial = cl.frame[n:]
	}
	if c.partial != nil || len(c.control) > 0 || len(c.outbox) > 0 {
		c.cond.Signal()
	}
}
