package audit

import (
	"bytes"
	"slices"
)

// maxFastDepth bounds the nesting canonicalFast takes on; deeper values take encoding/json's
// way.
const maxFastDepth = 32

// canonicalFast returns the canonical form of raw, a value ndjson.Valid accepted, without
// decoding it into Go values, in the common case: every string (key or value) printable
// ASCII with no escape, so that its bytes are what encoding/json writes, and nesting at most
// maxFastDepth. It reports false otherwise, and Canonical takes encoding/json's way.
// FuzzCanonical checks that the two agree.
func canonicalFast(raw []byte) ([]byte, bool) {
	c := canonWalk{data: raw}
	out, ok := c.value(make([]byte, 0, len(raw)), 0)
	if !ok {
		return nil, false
	}
	c.space()
	return out, c.pos == len(c.data)
}

type canonWalk struct {
	data []byte
	pos  int
}

func (c *canonWalk) space() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value appends the canonical form of the value at c.pos.
func (c *canonWalk) value(b []byte, depth int) ([]byte, bool) {
	c.space()
	if c.pos >= len(c.data) || depth > maxFastDepth {
		return b, false
	}
	switch ch := c.data[c.pos]; {
	case ch == '{':
		return c.object(b, depth+1)
	case ch == '[':
		return c.array(b, depth+1)
	case ch == '"':
		s, ok := c.str()
		return append(b, s...), ok
	case ch == 't', ch == 'f', ch == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(c.data[c.pos:], []byte(lit)) {
				c.pos += len(lit)
				return append(b, lit...), true
			}
		}
		return b, false
	default: // a number, kept as written (json.Number)
		start := c.pos
		for c.pos < len(c.data) {
			ch := c.data[c.pos]
			if !(ch >= '0' && ch <= '9' || ch == '-' || ch == '+' || ch == '.' || ch == 'e' || ch == 'E') {
				break
			}
			c.pos++
		}
		return append(b, c.data[start:c.pos]...), c.pos > start
	}
}

// str returns the string at c.pos with its quotes, if it is plain.
func (c *canonWalk) str() ([]byte, bool) {
	start := c.pos
	for c.pos++; c.pos < len(c.data); c.pos++ {
		switch ch := c.data[c.pos]; {
		case ch == '"':
			c.pos++
			return c.data[start:c.pos], true
		case ch == '\\' || ch < 0x20 || ch > 0x7e:
			return nil, false
		}
	}
	return nil, false
}

type canonMember struct {
	key        []byte // without its quotes
	start, end int    // its value in the object's scratch buffer
}

func (c *canonWalk) object(b []byte, depth int) ([]byte, bool) {
	c.pos++ // '{'
	var members []canonMember
	var vals []byte
	c.space()
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		return append(b, "{}"...), true
	}
	for {
		c.space()
		if c.pos >= len(c.data) || c.data[c.pos] != '"' {
			return b, false
		}
		k, ok := c.str()
		if !ok {
			return b, false
		}
		c.space()
		if c.pos >= len(c.data) || c.data[c.pos] != ':' {
			return b, false
		}
		c.pos++
		start := len(vals)
		if vals, ok = c.value(vals, depth); !ok {
			return b, false
		}
		members = append(members, canonMember{key: k[1 : len(k)-1], start: start, end: len(vals)})
		c.space()
		if c.pos >= len(c.data) {
			return b, false
		}
		if c.data[c.pos] == '}' {
			c.pos++
			break
		}
		if c.data[c.pos] != ',' {
			return b, false
		}
		c.pos++
	}
	slices.SortFunc(members, func(x, y canonMember) int { return bytes.Compare(x.key, y.key) })
	b = append(b, '{')
	for i, m := range members {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, m.key...)
		b = append(b, `":`...)
		b = append(b, vals[m.start:m.end]...)
	}
	return append(b, '}'), true
}

func (c *canonWalk) array(b []byte, depth int) ([]byte, bool) {
	c.pos++ // '['
	b = append(b, '[')
	c.space()
	if c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
		return append(b, ']'), true
	}
	for first := true; ; first = false {
		if !first {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = c.value(b, depth); !ok {
			return b, false
		}
		c.space()
		if c.pos >= len(c.data) {
			return b, false
		}
		if c.data[c.pos] == ']' {
			c.pos++
			return append(b, ']'), true
		}
		if c.data[c.pos] != ',' {
			return b, false
		}
		c.pos++
	}
}
