package ndjson

// This file owns the lexical scan of the strict decoder: whitespace, literals, numbers,
// strings and object keys, and the key comparison that finds duplicates and case variants.

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"unicode/utf8"
)

func (w *walker) skipSpace() {
	for w.pos < len(w.data) {
		switch w.data[w.pos] {
		case ' ', '\t', '\n', '\r':
			w.pos++
			w.spaced = true
		default:
			return
		}
	}
}

func (w *walker) literal(lit string) bool {
	if len(w.data)-w.pos >= len(lit) && string(w.data[w.pos:w.pos+len(lit)]) == lit {
		w.pos += len(lit)
		return true
	}
	return false
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (w *walker) number() bool {
	d := w.data
	i := w.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	w.pos = i
	return true
}

// scanString consumes a JSON string at w.pos and returns the span of its contents. plain
// reports that the contents need no decoding: no escapes, valid UTF-8.
func (w *walker) scanString() (start, end int, plain, ok bool) {
	d := w.data
	i := w.pos + 1 // past the opening quote
	start = i
	escaped := false
	// high collects the bytes looked at, and some just past the string: without a high bit
	// among them the contents are ASCII, valid UTF-8 without a second look.
	var high uint64
	for {
		// Runs of plain bytes, nearly all of a long string, are skipped eight at a time, up
		// to the first byte that may be special.
		for len(d)-i >= 8 {
			x := binary.LittleEndian.Uint64(d[i : i+8])
			high |= x
			if m := stringSpecials(x); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i >= len(d) {
			w.failSyntax("unterminated string")
			return 0, 0, false, false
		}
		switch c := d[i]; {
		case c == '"':
			w.pos = i + 1
			return start, i, !escaped && (high&0x8080808080808080 == 0 || utf8.Valid(d[start:i])), true
		case c == '\\':
			escaped = true
			if i+1 >= len(d) {
				w.failSyntax("unterminated string")
				return 0, 0, false, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex4(d[i+2:i+6]) {
					w.failSyntax("invalid \\u escape")
					return 0, 0, false, false
				}
				i += 6
			default:
				w.failSyntax("invalid escape")
				return 0, 0, false, false
			}
		case c < 0x20:
			w.failSyntax("control character in string")
			return 0, 0, false, false
		default:
			high |= uint64(c)
			i++
		}
	}
}

// key is an object member name: its raw bytes when they need no decoding, else its decoded
// value. Plain keys, nearly all of them, cost no allocation.
type key struct {
	raw     []byte
	decoded string
	plain   bool
}

// String returns the name as encoding/json would decode it: escapes resolved and invalid UTF-8
// replaced by U+FFFD. Replacing matters, since two different invalid sequences name the same
// member once decoded.
func (k key) String() string {
	if k.plain {
		return string(k.raw)
	}
	return k.decoded
}

func (k key) equal(o key) bool {
	if k.plain && o.plain {
		return string(k.raw) == string(o.raw)
	}
	return k.String() == o.String()
}

// mark returns one bit chosen by the name's length and its first and last bytes: equal names
// have equal marks.
func (k key) mark() uint64 {
	var n, first, last uint
	if k.plain {
		if n = uint(len(k.raw)); n > 0 {
			first, last = uint(k.raw[0]), uint(k.raw[n-1])
		}
	} else if n = uint(len(k.decoded)); n > 0 {
		first, last = uint(k.decoded[0]), uint(k.decoded[n-1])
	}
	return 1 << ((n + 3*first + 5*last) & 63)
}

// scanKey consumes a member name.
func (w *walker) scanKey() (key, bool) {
	start, end, plain, ok := w.scanString()
	if !ok {
		return key{}, false
	}
	if plain {
		return key{raw: w.data[start:end], plain: true}, true
	}
	var s string
	if err := json.Unmarshal(w.data[start-1:end+1], &s); err != nil {
		w.failSyntax("invalid string")
		return key{}, false
	}
	return key{decoded: s}, true
}

// stringSpecials marks with its high bit each of the eight bytes of x (little-endian) that may
// be a quote, a backslash or a control character. The lowest mark is exact: no byte below it
// is special, and its byte is; marks above it may be false.
func stringSpecials(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ (lo * '"')
	bs := x ^ (lo * '\\')
	// This is ((q-lo)&^q | (bs-lo)&^bs | (x-lo*0x20)&^x) & hi, the three zero-byte tests,
	// with one mask instead of three: '"' and '\\' have no high bit, so q and bs have x's.
	return ((q - lo) | (bs - lo) | (x - lo*0x20)) &^ x & hi
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
