package ownersock

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// DeadlineConn is the part of a connection a LineDeadline needs.
type DeadlineConn interface {
	Read(p []byte) (int, error)
	SetReadDeadline(t time.Time) error
}

// LineDeadline reads from a connection and enforces two deadlines on the lines it carries:
// the first line must be complete within First of NewLineDeadline (or of the last Restart),
// and a line, once its first byte arrived, within Line. A connection that never sends a
// command, or trickles one byte at a time, is thus closed in seconds instead of holding its
// slot forever (issue 16). Between lines, after the first, there is no deadline: an attached
// client may stay silent for as long as it likes.
//
// It sets read deadlines only when the state changes, so a client that sends whole lines
// costs no timer. A read that the deadline ends returns a *LineTimeoutError.
//
// Read, FirstLineDone and Restart are for the one reader goroutine; Stop may be called from
// any goroutine.
type LineDeadline struct {
	c           DeadlineConn
	first, line time.Duration

	firstAt   time.Time // deadline of the first line; zero once it is done
	lineAt    time.Time // deadline of the line in progress; zero between lines
	armed     time.Time // the read deadline set on c
	stopped   atomic.Bool
	lastFirst bool // the armed deadline is the first line's
}

// LineTimeoutError reports that a line did not arrive in time.
type LineTimeoutError struct {
	FirstLine bool          // the first line (or, after Restart, the next one) was late
	Limit     time.Duration // the deadline that passed
}

func (e *LineTimeoutError) Error() string {
	if e.FirstLine {
		return fmt.Sprintf("no complete line within %v", e.Limit)
	}
	return fmt.Sprintf("a line was not completed within %v of its first byte", e.Limit)
}

// Timeout reports true: the error is a deadline, as net.Error says.
func (e *LineTimeoutError) Timeout() bool { return true }

// Unwrap returns os.ErrDeadlineExceeded.
func (e *LineTimeoutError) Unwrap() error { return os.ErrDeadlineExceeded }

// NewLineDeadline starts the first line's deadline now. A zero first or line disables that
// deadline.
func NewLineDeadline(c DeadlineConn, first, line time.Duration) *LineDeadline {
	d := &LineDeadline{c: c, first: first, line: line}
	d.Restart()
	return d
}

// Read reads from the connection and updates the deadlines from what it read.
func (d *LineDeadline) Read(p []byte) (int, error) {
	n, err := d.c.Read(p)
	if n > 0 {
		now := time.Now()
		switch i := bytes.LastIndexByte(p[:n], '\n'); {
		case i == n-1:
			d.lineAt = time.Time{}
		case i >= 0 || d.lineAt.IsZero():
			// A new line began in this read.
			if d.line > 0 {
				d.lineAt = now.Add(d.line)
			}
		}
		d.arm()
	}
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() && !d.stopped.Load() && !d.armed.IsZero() {
		if d.lastFirst {
			return n, &LineTimeoutError{FirstLine: true, Limit: d.first}
		}
		return n, &LineTimeoutError{Limit: d.line}
	}
	return n, err
}

// FirstLineDone ends the first line's deadline: the caller got a line it accepts as a command.
func (d *LineDeadline) FirstLineDone() {
	if d.firstAt.IsZero() {
		return
	}
	d.firstAt = time.Time{}
	d.arm()
}

// Restart starts a first-line deadline again, from now: a connection that serves one request
// per line and may idle only briefly between them calls it after each answer.
func (d *LineDeadline) Restart() {
	if d.first > 0 {
		d.firstAt = time.Now().Add(d.first)
	}
	d.arm()
}

// Stop makes the pending and every later read fail at once; the caller is closing.
func (d *LineDeadline) Stop() {
	d.stopped.Store(true)
	d.c.SetReadDeadline(time.Unix(1, 0))
}

// arm sets the earlier of the two deadlines, if it changed.
func (d *LineDeadline) arm() {
	at, first := d.lineAt, false
	if !d.firstAt.IsZero() && (at.IsZero() || d.firstAt.Before(at)) {
		at, first = d.firstAt, true
	}
	d.lastFirst = first
	if at.Equal(d.armed) {
		return
	}
	d.armed = at
	d.c.SetReadDeadline(at)
	// A Stop that ran before this deadline was set must not be undone by it.
	if d.stopped.Load() {
		d.c.SetReadDeadline(time.Unix(1, 0))
	}
}
