package tooladapter

import (
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"

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
