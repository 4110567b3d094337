package ndjson

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// step is one result of Reader.Next: a line, or an error.
type step struct {
	line string
	err  error
}

// drain calls Next until it fails with something other than a *FrameError, or until a
// FrameError when stopAtFrameError is set, and records every result.
func drain(r *Reader, stopAtFrameError bool) []step {
	var out []step
	for range 10_000 {
		line, err := r.Next()
		if err == nil {
			out = append(out, step{line: string(line)})
			continue
		}
		out = append(out, step{err: err})
		var fe *FrameError
		if !errors.As(err, &fe) || stopAtFrameError {
			return out
		}
	}
	panic("drain: reader never ended")
}

func sameErr(a, b error) bool {
	var fa, fb *FrameError
	if errors.As(a, &fa) && errors.As(b, &fb) {
		return *fa == *fb
	}
	return errors.Is(a, b) || (a == nil && b == nil)
}

func sameSteps(a, b []step) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].line != b[i].line || !sameErr(a[i].err, b[i].err) {
			return false
		}
	}
	return true
}

// readerShapes feeds the same bytes through readers that split them differently. Every shape
// must give the same results: framing never depends on how the peer's writes arrive.
var readerShapes = []struct {
	name string
	wrap func(io.Reader) io.Reader
}{
	{"whole", func(r io.Reader) io.Reader { return r }},
	{"one byte at a time", iotest.OneByteReader},
	{"half reads", iotest.HalfReader},
	{"data with EOF", iotest.DataErrReader},
}

func tooLarge(max int, actual int64) *FrameError {
	return &FrameError{Code: CodeLineTooLarge, MaxLineBytes: max, ActualBytes: actual}
}

var errBadUTF8 = &FrameError{Code: CodeInvalidUTF8}

