package room

import (
	"encoding/base64"
	"testing"
)

// TestDecodeBase64RefusesOtherSpellings: the canonical spelling decodes; the same bytes with a
// line break or a carriage return inside, or with padding bits set, do not, though
// encoding/base64's strict decoder takes the line breaks.
func TestDecodeBase64RefusesOtherSpellings(t *testing.T) {
	want := []byte("0123456789abcdef0123456789abcdef")
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		s := enc.EncodeToString(want)
		if b, err := DecodeBase64(enc, s); err != nil || string(b) != string(want) {
			t.Fatalf("canonical %q: %q %v", s, b, err)
		}
		for _, bad := range []string{s[:8] + "\n" + s[8:], s[:8] + "\r\n" + s[8:], s + "\n", "\r" + s} {
			if _, err := enc.Strict().DecodeString(bad); err != nil {
				t.Fatalf("encoding/base64 no longer takes %q (%v): this check may be simplified", bad, err)
			}
			if b, err := DecodeBase64(enc, bad); err == nil {
				t.Errorf("DecodeBase64(%q) = %q, want an error", bad, b)
			}
		}
	}
	if _, err := DecodeBase64(base64.StdEncoding, "QQ=="); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeBase64(base64.StdEncoding, "QR=="); err == nil {
		t.Error("padding bits set: decoded")
	}
}
