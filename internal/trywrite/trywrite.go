// Package trywrite writes to a socket or pipe without waiting for it.
//
// The daemon, the tool-adapter client, airlock-fs and the capability-adapter client all answer
// from whichever goroutine finishes a request, and a socket or pipe nearly always has room for
// a whole frame: one non-blocking write puts it out with no hand-off to a writer goroutine. What
// the descriptor does not take at once is left to the caller, which finishes it with a goroutine
// of its own, so that no request ever waits for a peer that stopped reading.
package trywrite

import "syscall"

// Writer makes non-blocking write attempts on one descriptor. It is not safe for concurrent
// use: its owner lets one goroutine write at a time, as a stream needs anyway.
type Writer struct {
	raw     syscall.RawConn
	rest    []byte
	err     error
	attempt func(fd uintptr) bool // w.writeSome, made once: no allocation per write
}

// New returns a Writer for c's descriptor (a *net.UnixConn, an *os.File of a pipe, …).
func New(c syscall.Conn) (*Writer, error) {
	w := new(Writer)
	if err := w.Init(c); err != nil {
		return nil, err
	}
	return w, nil
}

// Init makes the zero Writer w one for c's descriptor, for a Writer embedded in its owner;
// w must not be copied afterwards.
func (w *Writer) Init(c syscall.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	w.raw = raw
	w.attempt = w.writeSome
	return nil
}

// Ready reports whether w was made for a descriptor.
func (w *Writer) Ready() bool { return w.raw != nil }

// Write writes what the descriptor takes of b without waiting and reports how many bytes it
// took. A full descriptor is not an error, only a short write; an error is the descriptor's
// (closed, reset, …).
func (w *Writer) Write(b []byte) (int, error) {
	w.rest, w.err = b, nil
	err := w.raw.Write(w.attempt)
	n := len(b) - len(w.rest)
	if err == nil {
		err = w.err
	}
	w.rest, w.err = nil, nil
	return n, err
}

// writeSome is Write's body, run with the descriptor. It reports true in every case, so that
// RawConn.Write never waits for the descriptor to become writable.
func (w *Writer) writeSome(fd uintptr) bool {
	for len(w.rest) > 0 {
		n, err := syscall.Write(int(fd), w.rest)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			w.err = err
			return true
		}
		w.rest = w.rest[n:]
	}
	return true
}
