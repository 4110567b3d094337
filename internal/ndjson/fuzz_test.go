package ndjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Seeds live in testdata/fuzz/<FuzzName>; `go test` runs them, `go test -fuzz` grows them.

// fuzzLimit maps the fuzzer's number onto small limits, where buffer boundaries are dense.
func fuzzLimit(n uint16) int { return int(n%512) + 1 }

// readSteps reads everything, continuing after frame errors. Every call consumes at least one
// byte or ends the stream, so len(data)+2 calls always suffice.
func readSteps(t *testing.T, src io.Reader, limit, size int) []step {
	r := NewReader(src, limit)
	var out []step
	for range size + 2 {
		line, err := r.Next()
		if err == nil {
			out = append(out, step{line: string(line)})
			continue
		}
		out = append(out, step{err: err})
		var fe *FrameError
		if !errors.As(err, &fe) {
			return out
		}
	}
	t.Fatalf("reader did not end within %d calls", size+2)
	return nil
}

func FuzzReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, n uint16) {
		limit := fuzzLimit(n)
		steps := readSteps(t, bytes.NewReader(data), limit, len(data))

		// Properties of every line returned.
		total := 0
		for _, s := range steps {
			if s.err != nil {
				continue
			}
			l := s.line
			switch {
			case l == "":
				t.Fatal("empty line returned")
			case len(l) > limit:
				t.Fatalf("line of %d bytes over the limit %d", len(l), limit)
			case !utf8.ValidString(l):
				t.Fatalf("invalid UTF-8 returned: %q", l)
			case strings.Contains(l, "\n"):
				t.Fatalf("line contains LF: %q", l)
			}
			total += len(l)
		}
		if total > len(data) {
			t.Fatalf("returned %d bytes from %d", total, len(data))
		}

		// Framing does not depend on how the bytes arrive.
		if one := readSteps(t, iotest.OneByteReader(bytes.NewReader(data)), limit, len(data)); !sameSteps(steps, one) {
			t.Fatalf("whole reads:   %s\none byte reads: %s", fmtSteps(steps), fmtSteps(one))
		}

		// The results match a plain model of the framing rules, up to the first lower-bound
		// error, after which the stream is documented to be out of sync.
		want := modelSteps(data, limit)
		for i, w := range want {
			if i >= len(steps) {
				t.Fatalf("reader stopped after %d results, model has %d: %s", len(steps), len(want), fmtSteps(steps))
			}
			got := steps[i]
			var fe *FrameError
			if w.err != nil && errors.As(got.err, &fe) && fe.ActualIsLowerBound {
				wantFE, isFE := w.err.(*FrameError)
				partial := isFE && wantFE.Code == "" // the model's marker for "stream ended inside"
				if !(isFE && (wantFE.Code == CodeLineTooLarge || partial)) {
					t.Fatalf("result %d: got lower bound %v, model wants %v", i, got.err, w.err)
				}
				if fe.ActualBytes <= int64(limit) || fe.ActualBytes > wantFE.ActualBytes {
					t.Fatalf("result %d: lower bound %d outside (%d, %d]", i, fe.ActualBytes, limit, wantFE.ActualBytes)
				}
				return
			}
			if wantFE, ok := w.err.(*FrameError); ok && wantFE.Code == "" {
				// The stream ended inside a line: io.ErrUnexpectedEOF (a lower bound is
				// handled above, and only allowed when the partial line is over the limit).
				if !errors.Is(got.err, io.ErrUnexpectedEOF) {
					t.Fatalf("result %d: got %q, %v; want io.ErrUnexpectedEOF", i, got.line, got.err)
				}
				return
			}
			if got.line != w.line || !sameErr(got.err, w.err) {
				t.Fatalf("result %d:\ngot  %s\nwant %s", i, fmtSteps(steps), fmtSteps(want))
			}
		}
		if len(steps) != len(want) {
			t.Fatalf("got %d results, model %d:\ngot  %s\nwant %s", len(steps), len(want), fmtSteps(steps), fmtSteps(want))
		}
	})
}

// modelSteps frames data by the documented rules, without buffers. A stream that ends inside a
// line yields a FrameError with an empty Code whose ActualBytes is the partial line's length.
func modelSteps(data []byte, limit int) []step {
	var out []step
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i]
		data = data[i+1:]
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case len(line) == 0:
		case len(line) > limit:
			out = append(out, step{err: tooLarge(limit, int64(len(line)))})
		case !utf8.Valid(line):
			out = append(out, step{err: errBadUTF8})
		default:
			out = append(out, step{line: string(line)})
		}
	}
	if len(data) == 0 {
		return append(out, step{err: io.EOF})
	}
	return append(out, step{err: &FrameError{ActualBytes: int64(len(data))}})
}

