package room

import (
	"encoding/base64"
	"errors"
)

// DecodeBase64 decodes s with enc and requires s to be the one canonical spelling of what it
// decodes to. encoding/base64 skips carriage returns and newlines anywhere in its input even
// in strict mode, so a MAC, a signature or a key from a peer could otherwise be spelled many
// ways that all verify: anything that remembers such a value by its text (a replay check, a
// cache) would count each spelling as a new one. The comparison also refuses what strict mode
// would (padding bits set), without Strict's copy of enc on every call.
func DecodeBase64(enc *base64.Encoding, s string) ([]byte, error) {
	b, err := enc.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if enc.EncodeToString(b) != s {
		return nil, errors.New("room: base64 not in its canonical form")
	}
	return b, nil
}
