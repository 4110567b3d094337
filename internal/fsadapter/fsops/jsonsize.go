package fsops

import (
	"encoding/binary"
	"time"
	"unicode/utf8"
)

// The response budget counts the bytes of the result's JSON encoding as encoding/json writes it
// with HTML escaping off (ndjson.Marshal). The counts below are exact for that encoder, or an
// upper bound; TestJSONCostMatchesEncoder checks them against it.
//
// encoding/json has no way to say how much of a text fits a budget; without these counts a
// read cut to the response budget takes a bisection of whole encodings, and make bench-fs's
// 4 MiB fs.read fell from 333 to 24 MB/s (measured against this code in the same run). fs.stat
// and small reads do not reach them.

// asciiCost[c] is the encoded size of ASCII byte c inside a JSON string.
var asciiCost = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		switch {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			t[c] = 2
		case c < 0x20:
			t[c] = 6
		default:
			t[c] = 1
		}
	}
	return t
}()

// jsonStringCost returns the encoded size of s as a JSON string, quotes included.
func jsonStringCost(s string) int {
	n, _ := jsonPrefix([]byte(s), int(^uint(0)>>1))
	return n
}

// jsonPrefix returns the largest prefix of s, cut at a rune boundary, whose encoding (quotes
// included) costs at most budget bytes, and that cost. Invalid UTF-8 is costed as the \ufffd
// it is encoded as.
func jsonPrefix(s []byte, budget int) (cost, prefix int) {
	cost, prefix, _ = scanJSON(s, budget, false)
	return cost, prefix
}

// validJSONPrefix is jsonPrefix for text not yet known to be UTF-8, in the same pass: it
// returns the length of the largest prefix of s whose encoding costs at most budget bytes, and
// valid false when that prefix is not valid UTF-8. The rest of s is not looked at.
func validJSONPrefix(s []byte, budget int) (prefix int, valid bool) {
	_, prefix, valid = scanJSON(s, budget, true)
	return prefix, valid
}

// scanJSON costs s as a JSON string up to budget. With stopInvalid it ends at the first byte
// that is not valid UTF-8 (valid false, prefix where it stands); else such a byte costs the
// six bytes of \ufffd.
func scanJSON(s []byte, budget int, stopInvalid bool) (cost, prefix int, valid bool) {
	cost = 2
	if cost > budget {
		return cost, 0, true
	}
	i := 0
	for i < len(s) {
		// ASCII eight bytes at a time, while even eight six-byte escapes would fit.
		if len(s)-i >= 8 && cost+48 <= budget {
			x := binary.LittleEndian.Uint64(s[i:])
			if x&hiBits == 0 {
				// Any byte below 0x20, equal to '"' or equal to '\\' (word-at-a-time tests).
				q, b := x^(loBits*'"'), x^(loBits*'\\')
				special := ((x-loBits*0x20) & ^x | (q-loBits) & ^q | (b-loBits) & ^b) & hiBits
				if special == 0 {
					cost += 8
				} else {
					for _, c := range s[i : i+8] {
						cost += int(asciiCost[c])
					}
				}
				i += 8
				continue
			}
		}
		c := s[i]
		if c < utf8.RuneSelf {
			k := int(asciiCost[c])
			if cost+k > budget {
				return cost, i, true
			}
			cost += k
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		k := size
		switch {
		case r == utf8.RuneError && size == 1:
			if stopInvalid {
				return cost, i, false
			}
			k = 6 // encoded as \ufffd
		case r == '\u2028' || r == '\u2029':
			k = 6
		}
		if cost+k > budget {
			return cost, i, true
		}
		cost += k
		i += size
	}
	return cost, i, true
}

const (
	loBits = 0x0101010101010101
	hiBits = 0x8080808080808080
)

// intCost is the encoded size of an integer.
func intCost(v int64) int {
	n := 1
	if v < 0 {
		n++
		v = -v
	}
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// formatTime renders t as RFC 3339 UTC with nanoseconds and no trailing zeros, or "" (the
// member is then omitted) when the year does not fit the wire's four digits.
func formatTime(sec, nsec int64) string {
	t := time.Unix(sec, nsec).UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return ""
	}
	// For a UTC time within those years, RFC3339Nano writes exactly the wire's layout
	// (2006-01-02T15:04:05.999999999Z), and the time package formats it without parsing the
	// layout: a third of the time, which a listing pays once per entry.
	return t.Format(time.RFC3339Nano)
}