// fuzzDoc is a target without maps or interfaces, so encoding/json's result can be compared
// with Decode's member for member.
type fuzzDoc struct {
	ID    string          `json:"id"`
	K     string          `json:"k"`
	N     int64           `json:"n"`
	F     float64         `json:"f"`
	OK    *bool           `json:"ok,omitempty"`
	Inner *item           `json:"inner"`
	List  []item          `json:"list"`
	Raw   json.RawMessage `json:"raw"`
	Embedded
}

var (
	fuzzDocFields = []string{"id", "k", "n", "f", "ok", "inner", "list", "raw", "emb"}
	itemFields    = []string{"name", "raw"}
)

func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		wellFormed := json.Valid(data)
		var objects []objectKeys
		var dupAt string
		if wellFormed {
			objects, dupAt = scanObjects(data)
		}

		// Valid is exactly "well-formed and no duplicate key", by an independent scan.
		if err := Valid(data); (err == nil) != (wellFormed && dupAt == "") {
			t.Fatalf("Valid = %v; json.Valid %v, independent duplicate scan %q", err, wellFormed, dupAt)
		}

		// AppendCompact is json.Compact: the same verdict and, when well-formed, the same bytes.
		prefix := []byte("p:")
		got, err := AppendCompact(prefix, data)
		if (err == nil) != wellFormed {
			t.Fatalf("AppendCompact error %v; json.Valid %v", err, wellFormed)
		}
		if err == nil {
			var want bytes.Buffer
			want.WriteString("p:")
			if json.Compact(&want, data) != nil || !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("AppendCompact = %q, json.Compact %q", got, want.Bytes())
			}
		}

		accepted := map[Mode]bool{}
		for _, mode := range []Mode{Closed, Open} {
			var got fuzzDoc
			err := Decode(data, &got, mode)
			if err != nil {
				var de *DecodeError
				if !errors.As(err, &de) {
					t.Fatalf("mode %d: not a *DecodeError: %v", mode, err)
				}
				switch de.Reason {
				case ReasonSyntax, ReasonDuplicateKey, ReasonCaseVariant, ReasonUnknownField, ReasonType:
				default:
					t.Fatalf("mode %d: unknown reason %q", mode, de.Reason)
				}
				if (de.Reason == ReasonSyntax) != !wellFormed {
					t.Fatalf("mode %d: reason %q, but json.Valid = %v", mode, de.Reason, wellFormed)
				}
				if de.Reason == ReasonDuplicateKey && dupAt == "" {
					t.Fatalf("mode %d: duplicate at %q, independent scan finds none", mode, de.Path)
				}
				continue
			}
			accepted[mode] = true

			// What Decode accepts, encoding/json accepts with the same result...
			var want fuzzDoc
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatalf("mode %d: Decode accepted what encoding/json refuses: %v", mode, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("mode %d: Decode gave %+v, encoding/json %+v", mode, got, want)
			}
			// ...and it holds no duplicate key, no case variant of a field, and when closed
			// no unknown key, by the independent scan.
			if dupAt != "" {
				t.Fatalf("mode %d: accepted a duplicate key at %s", mode, dupAt)
			}
			for _, o := range objects {
				if o.fields == nil {
					continue
				}
				for _, k := range o.keys {
					exact, folded := false, false
					for _, n := range o.fields {
						exact = exact || k == n
						folded = folded || strings.EqualFold(k, n)
					}
					if !exact && folded {
						t.Fatalf("mode %d: accepted case variant %q at %q", mode, k, o.path)
					}
					if !exact && mode == Closed {
						t.Fatalf("closed: accepted unknown key %q at %q", k, o.path)
					}
				}
			}
		}
		if accepted[Closed] && !accepted[Open] {
			t.Fatal("Closed accepted what Open refuses")
		}

		// DecodeAliased answers a struct of raw members exactly as Decode does.
		for _, mode := range []Mode{Closed, Open} {
			var copied, aliased fuzzRaw
			e1, e2 := Decode(data, &copied, mode), DecodeAliased(data, &aliased, mode)
			if (e1 == nil) != (e2 == nil) || (e1 != nil && e1.Error() != e2.Error()) {
				t.Fatalf("mode %d: Decode %v, DecodeAliased %v", mode, e1, e2)
			}
			if e1 == nil && !reflect.DeepEqual(copied, aliased) {
				t.Fatalf("mode %d: Decode gave %+v, DecodeAliased %+v", mode, copied, aliased)
			}
		}
	})
}