func TestReader(t *testing.T) {
	atLimit := strings.Repeat("x", 100_000) // spans several fills of the 64 KiB buffer
	tests := []struct {
		name  string
		limit int
		in    string
		want  []step
	}{
		{"LF lines", 8, "a\nbb\nccc\n", []step{{line: "a"}, {line: "bb"}, {line: "ccc"}, {err: io.EOF}}},
		{"CRLF lines", 8, "a\r\nbb\r\n", []step{{line: "a"}, {line: "bb"}, {err: io.EOF}}},
		{"mixed terminators", 8, "a\r\nb\nc\r\n", []step{{line: "a"}, {line: "b"}, {line: "c"}, {err: io.EOF}}},
		{"only one trailing CR is stripped", 8, "a\r\r\n", []step{{line: "a\r"}, {err: io.EOF}}},
		{"a CR inside a line stays", 8, "a\rb\n", []step{{line: "a\rb"}, {err: io.EOF}}},
		{"a lone CR is not a terminator", 8, "a\rb\rc\n", []step{{line: "a\rb\rc"}, {err: io.EOF}}},
		{"empty lines are skipped", 8, "\n\na\n\n\nb\n\n", []step{{line: "a"}, {line: "b"}, {err: io.EOF}}},
		{"CR-only lines are skipped", 8, "\r\n\r\na\r\n\r\n", []step{{line: "a"}, {err: io.EOF}}},
		{"CR CR line keeps one CR", 8, "\r\r\n", []step{{line: "\r"}, {err: io.EOF}}},
		{"whitespace lines are returned", 8, " \n\t\n", []step{{line: " "}, {line: "\t"}, {err: io.EOF}}},
		{"NUL is valid UTF-8", 8, "\x00\n", []step{{line: "\x00"}, {err: io.EOF}}},
		{"line exactly at the limit", 8, "12345678\n", []step{{line: "12345678"}, {err: io.EOF}}},
		{"line at the limit with CRLF", 8, "12345678\r\n", []step{{line: "12345678"}, {err: io.EOF}}},
		{"line at the limit ending in a kept CR", 8, "1234567\r\r\n", []step{{line: "1234567\r"}, {err: io.EOF}}},
		{"limit plus one", 8, "123456789\n", []step{{err: tooLarge(8, 9)}, {err: io.EOF}}},
		{"limit plus one with CRLF", 8, "123456789\r\n", []step{{err: tooLarge(8, 9)}, {err: io.EOF}}},
		{"limit plus one counts a kept CR", 8, "12345678\r\r\n", []step{{err: tooLarge(8, 9)}, {err: io.EOF}}},
		{"limit of one byte", 1, "a\nbb\nc\n", []step{{line: "a"}, {err: tooLarge(1, 2)}, {line: "c"}, {err: io.EOF}}},
		{"long line at the limit spans buffer fills", 100_000, atLimit + "\n", []step{{line: atLimit}, {err: io.EOF}}},
		{"long line over the limit spans buffer fills", 100_000, atLimit + "y\r\nok\n", []step{{err: tooLarge(100_000, 100_001)}, {line: "ok"}, {err: io.EOF}}},
		{"multi-byte UTF-8", 64, "héllo ✓ 😀\n", []step{{line: "héllo ✓ 😀"}, {err: io.EOF}}},
		{"limit counts bytes, not characters", 4, "éé\néééé\n", []step{{line: "éé"}, {err: tooLarge(4, 8)}, {err: io.EOF}}},
		{"invalid UTF-8 byte", 8, "\xff\n", []step{{err: errBadUTF8}, {err: io.EOF}}},
		{"truncated UTF-8 sequence", 8, "a\xc3\n", []step{{err: errBadUTF8}, {err: io.EOF}}},
		{"overlong encoding", 8, "\xc0\xaf\n", []step{{err: errBadUTF8}, {err: io.EOF}}},
		{"encoded surrogate", 8, "\xed\xa0\x80\n", []step{{err: errBadUTF8}, {err: io.EOF}}},
		{"clean EOF", 8, "", []step{{err: io.EOF}}},
		{"clean EOF after empty lines", 8, "\n\r\n\n", []step{{err: io.EOF}}},
		{"EOF inside a line", 8, "a\nbc", []step{{line: "a"}, {err: io.ErrUnexpectedEOF}}},
		{"EOF after a CR", 8, "a\r", []step{{err: io.ErrUnexpectedEOF}}},
		{"EOF after a lone CR", 8, "a\n\r", []step{{line: "a"}, {err: io.ErrUnexpectedEOF}}},
	}
	for _, tt := range tests {
		for _, shape := range readerShapes {
			t.Run(tt.name+"/"+shape.name, func(t *testing.T) {
				r := NewReader(shape.wrap(strings.NewReader(tt.in)), tt.limit)
				got := drain(r, false)
				if !sameSteps(got, tt.want) {
					t.Errorf("got  %s\nwant %s", fmtSteps(got), fmtSteps(tt.want))
				}
			})
		}
	}
}

func fmtSteps(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		if s.err != nil {
			var fe *FrameError
			if errors.As(s.err, &fe) {
				b.WriteString("[")
				b.WriteString(fe.Error())
				if fe.ActualIsLowerBound {
					b.WriteString(" (lower bound)")
				}
				b.WriteString("] ")
				continue
			}
			b.WriteString("[" + s.err.Error() + "] ")
			continue
		}
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(s.line, "\r", `\r`), "\n", `\n`) + " ")
	}
	return b.String()
}

func TestReaderDefaultLimit(t *testing.T) {
	for _, limit := range []int{0, -1, -1 << 30} {
		if got := NewReader(strings.NewReader(""), limit).MaxLineBytes(); got != DefaultMaxLineBytes {
			t.Errorf("NewReader(_, %d).MaxLineBytes() = %d, want %d", limit, got, DefaultMaxLineBytes)
		}
	}
	if got := NewReader(strings.NewReader(""), 7).MaxLineBytes(); got != 7 {
		t.Errorf("MaxLineBytes() = %d, want 7", got)
	}
	line := strings.Repeat("a", DefaultMaxLineBytes)
	r := NewReader(strings.NewReader(line+"\n"+line+"b\n"), 0)
	if got, err := r.Next(); err != nil || len(got) != DefaultMaxLineBytes {
		t.Fatalf("line at the default limit: len %d, err %v", len(got), err)
	}
	var fe *FrameError
	if _, err := r.Next(); !errors.As(err, &fe) || *fe != *tooLarge(DefaultMaxLineBytes, DefaultMaxLineBytes+1) {
		t.Fatalf("line over the default limit: %v", err)
	}
}

