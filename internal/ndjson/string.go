package ndjson

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

const (
	loBits = 0x0101010101010101
	hiBits = 0x8080808080808080
)

// AppendString appends s as a JSON string the way encoding/json writes it with HTML
// escaping off: '"' and '\\' and the control characters escaped (\b \f \n \r \t, else
// \u00XX), invalid UTF-8 as \ufffd, U+2028 and U+2029 as \u2028 and \u2029, everything else
// as is. Runs of eight ASCII bytes that need no escape are copied without looking at each.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start, i := 0, 0
	for i < len(s) {
		if len(s)-i >= 8 {
			x := binary.LittleEndian.Uint64([]byte(s[i : i+8]))
			q, bs := x^(loBits*'"'), x^(loBits*'\\')
			// Any byte at or above 0x80, below 0x20, or equal to '"' or '\\' (word-at-a-time
			// tests: a flag above the lowest may be false, the lowest is exact).
			hits := (x | (x-loBits*0x20)&^x | (q-loBits)&^q | (bs-loBits)&^bs) & hiBits
			if hits == 0 {
				i += 8
				continue
			}
			// The bytes below the lowest flag need no escape: go straight to it.
			i += bits.TrailingZeros64(hits) / 8
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// PlainString returns the text of raw, a JSON string token, when its bytes are its text:
// valid UTF-8 without escapes or control characters, which every JSON reader reads the same
// (encoding/json would replace invalid UTF-8). Anything else reports false, for a full
// decoder to read.
func PlainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	s := raw[1 : len(raw)-1]
	for _, c := range s {
		if c == '\\' || c == '"' || c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(s) {
		return "", false
	}
	return string(s), true
}
