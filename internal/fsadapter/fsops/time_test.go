package fsops

import (
	"testing"
	"time"
)

// TestFormatTime checks formatTime against the wire's layout, written out, at the edges of
// the years it renders and of the fraction's trailing zeros, and that years the wire's four
// digits cannot hold are left out.
func TestFormatTime(t *testing.T) {
	const layout = "2006-01-02T15:04:05.999999999Z"
	for _, tm := range []time.Time{
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Unix(0, 0),
		time.Unix(1764815759, 123456789),
		time.Unix(1764815759, 120000000),
		time.Unix(1764815759, 100),
		time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC),
	} {
		if got, want := formatTime(tm.Unix(), int64(tm.Nanosecond())), tm.UTC().Format(layout); got != want {
			t.Errorf("formatTime(%v) = %q, want %q", tm, got, want)
		}
	}
	for _, tm := range []time.Time{time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if got := formatTime(tm.Unix(), 0); got != "" {
			t.Errorf("formatTime(%v) = %q, want none", tm, got)
		}
	}
}
