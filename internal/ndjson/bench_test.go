package ndjson

import (
	"encoding/json"
	"strings"
	"testing"
)

// bigResult is a 4 MiB text file's read result as an adapter writes it: one long string with
// an escaped newline every 64 bytes.
var bigResult = func() []byte {
	b, _ := json.Marshal(map[string]any{"content": strings.Repeat("the quick brown fox jumps over the lazy dog, 0123456789 (text)\n", 4<<20/64), "eof": true})
	return b
}()

func BenchmarkValidLargeString(b *testing.B) {
	b.SetBytes(int64(len(bigResult)))
	for b.Loop() {
		if err := Valid(bigResult); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendCompactLargeString(b *testing.B) {
	b.SetBytes(int64(len(bigResult)))
	buf := make([]byte, 0, len(bigResult))
	for b.Loop() {
		if _, err := AppendCompact(buf[:0], bigResult); err != nil {
			b.Fatal(err)
		}
	}
}
