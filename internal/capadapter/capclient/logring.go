package capclient

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Stderr capture bounds. An adapter's stderr is for its operator only: it is kept in memory,
// never parsed, never projected, and readable only through Supervisor.Logs.
const (
	// MaxLogBytes bounds the lines kept per adapter; the oldest lines go first.
	MaxLogBytes = 64 << 10
	// MaxLogLineBytes bounds one kept line; the rest of a longer line is dropped.
	MaxLogLineBytes = 1024
)

// logRing keeps the last lines an adapter wrote to stderr, within MaxLogBytes. It is shared by
// the successive children of one registration, so the operator sees why the last one died.
type logRing struct {
	mu      sync.Mutex
	lines   []string
	bytes   int
	dropped int64 // lines evicted or never kept
}

func newLogRing() *logRing { return &logRing{} }

// add appends one line, sanitized for a terminal, evicting the oldest lines to stay in bounds.
func (r *logRing) add(line string, truncated bool) {
	line = sanitizeLogLine(line)
	if truncated {
		line += " …[truncated]"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, line)
	r.bytes += len(line)
	for r.bytes > MaxLogBytes && len(r.lines) > 0 {
		r.bytes -= len(r.lines[0])
		r.lines[0] = ""
		r.lines = r.lines[1:]
		r.dropped++
	}
	if cap(r.lines) > 4*len(r.lines)+64 { // let evicted backing arrays go
		r.lines = append([]string(nil), r.lines...)
	}
}

// note records a line written by the supervisor itself (a start or an exit), marked as such.
func (r *logRing) note(s string) { r.add("[airlock] "+s, false) }

// snapshot returns a copy of the kept lines, oldest first.
func (r *logRing) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// sanitizeLogLine makes a line safe to print on a terminal: invalid UTF-8 and control
// characters other than tab become U+FFFD.
func sanitizeLogLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r == '\t' {
			return r
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return utf8.RuneError
		}
		return r
	}, s)
}

// drainStderr reads r until EOF or an error, keeping lines in ring. It reads as fast as the
// child writes, so a flooding child never blocks on its stderr; memory stays within one
// bufio buffer plus MaxLogLineBytes.
func drainStderr(r io.Reader, ring *logRing) {
	br := bufio.NewReaderSize(r, 4096)
	var line []byte
	truncated := false
	for {
		chunk, err := br.ReadSlice('\n')
		if room := MaxLogLineBytes - len(line); room > 0 {
			keep := chunk
			if err == nil {
				keep = chunk[:len(chunk)-1]
			}
			if len(keep) > room {
				keep = keep[:room]
				truncated = true
			}
			line = append(line, keep...)
		} else if len(chunk) > 1 || (len(chunk) == 1 && err != nil) {
			truncated = true
		}
		switch {
		case err == nil:
			ring.add(strings.TrimSuffix(string(line), "\r"), truncated)
			line, truncated = line[:0], false
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			if len(line) > 0 {
				ring.add(string(line), truncated)
			}
			return
		}
	}
}
