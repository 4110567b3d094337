package capadapter

import "bytes"

// The screens below are the hot path of every observe and invoke. They apply to text as a
// client sees it: unsafePayload over a raw JSON document is only an early reject, because an
// escape (\u003a, \/, a surrogate pair) hides text from a byte scan that a decoder then
// restores; every decoded key and string is screened again (unsafeText). For ASCII input they
// scan by hand; input with any non-ASCII byte goes to the regular expressions, whose Unicode case
// folding ("ſ" folds to "s", the Kelvin sign to "k") the hand scan does not model. The fuzz
// targets check that both agree.

var (
	sensitiveWords = []string{"endpoint", "url", "credential", "password", "secret", "token", "adapter",
		"protocol", "hostname", "authorization", "cookie", "method", "path", "accesskey"}
	// payloadWords are the sensitive words the payload screen looks for before ':' or '='
	// (method and path are allowed there: they are common, harmless state keys in text).
	payloadWords = []string{"endpoint", "url", "credential", "password", "secret", "token", "authorization",
		"cookie", "adapter", "protocol", "hostname", "accesskey"}
)

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// lowerASCII returns b with ASCII letters lowered, in buf when it is large enough.
func lowerASCII(b, buf []byte) []byte {
	out := append(buf[:0], b...)
	for i, c := range out {
		if 'A' <= c && c <= 'Z' {
			out[i] = c + 'a' - 'A'
		}
	}
	return out
}

// unsafePayload reports whether b matches unsafePayloadPattern: a URL scheme, or a sensitive
// word followed by an optional quote, optional whitespace and ':' or '='.
func unsafePayload(b []byte) bool {
	if !isASCII(b) {
		return unsafePayloadPattern.Match(b)
	}
	var small [512]byte
	l := lowerASCII(b, small[:])
	if bytes.Contains(l, []byte("http://")) || bytes.Contains(l, []byte("https://")) {
		return true
	}
	for _, w := range payloadWords {
		for from := 0; ; {
			i := bytes.Index(l[from:], []byte(w))
			if i < 0 {
				break
			}
			j := from + i + len(w)
			if j < len(l) && l[j] == '"' {
				j++
			}
			for j < len(l) && isRegexpSpace(l[j]) {
				j++
			}
			if j < len(l) && (l[j] == ':' || l[j] == '=') {
				return true
			}
			from += i + 1
		}
	}
	return false
}

// unsafeText reports whether one decoded string (a key or a value, as a client sees it)
// matches unsafePayloadPattern.
func unsafeText(s string) bool { return unsafePayload([]byte(s)) }

// isRegexpSpace is RE2's \s: tab, newline, form feed, carriage return and space (not \v).
func isRegexpSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// sensitiveName reports whether s matches sensitiveNamePattern.
func sensitiveName(s string) bool {
	if !isASCII([]byte(s)) {
		return sensitiveNamePattern.MatchString(s)
	}
	var small [128]byte
	l := lowerASCII([]byte(s), small[:])
	for _, w := range sensitiveWords {
		if bytes.Contains(l, []byte(w)) {
			return true
		}
	}
	return false
}
