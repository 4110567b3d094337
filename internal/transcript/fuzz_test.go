//go:build unix

package transcript_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/transcript"
)

// Seeds live in testdata/fuzz/FuzzOpen; `go test` runs them, `go test -fuzz` grows them.

// FuzzOpen writes arbitrary bytes as a transcript and opens it. Open either refuses the file
// as corrupt_transcript, leaving it untouched, or returns entries that are valid messages:
// the file is then exactly its complete lines (a torn last line cut off and reported), and
// the entries survive being appended to a new transcript and to the repaired one.
func FuzzOpen(f *testing.F) {
	transcript.SkipSync(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := privateDir(t)
		path := filepath.Join(dir, "20261202T160500Z-0123456789abcdef.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		tf, entries, repaired, err := transcript.Open(t.Context(), path)
		if err != nil {
			if tf != nil || entries != nil || repaired {
				t.Fatalf("refused Open returned %v, %d entries, repaired %v", tf, len(entries), repaired)
			}
			if code := codeOf(err); code != transcript.CodeCorruptTranscript {
				t.Fatalf("got %v (code %q), want corrupt_transcript", err, code)
			}
			if !bytes.Equal(readFile(t, path), data) {
				t.Fatal("a refused Open changed the file")
			}
			return
		}
		defer tf.Close()

		want := data
		if i := bytes.LastIndexByte(data, '\n'); i != len(data)-1 {
			want = data[:i+1]
		}
		if repaired != (len(want) != len(data)) {
			t.Fatalf("repaired %v for a file of %d bytes with %d in complete lines", repaired, len(data), len(want))
		}
		if got := readFile(t, path); !bytes.Equal(got, want) {
			t.Fatalf("after Open the file is\n%q\nwant\n%q", got, want)
		}
		if tf.Size() != int64(len(want)) || tf.Len() != len(entries) || bytes.Count(want, []byte("\n")) != len(entries)+1 {
			t.Fatalf("Size %d Len %d for %d bytes, %d lines", tf.Size(), tf.Len(), len(want), bytes.Count(want, []byte("\n")))
		}
		for i, e := range entries {
			if e.Kind != transcript.KindMessage || e.At.IsZero() {
				t.Fatalf("entry %d is not a message with a time: %+v", i, e)
			}
		}

		// Re-encoded into a new transcript, the entries read back the same.
		nf, err := transcript.Create(filepath.Join(dir, "new"), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := nf.Append(entries...); err != nil {
			t.Fatalf("entries Open returned cannot be appended: %v", err)
		}
		nf.Close()
		_, again, repaired := open(t, nf.Identity().File)
		if repaired || !sameEntries(again, entries) {
			t.Fatalf("round trip through a new transcript:\n got %+v\nwant %+v", again, entries)
		}

		// The opened (perhaps repaired) file takes more lines and reads back whole.
		if err := tf.Append(entries...); err != nil {
			t.Fatalf("entries Open returned cannot be appended to their own file: %v", err)
		}
		tf.Close()
		_, twice, repaired := open(t, path)
		if repaired || !sameEntries(twice, append(entries, entries...)) {
			t.Fatalf("after appending to the opened file got %d entries, want %d", len(twice), 2*len(entries))
		}
	})
}
