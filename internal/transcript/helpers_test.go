//go:build unix

package transcript_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/transcript"
)

// secret marks user content; it must never appear in an error.
const secret = "SECRET-7f3a"

func codeOf(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if got := codeOf(err); got != code {
		t.Fatalf("got %v (code %q), want code %q", err, got, code)
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("error quotes entry content: %v", err)
	}
}

// privateDir returns a fresh 0700 directory.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "transcripts")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func create(t *testing.T, dir string) *transcript.File {
	t.Helper()
	f, err := transcript.Create(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func open(t *testing.T, path string) (*transcript.File, []transcript.Entry, bool) {
	t.Helper()
	f, entries, repaired, err := transcript.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, entries, repaired
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// headerLine is a valid header, with LF.
func headerLine(id string) string {
	return `{"kind":"header","formatVersion":1,"conversationId":"` + id + `","createdAt":"2026-12-02T16:05:00Z"}` + "\n"
}

const testID = "20261202T160500Z-0123456789abcdef"

// writeTranscript writes data as a transcript file named like Create's, mode 0600.
func writeTranscript(t *testing.T, dir, data string) string {
	t.Helper()
	path := filepath.Join(dir, testID+".jsonl")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sameEntries compares entries as values: times by instant, empty and nil tool calls alike.
func sameEntries(a, b []transcript.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.At.Equal(y.At) {
			return false
		}
		x.At, y.At = time.Time{}, time.Time{}
		if x.Kind == "" {
			x.Kind = transcript.KindMessage
		}
		if y.Kind == "" {
			y.Kind = transcript.KindMessage
		}
		if len(x.ToolCalls) == 0 && len(y.ToolCalls) == 0 {
			x.ToolCalls, y.ToolCalls = nil, nil
		}
		xj, _ := json.Marshal(x)
		yj, _ := json.Marshal(y)
		if !bytes.Equal(xj, yj) {
			return false
		}
	}
	return true
}
