package bus

import (
	"strings"
	"testing"
	"time"
)

// TestStatusSaysWhenCertificatesExpire: the status text says when the node's certificate and
// the CA expire, loudly within ExpiryWarning and once expired.
func TestStatusSaysWhenCertificatesExpire(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		notAfter time.Time
		want     string
	}{
		{now.Add(400 * 24 * time.Hour), "valid until " + now.Add(400*24*time.Hour).UTC().Format(time.DateOnly) + " (400 days)"},
		{now.Add(10*24*time.Hour + time.Hour), "EXPIRES on " + now.Add(10*24*time.Hour+time.Hour).UTC().Format(time.DateOnly) + ", in 10 days (write the fabric again: airlock fabric init)"},
		{now.Add(-time.Hour), "EXPIRED on " + now.Add(-time.Hour).UTC().Format(time.DateOnly)},
	} {
		if got := expiryText(tc.notAfter, now); !strings.HasPrefix(got, tc.want) {
			t.Errorf("expiryText(%v) = %q, want %q", tc.notAfter, got, tc.want)
		}
	}
	fb := &Fabric{certNotAfter: now.Add(400 * 24 * time.Hour), caNotAfter: now.Add(3000 * 24 * time.Hour)}
	if fb.ExpiresSoon(now) {
		t.Error("certificates valid for 400 and 3,000 days expire soon")
	}
	if !fb.ExpiresSoon(now.Add(380*24*time.Hour)) || !(&Fabric{certNotAfter: fb.certNotAfter, caNotAfter: now.Add(29 * 24 * time.Hour)}).ExpiresSoon(now) {
		t.Error("a certificate within 30 days does not expire soon")
	}
	var b strings.Builder
	st := FabricStatus{Node: "a", Mode: ModeCluster, Certificate: &CertificateStatus{NotAfter: now.Add(5 * 24 * time.Hour), CANotAfter: now.Add(3000 * 24 * time.Hour)}}
	if err := WriteStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if text := b.String(); !strings.Contains(text, "\ncertificate: EXPIRES on ") || !strings.Contains(text, "; CA: valid until ") {
		t.Fatalf("status text:\n%s", text)
	}
}