// TestReaderOversizedCountIsExact checks ActualBytes for every line length just past the limit,
// with and without a CR, for limits around the smallest bufio buffer (16 bytes), so that the LF,
// and the CR before it, fall on every position relative to a buffer boundary.
func TestReaderOversizedCountIsExact(t *testing.T) {
	for _, limit := range []int{1, 2, 13, 14, 15, 16, 17, 31, 64} {
		for n := limit + 1; n <= limit+40; n++ {
			for _, term := range []string{"\n", "\r\n"} {
				in := strings.Repeat("a", n) + term + "x\n"
				for _, shape := range readerShapes {
					r := NewReader(shape.wrap(strings.NewReader(in)), limit)
					_, err := r.Next()
					var fe *FrameError
					if !errors.As(err, &fe) || fe.Code != CodeLineTooLarge || fe.MaxLineBytes != limit {
						t.Fatalf("limit %d, %d bytes + %q, %s: err %v", limit, n, term, shape.name, err)
					}
					if fe.ActualIsLowerBound {
						if fe.ActualBytes <= int64(limit) || fe.ActualBytes > int64(n) {
							t.Errorf("limit %d, %d bytes + %q, %s: lower bound %d out of (%d, %d]",
								limit, n, term, shape.name, fe.ActualBytes, limit, n)
						}
						continue // a lower bound leaves the stream out of sync; see below
					}
					if fe.ActualBytes != int64(n) {
						t.Errorf("limit %d, %d bytes + %q, %s: ActualBytes %d, want %d",
							limit, n, term, shape.name, fe.ActualBytes, n)
					}
					if line, err := r.Next(); err != nil || string(line) != "x" {
						t.Errorf("limit %d, %d bytes + %q, %s: after the error got %q, %v; want the next line",
							limit, n, term, shape.name, line, err)
					}
				}
			}
		}
	}
}

// TestReaderContinuesAfterFrameError documents that a Reader stays in sync after a line_too_large
// with an exact count (the rest of the line was consumed up to its LF) and after invalid_utf8:
// the next call returns the next line. The daemon still answers once and closes, as the protocol
// requires; this only pins what the Reader itself does.
func TestReaderContinuesAfterFrameError(t *testing.T) {
	in := "ok1\n" + strings.Repeat("z", 40) + "\r\nok2\n\xff\xfe\nok3\n"
	want := []step{
		{line: "ok1"}, {err: tooLarge(16, 40)}, {line: "ok2"}, {err: errBadUTF8}, {line: "ok3"}, {err: io.EOF},
	}
	for _, shape := range readerShapes {
		got := drain(NewReader(shape.wrap(strings.NewReader(in)), 16), false)
		if !sameSteps(got, want) {
			t.Errorf("%s:\ngot  %s\nwant %s", shape.name, fmtSteps(got), fmtSteps(want))
		}
	}
}

// TestReaderHugeLine sends a line 50 times the limit. The Reader stops counting past 16 times
// the limit and reports a lower bound. It has not consumed the rest of the line, so the stream
// is out of sync: the following calls see the rest as lines of their own, until the LF. That is
// why FrameError says the caller must answer once and close.
func TestReaderHugeLine(t *testing.T) {
	const limit = 1024
	const n = 50 * limit
	in := strings.Repeat("a", n) + "\n" + `{"next":1}` + "\n"
	for _, shape := range readerShapes {
		r := NewReader(shape.wrap(strings.NewReader(in)), limit)
		_, err := r.Next()
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Code != CodeLineTooLarge || !fe.ActualIsLowerBound {
			t.Fatalf("%s: err %v, want line_too_large with a lower bound", shape.name, err)
		}
		if fe.ActualBytes <= discardFactor*limit || fe.ActualBytes >= n {
			t.Fatalf("%s: lower bound %d, want in (%d, %d)", shape.name, fe.ActualBytes, discardFactor*limit, n)
		}
		if !strings.Contains(fe.Error(), "exceeds the limit of 1024") {
			t.Errorf("%s: message %q", shape.name, fe.Error())
		}

		// The rest of the line comes back as further oversized "lines", the last one exact.
		seen, pieces := fe.ActualBytes, 1
		for {
			line, err := r.Next()
			if err == nil {
				if string(line) != `{"next":1}` {
					t.Fatalf("%s: got %q after the huge line", shape.name, line)
				}
				break
			}
			if !errors.As(err, &fe) || fe.Code != CodeLineTooLarge {
				t.Fatalf("%s: got %v inside the huge line", shape.name, err)
			}
			seen += fe.ActualBytes
			pieces++
		}
		if seen != n || pieces < 2 || fe.ActualIsLowerBound {
			t.Errorf("%s: pieces %d adding up to %d bytes (last lower bound %v), want %d bytes in several pieces, last exact",
				shape.name, pieces, seen, fe.ActualIsLowerBound, n)
		}
	}
}

