package capadapter

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

// text is what the screens read: decoded text as a string, or bytes (raw JSON, or decoded
// text that was never copied into a string).
type text interface{ ~string | ~[]byte }

func isASCII[T text](b T) bool {
	for i := 0; i < len(b); i++ {
		if b[i] >= 0x80 {
			return false
		}
	}
	return true
}

// lower returns c with an ASCII capital lowered.
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// hasSuffixFold reports whether b ends with w (lower-case ASCII), ignoring ASCII case.
func hasSuffixFold[T text](b T, w string) bool {
	if len(b) < len(w) {
		return false
	}
	b = b[len(b)-len(w):]
	for i := 0; i < len(w); i++ {
		if lower(b[i]) != w[i] {
			return false
		}
	}
	return true
}

// hasPrefixFold reports whether b starts with w (lower-case ASCII), ignoring ASCII case.
func hasPrefixFold[T text](b T, w string) bool {
	if len(b) < len(w) {
		return false
	}
	for i := 0; i < len(w); i++ {
		if lower(b[i]) != w[i] {
			return false
		}
	}
	return true
}

// unsafePayload reports whether b matches unsafePayloadPattern: a URL scheme, or a sensitive
// word followed by an optional quote, optional whitespace and ':' or '='.
//
// For ASCII input it makes one pass, stopping only at ':' and '=', the bytes every match
// ends with (a scheme's "://" contains one): from each, it looks back over whitespace and an
// optional quote for a sensitive word, or forward for "//" after "http" or "https". Words hold
// no quote or space, so looking back is the same as the pattern's looking forward.
func unsafePayload[T text](b T) bool {
	if !isASCII(b) {
		return unsafePayloadPattern.Match([]byte(b))
	}
	for j := 0; j < len(b); j++ {
		c := b[j]
		if c != ':' && c != '=' {
			continue
		}
		if c == ':' && j+2 < len(b) && b[j+1] == '/' && b[j+2] == '/' &&
			(hasSuffixFold(b[:j], "http") || hasSuffixFold(b[:j], "https")) {
			return true
		}
		i := j
		for i > 0 && isRegexpSpace(b[i-1]) {
			i--
		}
		if i > 0 && b[i-1] == '"' {
			i--
		}
		for _, w := range payloadWords {
			if hasSuffixFold(b[:i], w) {
				return true
			}
		}
	}
	return false
}

// unsafeText reports whether one decoded string (a key or a value, as a client sees it)
// matches unsafePayloadPattern.
func unsafeText(s string) bool { return unsafePayload(s) }

// isRegexpSpace is RE2's \s: tab, newline, form feed, carriage return and space (not \v).
func isRegexpSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// sensitiveName reports whether s matches sensitiveNamePattern. For ASCII input it looks for
// the words at each byte that can start one.
func sensitiveName[T text](s T) bool {
	if !isASCII(s) {
		return sensitiveNamePattern.Match([]byte(s))
	}
	for i := 0; i < len(s); i++ {
		c := lower(s[i])
		if c < 'a' || c > 'z' || sensitiveFirst&(1<<(c-'a')) == 0 {
			continue
		}
		for _, w := range sensitiveWords {
			if w[0] == c && hasPrefixFold(s[i:], w) {
				return true
			}
		}
	}
	return false
}

// sensitiveFirst has bit c-'a' set for each letter c that starts one of sensitiveWords.
var sensitiveFirst = func() uint32 {
	var m uint32
	for _, w := range sensitiveWords {
		m |= 1 << (w[0] - 'a')
	}
	return m
}()

// UnsafePayload reports whether b carries a URL or sensitive key:value text (the raw-byte
// screen every payload passes before it is decoded; see unsafePayload).
func UnsafePayload(b []byte) bool { return unsafePayload(b) }
