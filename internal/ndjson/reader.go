// Package ndjson frames and decodes newline-delimited JSON the way every airlock wire protocol
// needs it: bounded, UTF-8 only, and strict.
//
// A [Reader] yields one line at a time and never holds more than its limit in memory, however long
// the peer's line is. [Decode] checks a line before Go's encoding/json sees it: an object with a
// duplicated key, or with a key that differs only in case from a field of the target, is rejected
// instead of being resolved by "last one wins" or by case folding.
package ndjson

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Framing error codes. They are the wire codes of the daemon protocol.
const (
	CodeLineTooLarge = "line_too_large"
	CodeInvalidUTF8  = "invalid_utf8"
	CodeInvalidJSON  = "invalid_json"
)

// DefaultMaxLineBytes is the default bound on one line, without its terminator.
const DefaultMaxLineBytes = 1 << 20

// discardFactor bounds how far past the limit a reader keeps counting an oversized line before it
// gives up and reports a lower bound: counting costs no memory, but it should not run forever.
const discardFactor = 16

// FrameError reports a line that cannot be framed. After a FrameError the stream is out of sync
// with its peer and the caller should answer once and close.
type FrameError struct {
	Code string // CodeLineTooLarge or CodeInvalidUTF8
	// MaxLineBytes and ActualBytes are set for CodeLineTooLarge. ActualBytes is exact unless
	// the line ran past 16 times the limit, where it is a lower bound (ActualIsLowerBound).
	MaxLineBytes       int
	ActualBytes        int64
	ActualIsLowerBound bool
}

func (e *FrameError) Error() string {
	switch e.Code {
	case CodeLineTooLarge:
		return fmt.Sprintf("ndjson: line of %d bytes exceeds the limit of %d", e.ActualBytes, e.MaxLineBytes)
	case CodeInvalidUTF8:
		return "ndjson: line is not valid UTF-8"
	}
	return "ndjson: " + e.Code
}

// Reader reads LF-terminated lines. One trailing CR is stripped, empty lines are skipped, and a
// line longer than the limit is skipped without being buffered and reported as a FrameError.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	max int
	// line assembles a line longer than the read buffer. From MinPooledBytes up it comes from
	// the buffer pool and goes back at the next call, so that a reader between long lines
	// holds no large buffer; hint is the length of the last such line, the likely size of the
	// next one, so that it is assembled without regrowing.
	line []byte
	hint int
}

// NewReader returns a Reader whose lines hold at most maxLineBytes bytes, not counting the LF and
// an optional CR before it. A maxLineBytes ≤ 0 means DefaultMaxLineBytes.
func NewReader(r io.Reader, maxLineBytes int) *Reader {
	if maxLineBytes <= 0 {
		maxLineBytes = DefaultMaxLineBytes
	}
	size := 64 << 10
	if maxLineBytes+2 < size {
		size = max(maxLineBytes+2, 16)
	}
	return &Reader{br: bufio.NewReaderSize(r, size), max: maxLineBytes}
}

// MaxLineBytes reports the limit the Reader enforces.
func (r *Reader) MaxLineBytes() int { return r.max }

// Next returns the next non-empty line without its terminator. The slice is valid until the next
// call. At the end of the stream Next returns io.EOF, or io.ErrUnexpectedEOF when the stream ended
// inside a line. A line that is too long or not UTF-8 yields a *FrameError.
func (r *Reader) Next() ([]byte, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			continue
		}
		if !utf8.Valid(line) {
			return nil, &FrameError{Code: CodeInvalidUTF8}
		}
		return line, nil
	}
}

func (r *Reader) readLine() ([]byte, error) {
	if cap(r.line) >= MinPooledBytes {
		PutBuffer(r.line) // the caller is done with the last line
		r.line = nil
	}
	r.line = r.line[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		switch {
		case err == nil:
			line := chunk[:len(chunk)-1]
			if len(r.line) > 0 {
				// The line began in earlier reads; a line within the read buffer, nearly
				// every line, is returned from it without a copy.
				r.line = r.appendLine(line)
				line = r.line
				r.hint = len(line)
			}
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if len(line) > r.max {
				return nil, &FrameError{Code: CodeLineTooLarge, MaxLineBytes: r.max, ActualBytes: int64(len(line))}
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			r.line = r.appendLine(chunk)
			// One extra byte may be the CR of a CRLF terminator.
			if len(r.line) > r.max+1 {
				return nil, r.discard(int64(len(r.line)))
			}
		case errors.Is(err, io.EOF):
			if len(r.line)+len(chunk) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// appendLine appends chunk to r.line, growing it through the buffer pool: a long line is
// assembled in a buffer of the last long line's size, and grows, if it must, by doubling.
func (r *Reader) appendLine(chunk []byte) []byte {
	if need := len(r.line) + len(chunk); need > cap(r.line) {
		nb := GetBuffer(max(need, 2*cap(r.line), r.hint))
		nb = append(nb, r.line...)
		if cap(r.line) >= MinPooledBytes {
			PutBuffer(r.line)
		}
		r.line = nb
	}
	return append(r.line, chunk...)
}

// discard skips the rest of an oversized line, counting its bytes up to a bound.
func (r *Reader) discard(seen int64) error {
	fe := &FrameError{Code: CodeLineTooLarge, MaxLineBytes: r.max}
	limit := int64(r.max) * discardFactor
	// endsCR tracks whether the last byte counted is a CR: it may be the first half of a CRLF
	// terminator split across two buffer fills, and then it is not part of the line.
	endsCR := bytes.HasSuffix(r.line, []byte("\r"))
	for {
		chunk, err := r.br.ReadSlice('\n')
		seen += int64(len(chunk))
		switch {
		case err == nil:
			seen-- // the LF
			if bytes.HasSuffix(chunk, []byte("\r\n")) || (len(chunk) == 1 && endsCR) {
				seen--
			}
			fe.ActualBytes = seen
			return fe
		case errors.Is(err, bufio.ErrBufferFull):
			endsCR = bytes.HasSuffix(chunk, []byte("\r"))
			if seen > limit {
				if endsCR {
					seen-- // it may be a terminator; a lower bound must not count it
				}
				fe.ActualBytes, fe.ActualIsLowerBound = seen, true
				return fe
			}
		default:
			// The peer went away inside the oversized line; report what was seen.
			fe.ActualBytes, fe.ActualIsLowerBound = seen, true
			return fe
		}
	}
}