// endless yields the same byte forever and counts how many it handed out.
type endless struct {
	b    byte
	read int64
}

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.b
	}
	e.read += int64(len(p))
	return len(p), nil
}

// TestReaderEndlessLineIsBounded feeds a line that never ends. Next must return (it stops
// counting past 16 times the limit), must not read much further than that, and must neither hold
// nor allocate memory in proportion to what it read.
func TestReaderEndlessLineIsBounded(t *testing.T) {
	const limit = 1 << 20
	src := &endless{b: 'a'}

	type result struct {
		r     *Reader
		err   error
		alloc uint64
	}
	done := make(chan result, 1)
	go func() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r := NewReader(src, limit)
		_, err := r.Next()
		runtime.ReadMemStats(&after)
		done <- result{r, err, after.TotalAlloc - before.TotalAlloc}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Next did not return on an endless line")
	}

	var fe *FrameError
	if !errors.As(res.err, &fe) || fe.Code != CodeLineTooLarge || !fe.ActualIsLowerBound {
		t.Fatalf("err %v, want line_too_large with a lower bound", res.err)
	}
	if fe.ActualBytes <= discardFactor*limit {
		t.Errorf("ActualBytes %d, want more than %d", fe.ActualBytes, discardFactor*limit)
	}
	const bufSize = 64 << 10
	if src.read > discardFactor*limit+2*bufSize {
		t.Errorf("read %d bytes of an endless line, want at most %d", src.read, discardFactor*limit+2*bufSize)
	}
	if c := cap(res.r.line); c > 2*limit {
		t.Errorf("line buffer capacity %d, want about the limit (%d)", c, limit)
	}
	t.Logf("read %d bytes, line buffer cap %d, allocated %d bytes", src.read, cap(res.r.line), res.alloc)
	// append's growth makes the total somewhat larger than the final buffer, but it must stay a
	// small multiple of the limit, not of the 16 MiB read.
	if res.alloc > 8*limit {
		t.Errorf("allocated %d bytes for one endless line, want at most %d", res.alloc, 8*limit)
	}
}

func TestReaderReadErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name  string
		limit int
		src   io.Reader
		want  []step
	}{
		{"error before any byte", 8, iotest.ErrReader(boom), []step{{err: boom}}},
		{"error inside a line", 8, io.MultiReader(strings.NewReader("ok\nab"), iotest.ErrReader(boom)),
			[]step{{line: "ok"}, {err: boom}}},
		{"timeout is passed through", 8, iotest.TimeoutReader(strings.NewReader("ok\n")),
			[]step{{line: "ok"}, {err: iotest.ErrTimeout}}},
		// Inside an oversized line the error ends the line: what was seen is a lower bound.
		{"error inside an oversized line", 4, io.MultiReader(strings.NewReader(strings.Repeat("a", 40)), iotest.ErrReader(boom)),
			[]step{{err: &FrameError{Code: CodeLineTooLarge, MaxLineBytes: 4, ActualBytes: 40, ActualIsLowerBound: true}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := drain(NewReader(tt.src, tt.limit), true)
			if !sameSteps(got, tt.want) {
				t.Errorf("got  %s\nwant %s", fmtSteps(got), fmtSteps(tt.want))
			}
		})
	}
}

func TestFrameErrorMessage(t *testing.T) {
	tests := []struct {
		err  *FrameError
		want string
	}{
		{tooLarge(10, 11), "ndjson: line of 11 bytes exceeds the limit of 10"},
		{errBadUTF8, "ndjson: line is not valid UTF-8"},
		{&FrameError{Code: "other"}, "ndjson: other"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