// fuzzRaw is a struct of raw members only, which DecodeAliased fills with slices of its input.
type fuzzRaw struct {
	ID    json.RawMessage `json:"id"`
	K     json.RawMessage `json:"k"`
	Inner json.RawMessage `json:"inner"`
	List  json.RawMessage `json:"list"`
}

// shape says which struct of fuzzDoc a scanned value stands for. Keys of free values (raw
// members, unknown keys) are not checked.
type shape int

const (
	free shape = iota
	docShape
	itemShape
	itemListShape
)

// objectKeys is one JSON object found by scanObjects: where it is, the field names its struct
// declares (nil when free), and its keys, decoded.
type objectKeys struct {
	path   string
	fields []string
	keys   []string
}

// scanObjects is a small JSON reader written for this test, independent of encoding/json. For
// well-formed input it lists every object's decoded keys and the path of the first duplicate
// key ("" when none).
func scanObjects(data []byte) (objects []objectKeys, dupAt string) {
	s := &scanner{data: data}
	s.value("", docShape)
	return s.objects, s.dupAt
}

type scanner struct {
	data    []byte
	pos     int
	objects []objectKeys
	dupAt   string
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) && strings.IndexByte(" \t\r\n", s.data[s.pos]) >= 0 {
		s.pos++
	}
}

func (s *scanner) value(path string, sh shape) {
	s.skipSpace()
	switch c := s.data[s.pos]; {
	case c == '{':
		s.pos++
		idx := len(s.objects)
		o := objectKeys{path: path}
		switch sh {
		case docShape:
			o.fields = fuzzDocFields
		case itemShape:
			o.fields = itemFields
		}
		s.objects = append(s.objects, o)
		seen := map[string]bool{}
		for {
			s.skipSpace()
			if s.data[s.pos] == '}' {
				s.pos++
				return
			}
			if s.data[s.pos] == ',' {
				s.pos++
				s.skipSpace()
			}
			key := s.str()
			if seen[key] && s.dupAt == "" {
				s.dupAt = path + "." + key
			}
			seen[key] = true
			s.objects[idx].keys = append(s.objects[idx].keys, key)
			s.skipSpace()
			s.pos++ // ':'
			child := free
			if sh == docShape && key == "inner" {
				child = itemShape
			} else if sh == docShape && key == "list" {
				child = itemListShape
			}
			s.value(path+"."+key, child)
		}
	case c == '[':
		s.pos++
		for i := 0; ; i++ {
			s.skipSpace()
			if s.data[s.pos] == ']' {
				s.pos++
				return
			}
			if s.data[s.pos] == ',' {
				s.pos++
			}
			elem := free
			if sh == itemListShape {
				elem = itemShape
			}
			s.value(path+"["+strconv.Itoa(i)+"]", elem)
		}
	case c == '"':
		s.str()
	default: // number, true, false, null
		for s.pos < len(s.data) && strings.IndexByte(",]} \t\r\n", s.data[s.pos]) < 0 {
			s.pos++
		}
	}
}

// str reads a string literal and decodes it the way RFC 8259 and Go agree on: escapes, pairs of
// UTF-16 surrogates, and U+FFFD for a lone surrogate or a byte that is not UTF-8.
func (s *scanner) str() string {
	s.pos++ // opening quote
	var b strings.Builder
	for {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return b.String()
		case c == '\\':
			e := s.data[s.pos+1]
			s.pos += 2
			switch e {
			case 'u':
				r := s.hex4()
				if utf16.IsSurrogate(r) {
					if s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
						save := s.pos
						s.pos += 2
						if pair := utf16.DecodeRune(r, s.hex4()); pair != unicode.ReplacementChar {
							b.WriteRune(pair)
							continue
						}
						s.pos = save
					}
					r = unicode.ReplacementChar
				}
				b.WriteRune(r)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			default: // '"', '\\', '/'
				b.WriteByte(e)
			}
		default:
			r, size := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && size == 1 {
				b.WriteRune(unicode.ReplacementChar)
			} else {
				b.Write(s.data[s.pos : s.pos+size])
			}
			s.pos += size
		}
	}
}

func (s *scanner) hex4() rune {
	n, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 32)
	if err != nil {
		panic("bad \\u escape")
	}
	s.pos += 4
	return rune(n)
}
