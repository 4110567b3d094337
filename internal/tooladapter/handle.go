package tooladapter

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/airlockhq/airlock/internal/protocol"
)

// Handle holds a capability handle: the secret that binds one adapter grant to one session
// generation. It is memory-only and redacts itself wherever Go could print or serialize it:
// String, GoString, every fmt verb, MarshalJSON, MarshalText and slog all render "[redacted]".
// Inside this package only the bind frame encoder and the reflection check read the value.
//
// The zero Handle is empty. A Handle is immutable and safe for concurrent use.
type Handle struct {
	v string
}

var (
	_ fmt.Stringer   = Handle{}
	_ fmt.GoStringer = Handle{}
	_ fmt.Formatter  = Handle{}
	_ slog.LogValuer = Handle{}
)

// NewHandle checks s against the capability rules (32 to 512 characters of base64url without
// padding) and wraps it. The error never contains s.
func NewHandle(s string) (Handle, *protocol.Error) {
	if !validHandle(s) {
		return Handle{}, fieldError(CodeInvalidCapability, "binding.capabilityHandle",
			"capabilityHandle must be %d to %d characters of [A-Za-z0-9_-]", minHandleLen, maxHandleLen)
	}
	return Handle{v: s}, nil
}

// String returns "[redacted]".
func (Handle) String() string { return redacted }

// GoString returns "[redacted]".
func (Handle) GoString() string { return redacted }

// Format writes "[redacted]" for every verb.
func (Handle) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// MarshalJSON encodes the handle as the string "[redacted]".
func (Handle) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "[redacted]".
func (Handle) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue makes slog render "[redacted]".
func (Handle) LogValue() slog.Value { return slog.StringValue(redacted) }

// IsZero reports whether the handle is empty.
func (h Handle) IsZero() bool { return h.v == "" }

// Equal reports in constant time whether h and o hold the same secret.
func (h Handle) Equal(o Handle) bool {
	return subtle.ConstantTimeCompare([]byte(h.v), []byte(o.v)) == 1
}

func validHandle(s string) bool {
	if len(s) < minHandleLen || len(s) > maxHandleLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isBase64URL(s[i]) {
			return false
		}
	}
	return true
}

func isBase64URL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// ContainsSecret reports whether b contains secret, exactly as bytes.Contains does, but fast on
// the large text of a result, which the handle check of every frame scans whole. bytes.Contains
// steps from one occurrence of the secret's first byte to the next, and in text a first byte
// such as 'e' occurs every few bytes; this steps between occurrences of the secret's byte that
// is rarest in text instead, and falls back to bytes.Contains when even that one is frequent in
// b, so that no input makes it slower than that by more than a constant.
func ContainsSecret(b, secret []byte) bool { return containsSecret(b, secret, -1) }

// containsSecret is ContainsSecret with k, when not negative, the index of secret's rarest byte
// (rarestByte), which a connection that checks every frame for the same secret computes once.
func containsSecret(b, secret []byte, k int) bool {
	n := len(secret)
	if n < 2 || len(b) < 256 {
		return bytes.Contains(b, secret)
	}
	if k < 0 {
		k = rarestByte(secret)
	}
	c := secret[k]
	candidates := 0
	// An occurrence starting at p has c at p+k; p runs from 0 to len(b)-n.
	for i := k; i <= len(b)-n+k; {
		j := bytes.IndexByte(b[i:len(b)-n+k+1], c)
		if j < 0 {
			return false
		}
		p := i + j - k
		if string(b[p:p+n]) == string(secret) {
			return true
		}
		i += j + 1
		if candidates++; candidates > 64+i/32 {
			return bytes.Contains(b[i-k:], secret)
		}
	}
	return false
}

// rarestByte returns the index of the byte of s least frequent in typical text and code, by a
// fixed ranking: rare letters first, then other upper-case letters and digits, then the rest.
func rarestByte(s []byte) int {
	const ranking = "QZXJKVYWUqzxjGHOFNBPMLRDCE-ITAS0987654321_kvywbgpfmucdhlnrosaite"
	best, bestRank := 0, len(ranking)
	for i, c := range s {
		if r := strings.IndexByte(ranking, c); r >= 0 && r < bestRank {
			best, bestRank = i, r
			if r == 0 {
				break
			}
		}
	}
	return best
}

// Screen searches the lines an adapter sends for one handle. A connection builds it once, at
// bind, and runs it over every inbound line before anything parses the line.
type Screen struct {
	secret []byte
	rare   int // rarestByte(secret)
}

// Screen returns the screen for h.
func (h Handle) Screen() Screen {
	return Screen{secret: []byte(h.v), rare: rarestByte([]byte(h.v))}
}

// Reflected reports whether the JSON text line holds the handle, in any key or string once its
// escapes are resolved (see reflectsHandle).
func (s Screen) Reflected(line []byte) bool { return reflectsHandleAt(line, s.secret, s.rare) }

// reflectsHandle reports whether the JSON text line holds secret, a base64url handle, in any
// key or string once its escapes are resolved: "\u0063ap…" spells the same handle as "cap…".
//
// Only a \u escape can stand for a base64url character; every other escape (\" \\ \/ \b \f
// \n \r \t) stands for one that is not. So in a line without "\u" every handle a string
// spells is there byte for byte, and the literal search finds it; with one, each string
// holding a \u escape is decoded and searched. That is exactly as strong as decoding the whole
// line and searching every string (TestReflectsHandleMatchesExhaustive,
// FuzzReflectsHandle), without decoding a large result, which nearly always has no \u.
func reflectsHandle(line, secret []byte) bool { return reflectsHandleAt(line, secret, -1) }

// reflectsHandleAt is reflectsHandle with rare, when not negative, the index of the rarest
// byte of secret (see containsSecret).
func reflectsHandleAt(line, secret []byte, rare int) bool {
	if containsSecret(line, secret, rare) {
		return true
	}
	if !bytes.Contains(line, []byte(`\u`)) {
		return false
	}
	for i := 0; i < len(line); i++ {
		if line[i] != '"' {
			continue
		}
		// A string runs to the first quote not escaped by a backslash.
		end, hasU := -1, false
		for j := i + 1; j < len(line); j++ {
			if c := line[j]; c == '"' {
				end = j
				break
			} else if c == '\\' {
				if j+1 < len(line) && line[j+1] == 'u' {
					hasU = true
				}
				j++
			}
		}
		if end < 0 {
			return false // unterminated: not JSON, and refused as such
		}
		if hasU {
			var s string
			if json.Unmarshal(line[i:end+1], &s) == nil && strings.Contains(s, string(secret)) {
				return true
			}
		}
		i = end
	}
	return false
}
