package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
)

// TestEncodeReadMatchesEncodingJSON checks appendRead against encoding/json (HTML escaping
// off, as execute encodes every other result) on chosen and random contents, valid UTF-8 or
// not, with every byte value at every position of an eight-byte word.
func TestEncodeReadMatchesEncodingJSON(t *testing.T) {
	contents := []string{"", "a", "plain ascii text that is long enough for words\n",
		"\"\\\b\f\n\r\t\x00\x01\x1f\x7f <>&", "é\u2028\u2029\U0001F600 x", "\xff\xfe bad \xc3", "\xe2\x80", "\xed\xa0\x80 surrogate"}
	for c := range 256 {
		for pos := range 9 {
			contents = append(contents, strings.Repeat("x", pos)+string(rune(c))+strings.Repeat("y", 9-pos), strings.Repeat("x", pos)+string([]byte{byte(c)})+"yyyyyyyy")
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", " ", "\n", "\t", "\"", "\\", "\x00", "\x1f", "é", "\u2028", "\u2029", "😀", "\xff", "\xe2\x80", "abcdefgh"}
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(64) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		contents = append(contents, b.String())
	}
	for _, content := range contents {
		for _, r := range []fsops.ReadResult{{Content: content, BytesRead: int64(len(content)), EOF: true}, {Content: content, BytesRead: 4 << 20}} {
			want := encodeJSON(t, &r)
			if got := appendRead(nil, &r); !bytes.Equal(got, want) {
				t.Fatalf("content %q:\ngot  %s\nwant %s", content, got, want)
			}
		}
	}
}

// encodeJSON encodes v as execute encodes results without a fast path: HTML escaping off, no
// newline.
func encodeJSON(t *testing.T, v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func BenchmarkEncodeRead4MiB(b *testing.B) {
	line := strings.Repeat("0123456789abcdef", 4)[:63] + "\n"
	r := &fsops.ReadResult{Content: strings.Repeat(line, 4<<20/64), BytesRead: 4 << 20, EOF: true}
	b.SetBytes(4 << 20)
	b.Run("appendRead", func(b *testing.B) {
		for b.Loop() {
			appendRead(make([]byte, 0, readSize(r)), r)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.Encode(r)
		}
	})
}

// TestEncodeListMatchesEncodingJSON checks appendList against encoding/json (HTML escaping
// off) on listings of chosen and random names, with and without times, empty and null.
func TestEncodeListMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "B", " ", ".", "-", "\"", "\\", "<>&", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "😀", "\xff", "\xe2\x80", "abcdefgh"}
	name := func() string {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	results := []fsops.ListResult{{}, {Entries: []fsops.ListEntry{}}, {Entries: []fsops.ListEntry{}, Truncated: true}}
	for range 300 {
		r := fsops.ListResult{Entries: []fsops.ListEntry{}, Truncated: rng.IntN(2) == 0}
		for range rng.IntN(20) {
			e := fsops.ListEntry{Name: name(), Type: fsops.TypeFile, Size: rng.Int64N(1 << 53)}
			if rng.IntN(3) == 0 {
				e.Type, e.Size = fsops.TypeDirectory, 0
			}
			if rng.IntN(4) != 0 {
				e.ModifiedAt = "2026-12-05T07:00:00." + strings.Repeat("9", rng.IntN(10)) + "Z"
			}
			r.Entries = append(r.Entries, e)
		}
		results = append(results, r)
	}
	for _, r := range results {
		want := encodeJSON(t, &r)
		if got := appendList(nil, &r); !bytes.Equal(got, want) {
			t.Fatalf("listing %+v:\ngot  %s\nwant %s", r, got, want)
		}
	}
}

func BenchmarkEncodeList(b *testing.B) {
	r := &fsops.ListResult{Entries: make([]fsops.ListEntry, 1000)}
	for i := range r.Entries {
		r.Entries[i] = fsops.ListEntry{Name: fmt.Sprintf("f%04d.txt", i), Type: fsops.TypeFile, Size: 2, ModifiedAt: "2026-12-04T02:35:59.123456789Z"}
	}
	b.Run("appendList", func(b *testing.B) {
		buf := make([]byte, 0, listSize(r))
		for b.Loop() {
			buf = appendList(buf[:0], r)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
