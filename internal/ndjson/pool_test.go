package ndjson

import (
	"bytes"
	"strings"
	"testing"
)

func TestGetBufferCapacity(t *testing.T) {
	for _, n := range []int{0, 1, MinPooledBytes - 1, MinPooledBytes, MinPooledBytes + 1, 3 << 20, 4 << 20, 4<<20 + 1, 1 << 26, 1<<26 + 1} {
		b := GetBuffer(n)
		if len(b) != 0 || cap(b) < n {
			t.Fatalf("GetBuffer(%d): len %d cap %d", n, len(b), cap(b))
		}
		PutBuffer(b)
	}
}

// TestGetBufferReuses checks that a buffer handed back is handed out again, emptied, for any
// size it can hold: that is the whole point of the pool. sync.Pool may drop an item at any
// time (a garbage collection between Put and Get), so a miss is retried a few times.
func TestGetBufferReuses(t *testing.T) {
	for attempt := 0; ; attempt++ {
		b := GetBuffer(1 << 20)
		b = append(b, "marker"...)
		PutBuffer(b)
		got := GetBuffer(600 << 10) // a smaller size of the same class
		if cap(got) == cap(b) && &got[:1][0] == &b[0] {
			if len(got) != 0 {
				t.Fatalf("reused buffer has length %d", len(got))
			}
			return
		}
		if attempt == 10 {
			t.Fatal("a buffer handed back was never handed out again")
		}
	}
}

// TestReaderLongLinesThroughPool reads lines longer than the read buffer, of changing sizes,
// so that they are assembled in pooled buffers that go back at the next call and grow: each
// line must come back exactly, and a copy taken before the next call must stay intact.
func TestReaderLongLinesThroughPool(t *testing.T) {
	var in strings.Builder
	var want []string
	for i, n := range []int{100 << 10, 10, 300 << 10, 70 << 10, 1 << 20, 64<<10 - 1, 64 << 10, 64<<10 + 1, 2 << 20} {
		line := strings.Repeat(string(rune('a'+i)), n)
		want = append(want, line)
		in.WriteString(line)
		if i%2 == 0 {
			in.WriteString("\r")
		}
		in.WriteString("\n")
	}
	for _, shape := range readerShapes {
		r := NewReader(shape.wrap(strings.NewReader(in.String())), 4<<20)
		var got [][]byte
		for range want {
			line, err := r.Next()
			if err != nil {
				t.Fatalf("%s: %v", shape.name, err)
			}
			got = append(got, bytes.Clone(line))
		}
		for i := range want {
			if string(got[i]) != want[i] {
				t.Fatalf("%s: line %d has %d bytes, want %d of %q", shape.name, i, len(got[i]), len(want[i]), want[i][0])
			}
		}
	}
}
