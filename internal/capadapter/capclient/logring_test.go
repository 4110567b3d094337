package capclient

import (
	"strings"
	"testing"
)

func TestLogRing(t *testing.T) {
	r := newLogRing()
	input := "plain\r\n\x1b[31mred\x07\tx\xff\n" + strings.Repeat("y", 3000) + "\nunterminated"
	drainStderr(strings.NewReader(input), r)
	got := r.snapshot()
	want := []string{"plain", "\uFFFD[31mred\uFFFD\tx\uFFFD", strings.Repeat("y", MaxLogLineBytes) + " …[truncated]", "unterminated"}
	if len(got) != len(want) {
		t.Fatalf("lines = %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, got[i], want[i])
		}
	}
	// Eviction keeps the newest lines within MaxLogBytes.
	for i := range 1000 {
		r.add(strings.Repeat("z", 100)+string(rune('a'+i%26)), false)
	}
	snap := r.snapshot()
	total := 0
	for _, l := range snap {
		total += len(l)
	}
	if total > MaxLogBytes || snap[len(snap)-1] != strings.Repeat("z", 100)+string(rune('a'+999%26)) || r.dropped == 0 {
		t.Fatalf("after eviction: %d bytes, %d lines, last %q", total, len(snap), snap[len(snap)-1])
	}
}
