// Package visible is the one rule for characters that change or hide how the text around them
// reads: control characters, bidirectional formatting (U+202E reorders "10\u202e00001" into
// "1000001" backwards), zero-width and other format characters, line and paragraph separators.
// Text another host or an adapter wrote is shown with such characters escaped: the CLI as
// JSON \u escapes (terminalJSON), the web page as <U+202E> and the like (internal/web).
package visible

import (
	"fmt"
	"strings"
	"unicode"
)

// hidden are the general categories whose characters are escaped: Cc (C0, DEL, C1), Cf
// (format: soft hyphen, U+200B–U+200F, U+202A–U+202E, U+2060–U+2064, U+2066–U+2069, U+FEFF,
// the tag characters U+E0000–U+E007F …), Zl (U+2028) and Zp (U+2029). Every Bidi_Control
// character is Cf. Other_Default_Ignorable_Code_Point adds the invisible letters and fillers
// that are not Cf (U+034F, U+115F, U+1160, U+3164, U+FFA0 …).
var hidden = []*unicode.RangeTable{unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Other_Default_Ignorable_Code_Point}

// Hidden reports whether r is a character that is escaped rather than shown: one that acts
// on the text around it or shows as nothing.
func Hidden(r rune) bool { return unicode.In(r, hidden...) }

// Contains reports whether s holds a Hidden character.
func Contains(s string) bool { return strings.ContainsFunc(s, Hidden) }

// Show returns s with every Hidden character replaced by its code point written like <U+202E>
// (at least four hex digits, upper case), and with the "<" of a "<U+" already in s written
// <U+003C>, so that every <U+ in the result is an escape and two different strings never show
// the same. It returns s itself when there is nothing to replace.
func Show(s string) string {
	if !Contains(s) && !strings.Contains(s, escapeStart) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i, r := range s {
		if Hidden(r) || r == '<' && strings.HasPrefix(s[i:], escapeStart) {
			fmt.Fprintf(&b, "<U+%04X>", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// escapeStart begins every escape Show writes.
const escapeStart = "<U+"
