//go:build unix

package transcript_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/transcript"
)

func sampleEntries() []transcript.Entry {
	berlin := time.FixedZone("CET", 3600)
	return []transcript.Entry{
		{Kind: "message", Role: "system", Content: "be brief", At: time.Date(2026, 12, 2, 17, 0, 0, 123456789, berlin)},
		{Kind: "message", Role: "user", Content: "read a.txt " + secret + " \n\"quoted\" <&> \u2028 ü", RequestID: "req-1"},
		{Kind: "message", Role: "assistant", RequestID: "req-1", ToolCalls: []transcript.ToolCall{
			{ID: "call-1", Name: "fs.read", Arguments: `{"path":"a.txt"}`},
			{ID: "call-2", Name: "fs.stat", Arguments: ""},
		}},
		{Kind: "message", Role: "tool", ToolCallID: "call-1", Content: "contents\r\n", RequestID: "req-1"},
		{Role: "assistant", Content: "done", RequestID: "req-1"}, // empty Kind means message
	}
}

func TestRoundTrip(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "a", "convs") // created by Create
	now := time.Date(2026, 12, 2, 16, 5, 9, 0, time.FixedZone("X", -7200))
	f, err := transcript.Create(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	id := f.Identity()
	if !regexp.MustCompile(`^20261202T180509Z-[0-9a-f]{16}$`).MatchString(id.ID) {
		t.Fatalf("id %q does not have the form <UTC time>-<16 hex>", id.ID)
	}
	if id.File != filepath.Join(dir, id.ID+".jsonl") || !filepath.IsAbs(id.File) {
		t.Fatalf("file %q, want %q", id.File, filepath.Join(dir, id.ID+".jsonl"))
	}
	for path, want := range map[string]fs.FileMode{dir: 0o700, filepath.Join(parent, "a"): 0o700, id.File: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %#o, want %#o", path, fi.Mode().Perm(), want)
		}
	}
	wantHeader := `{"kind":"header","formatVersion":1,"conversationId":"` + id.ID + `","createdAt":"2026-12-02T18:05:09Z"}` + "\n"
	if got := string(readFile(t, id.File)); got != wantHeader {
		t.Fatalf("header:\n got %s\nwant %s", got, wantHeader)
	}
	if f.Size() != int64(len(wantHeader)) {
		t.Fatalf("Size %d after Create, want %d", f.Size(), len(wantHeader))
	}

	want := sampleEntries()
	before := time.Now()
	if err := f.Append(want[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := f.Append(want[2:]...); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if err := f.Append(); err != nil {
		t.Fatalf("empty Append: %v", err)
	}
	if fi, err := os.Stat(id.File); err != nil || fi.Size() != f.Size() {
		t.Fatalf("file is %v bytes (%v), Size says %d", fi.Size(), err, f.Size())
	}
	if !bytes.Contains(readFile(t, id.File), []byte(`<&>`)) {
		t.Error("<, > and & are escaped in the file")
	}
	if f.Len() != len(want) {
		t.Fatalf("Len %d, want %d", f.Len(), len(want))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := f.Append(want[0]); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Append after Close: %v, want os.ErrClosed", err)
	}

	g, got, repaired := open(t, id.File)
	if repaired {
		t.Fatal("Open repaired an intact file")
	}
	if g.Identity() != id {
		t.Fatalf("reopened identity %+v, want %+v", g.Identity(), id)
	}
	if g.Size() != f.Size() || g.Len() != len(want) {
		t.Fatalf("reopened Size %d Len %d, want %d %d", g.Size(), g.Len(), f.Size(), len(want))
	}
	for i, e := range got {
		if e.At.Location() != time.UTC {
			t.Errorf("entry %d time %v is not UTC", i, e.At)
		}
		if want[i].At.IsZero() {
			if e.At.Before(before.Add(-time.Second)) || e.At.After(after.Add(time.Second)) {
				t.Errorf("entry %d stamped %v, not between %v and %v", i, e.At, before, after)
			}
			want[i].At = e.At
		}
	}
	if !sameEntries(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}

	// The reopened file continues the conversation.
	more := transcript.Entry{Kind: "message", Role: "user", Content: "next", RequestID: "req-2"}
	if err := g.Append(more); err != nil {
		t.Fatal(err)
	}
	g.Close()
	_, got, _ = open(t, id.File)
	if len(got) != len(want)+1 || got[len(want)].Content != "next" {
		t.Fatalf("after a second session got %d entries, want %d ending in the new one", len(got), len(want)+1)
	}
}

func TestAppendLeavesCallerEntriesAlone(t *testing.T) {
	f := create(t, privateDir(t))
	entries := []transcript.Entry{{Role: "user", Content: "hi"}}
	if err := f.Append(entries...); err != nil {
		t.Fatal(err)
	}
	if entries[0].Kind != "" || !entries[0].At.IsZero() {
		t.Fatalf("Append modified the caller's entry: %+v", entries[0])
	}
}

func TestLatest(t *testing.T) {
	if _, ok, err := transcript.Latest(filepath.Join(t.TempDir(), "missing")); ok || err != nil {
		t.Fatalf("missing dir: ok %v err %v, want none", ok, err)
	}
	dir := privateDir(t)
	if _, ok, err := transcript.Latest(dir); ok || err != nil {
		t.Fatalf("empty dir: ok %v err %v, want none", ok, err)
	}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var newest string
	for _, d := range []time.Duration{time.Hour, 48 * time.Hour, 0, time.Second} { // not in time order
		f, err := transcript.Create(dir, base.Add(d))
		if err != nil {
			t.Fatal(err)
		}
		if d == 48*time.Hour {
			newest = f.Identity().File
		}
		f.Close()
	}
	// Names that do not have Create's form do not count, however they sort.
	for _, name := range []string{
		"zzz.jsonl",
		"20991231T000000Z-0123456789abcdef.jsonl.tmp",
		"20991231T000000Z-0123456789ABCDEF.jsonl",
		"20991231T000000Z-0123456789abcde.jsonl",
		"20991231T000000-0123456789abcdef.jsonl",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := transcript.Latest(dir)
	if err != nil || !ok || got != newest {
		t.Fatalf("Latest = %q, %v, %v; want %q", got, ok, err, newest)
	}

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	_, _, err = transcript.Latest(link)
	wantCode(t, err, protocol.CodeInsecureStatePath)
}

// TestCreateCrashLeavesNoTranscript: Create made the transcript's name first and wrote its
// header after, so that a daemon killed in between (or a power cut before the header reached
// the disk) left a transcript with no whole header under a name Latest returns: every later
// open in mode continue failed corrupt_transcript until an operator removed the file. The
// name now appears only once the header is durable; the crash here is the process dying in
// the fsync of the header.
func TestCreateCrashLeavesNoTranscript(t *testing.T) {
	dir := privateDir(t)
	before, err := transcript.Create(dir, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	before.Close()

	type crash struct{}
	transcript.SetSync(t, func(*os.File) error { panic(crash{}) })
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("Create did not sync the header")
			} else if _, ok := r.(crash); !ok {
				panic(r)
			}
		}()
		transcript.Create(dir, time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC))
	}()

	got, ok, err := transcript.Latest(dir)
	if err != nil || !ok || got != before.Identity().File {
		t.Fatalf("Latest after a crash in Create = %q, %v, %v; want the transcript before it, %q", got, ok, err, before.Identity().File)
	}
	if _, _, _, err := transcript.Open(context.Background(), got); err != nil {
		t.Fatal(err)
	}
}

func TestCreateRefusesInsecureDirectory(t *testing.T) {
	tests := []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"symlinked dir", func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(privateDir(t), link); err != nil {
				t.Fatal(err)
			}
			return link
		}},
		{"group readable dir", func(t *testing.T) string {
			dir := privateDir(t)
			if err := os.Chmod(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"other writable dir", func(t *testing.T) string {
			dir := privateDir(t)
			if err := os.Chmod(dir, 0o703); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"dir is a file", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}},
		{"empty path", func(*testing.T) string { return "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir(t)
			f, err := transcript.Create(dir, time.Now())
			if f != nil {
				f.Close()
			}
			wantCode(t, err, protocol.CodeInsecureStatePath)
			if dir != "" {
				if names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl")); len(names) != 0 {
					t.Fatalf("Create left %v behind", names)
				}
			}
		})
	}
}

func TestOpenRefusals(t *testing.T) {
	hdr := headerLine(testID)
	msg := func(s string) string { return s + "\n" }
	user := msg(`{"kind":"message","role":"user","content":"` + secret + `","at":"2026-12-02T16:05:01Z"}`)
	tests := []struct {
		name string
		// setup returns the path to open; for a file written by writeTranscript, data is
		// its content and must be unchanged afterwards.
		setup    func(t *testing.T, dir string) string
		data     string
		code     string
		contains string // the error names this (besides the path)
	}{
		{name: "missing file", code: transcript.CodeConversationIdentityMissing,
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, testID+".jsonl") }},
		{name: "missing dir", code: transcript.CodeConversationIdentityMissing,
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "gone", testID+".jsonl") }},
		{name: "empty path", code: transcript.CodeConversationIdentityMissing,
			setup: func(t *testing.T, dir string) string { return "" }},
		{name: "symlink file", code: protocol.CodeInsecureStatePath, contains: "symbolic link",
			setup: func(t *testing.T, dir string) string {
				real := writeTranscript(t, dir, hdr)
				link := filepath.Join(dir, "20261202T160501Z-0123456789abcdef.jsonl")
				if err := os.Symlink(real, link); err != nil {
					t.Fatal(err)
				}
				return link
			}},
		{name: "symlinked dir", code: protocol.CodeInsecureStatePath, contains: "symbolic link",
			setup: func(t *testing.T, dir string) string {
				path := writeTranscript(t, dir, hdr)
				link := filepath.Join(t.TempDir(), "link")
				if err := os.Symlink(dir, link); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(link, filepath.Base(path))
			}},
		{name: "group readable dir", code: protocol.CodeInsecureStatePath, contains: "mode",
			setup: func(t *testing.T, dir string) string {
				path := writeTranscript(t, dir, hdr)
				if err := os.Chmod(dir, 0o740); err != nil {
					t.Fatal(err)
				}
				return path
			}},
		{name: "0644 file", code: protocol.CodeInsecureStatePath, contains: "mode 0644",
			setup: func(t *testing.T, dir string) string {
				path := writeTranscript(t, dir, hdr)
				if err := os.Chmod(path, 0o644); err != nil {
					t.Fatal(err)
				}
				return path
			}},
		{name: "directory", code: protocol.CodeInsecureStatePath, contains: "not a regular file",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, testID+".jsonl")
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
				return path
			}},
		{name: "fifo", code: protocol.CodeInsecureStatePath, contains: "not a regular file",
			setup: func(t *testing.T, dir string) string {
				path := filepath.Join(dir, testID+".jsonl")
				if err := mkfifo(path); err != nil {
					t.Skip("mkfifo:", err)
				}
				return path
			}},
		{name: "empty file", data: "", code: transcript.CodeCorruptTranscript, contains: "no header"},
		{name: "torn header", data: hdr[:20], code: transcript.CodeCorruptTranscript, contains: "header"},
		{name: "bad JSON", data: hdr + user + msg(`{"kind":"message","role":"user","content":"`+secret+`"`) + user,
			code: transcript.CodeCorruptTranscript, contains: "line 3"},
		{name: "message first", data: user + hdr, code: transcript.CodeCorruptTranscript, contains: "line 1"},
		{name: "header of version 2", data: msg(`{"kind":"header","formatVersion":2,"conversationId":"` + testID + `","createdAt":"2026-12-02T16:05:00Z","more":1}`),
			code: transcript.CodeCorruptTranscript, contains: "format version 2"},
		{name: "header without version", data: msg(`{"kind":"header","conversationId":"` + testID + `","createdAt":"2026-12-02T16:05:00Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "line 1"},
		{name: "header with bad id", data: headerLine("../../etc"), code: transcript.CodeCorruptTranscript, contains: "conversationId"},
		{name: "header with unknown key", data: msg(`{"kind":"header","formatVersion":1,"conversationId":"` + testID + `","createdAt":"2026-12-02T16:05:00Z","` + secret + `":1}`),
			code: transcript.CodeCorruptTranscript, contains: "unknown field"},
		{name: "second header", data: hdr + user + hdr, code: transcript.CodeCorruptTranscript, contains: "line 3"},
		{name: "unknown role", data: hdr + msg(`{"kind":"message","role":"developer","content":"`+secret+`","at":"2026-12-02T16:05:01Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "unknown role"},
		{name: "unknown kind", data: hdr + msg(`{"kind":"note","role":"user","at":"2026-12-02T16:05:01Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "unknown kind"},
		{name: "unknown field", data: hdr + msg(`{"kind":"message","role":"user","at":"2026-12-02T16:05:01Z","`+secret+`":"x"}`),
			code: transcript.CodeCorruptTranscript, contains: "line 2"},
		{name: "duplicate key", data: hdr + msg(`{"kind":"message","role":"user","role":"system","at":"2026-12-02T16:05:01Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "duplicate key"},
		{name: "case variant key", data: hdr + msg(`{"kind":"message","Role":"user","at":"2026-12-02T16:05:01Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "line 2"},
		{name: "tool calls on a user message", data: hdr + msg(`{"kind":"message","role":"user","toolCalls":[{"id":"a","name":"b","arguments":""}],"at":"2026-12-02T16:05:01Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "toolCalls"},
		{name: "tool call id on an assistant message", data: hdr + msg(`{"kind":"message","role":"assistant","toolCallId":"a","at":"2026-12-02T16:05:01Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "toolCallId"},
		{name: "null time", data: hdr + msg(`{"kind":"message","role":"user","at":null}`), code: transcript.CodeCorruptTranscript, contains: "line 2"},
		{name: "missing time", data: hdr + msg(`{"kind":"message","role":"user"}`), code: transcript.CodeCorruptTranscript, contains: "missing time"},
		{name: "malformed time", data: hdr + msg(`{"kind":"message","role":"user","at":"`+secret+`"}`), code: transcript.CodeCorruptTranscript, contains: "line 2"},
		{name: "header field in a message", data: hdr + msg(`{"kind":"message","role":"user","formatVersion":1,"at":"2026-12-02T16:05:01Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "header only"},
		{name: "empty line", data: hdr + "\n" + user, code: transcript.CodeCorruptTranscript, contains: "line 2 is empty"},
		{name: "invalid UTF-8", data: hdr + msg(`{"kind":"message","role":"user","content":"`+secret+"\xff"+`","at":"2026-12-02T16:05:01Z"}`),
			code: transcript.CodeCorruptTranscript, contains: "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := privateDir(t)
			var path string
			if tt.setup != nil {
				path = tt.setup(t, dir)
			} else {
				path = writeTranscript(t, dir, tt.data)
			}
			f, entries, repaired, err := transcript.Open(t.Context(), path)
			if f != nil || entries != nil || repaired {
				t.Fatalf("refused Open returned %v, %d entries, repaired %v", f, len(entries), repaired)
			}
			wantCode(t, err, tt.code)
			// A refused directory is named instead of the file.
			if path != "" && !strings.Contains(err.Error(), filepath.Base(path)) && !strings.Contains(err.Error(), filepath.Dir(path)) {
				t.Errorf("error does not name the path: %v", err)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not say %q", err, tt.contains)
			}
			if tt.setup == nil {
				if got := string(readFile(t, path)); got != tt.data {
					t.Errorf("refused Open changed the file")
				}
			}
		})
	}
}

func TestOpenMissingIsNotExist(t *testing.T) {
	_, _, _, err := transcript.Open(t.Context(), filepath.Join(privateDir(t), testID+".jsonl"))
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, &protocol.Error{Code: transcript.CodeConversationIdentityMissing}) {
		t.Fatalf("got %v; want both fs.ErrNotExist and the coded error", err)
	}
}

func TestOpenLimits(t *testing.T) {
	hdr := headerLine(testID)
	user := `{"kind":"message","role":"user","content":"` + secret + `","at":"2026-12-02T16:05:01Z"}` + "\n"

	t.Run("file over MaxFileBytes", func(t *testing.T) {
		path := writeTranscript(t, privateDir(t), hdr+user)
		if err := os.Truncate(path, transcript.MaxFileBytes+1); err != nil { // sparse
			t.Fatal(err)
		}
		_, _, _, err := transcript.Open(t.Context(), path)
		wantCode(t, err, transcript.CodeCorruptTranscript)
		if !strings.Contains(err.Error(), fmt.Sprint(transcript.MaxFileBytes+1)) {
			t.Fatalf("error does not give the size: %v", err)
		}
	})
	t.Run("file at MaxFileBytes is read", func(t *testing.T) {
		transcript.SetLimits(t, 0, int64(len(hdr)+len(user)), 0)
		open(t, writeTranscript(t, privateDir(t), hdr+user))
	})
	t.Run("line over MaxLineBytes", func(t *testing.T) {
		long := `{"kind":"message","role":"user","content":"` + secret + strings.Repeat("x", transcript.MaxLineBytes) + `","at":"2026-12-02T16:05:01Z"}` + "\n"
		path := writeTranscript(t, privateDir(t), hdr+user+long+user)
		_, _, _, err := transcript.Open(t.Context(), path)
		wantCode(t, err, transcript.CodeCorruptTranscript)
		if !strings.Contains(err.Error(), "line 3") {
			t.Fatalf("error does not name line 3: %v", err)
		}
	})
	t.Run("line at MaxLineBytes is read", func(t *testing.T) {
		long := `{"kind":"message","role":"user","content":"` + strings.Repeat("x", 200) + `","at":"2026-12-02T16:05:01Z"}` + "\n"
		transcript.SetLimits(t, len(long)-1, 0, 0)
		open(t, writeTranscript(t, privateDir(t), hdr+long))
		transcript.SetLimits(t, len(long)-2, 0, 0)
		_, _, _, err := transcript.Open(t.Context(), writeTranscript(t, privateDir(t), hdr+long))
		wantCode(t, err, transcript.CodeCorruptTranscript)
	})
	t.Run("more than MaxEntries", func(t *testing.T) {
		transcript.SetLimits(t, 0, 0, 3)
		open(t, writeTranscript(t, privateDir(t), hdr+strings.Repeat(user, 3)))
		_, _, _, err := transcript.Open(t.Context(), writeTranscript(t, privateDir(t), hdr+strings.Repeat(user, 4)))
		wantCode(t, err, transcript.CodeCorruptTranscript)
		if !strings.Contains(err.Error(), "line 5") {
			t.Fatalf("error does not name line 5: %v", err)
		}
	})
}

func TestOpenRepairsTornLastLine(t *testing.T) {
	for _, tail := range []string{
		`{"kind":"message","role":"user","content":"` + secret,
		`{"kind":"message","role":"user","at":"2026-12-02T16:05:01Z"}`, // whole but for its LF
		"\x00\x00\x00\x00",
		"{",
		strings.Repeat("y", 300), // longer than the lowered line limit
	} {
		t.Run(fmt.Sprintf("%.12q", tail), func(t *testing.T) {
			transcript.SetLimits(t, 200, 0, 0)
			dir := privateDir(t)
			f := create(t, dir)
			path := f.Identity().File
			if err := f.Append(transcript.Entry{Role: "user", Content: "one"}, transcript.Entry{Role: "assistant", Content: "two"}); err != nil {
				t.Fatal(err)
			}
			good := readFile(t, path)
			f.Close()
			if err := os.WriteFile(path, append(bytes.Clone(good), tail...), 0o600); err != nil {
				t.Fatal(err)
			}

			g, entries, repaired := open(t, path)
			if !repaired || len(entries) != 2 {
				t.Fatalf("repaired %v with %d entries; want repaired with 2", repaired, len(entries))
			}
			if got := readFile(t, path); !bytes.Equal(got, good) {
				t.Fatalf("file not truncated back to its complete lines:\n%q", got)
			}
			if g.Size() != int64(len(good)) {
				t.Fatalf("Size %d, want %d", g.Size(), len(good))
			}
			if err := g.Append(transcript.Entry{Role: "user", Content: "three"}); err != nil {
				t.Fatal(err)
			}
			g.Close()
			_, entries, repaired = open(t, path)
			if repaired || len(entries) != 3 || entries[2].Content != "three" {
				t.Fatalf("after repair and append: repaired %v, %d entries", repaired, len(entries))
			}
		})
	}
}

func TestAppendRefusals(t *testing.T) {
	tests := []struct {
		name    string
		limits  func(t *testing.T)
		entries []transcript.Entry
		code    string
	}{
		{name: "entry too large", code: transcript.CodeTranscriptEntryTooLarge, entries: []transcript.Entry{
			{Role: "user", Content: "fine"},
			{Role: "user", Content: secret + strings.Repeat("x", transcript.MaxLineBytes)},
		}},
		{name: "file full", code: transcript.CodeTranscriptFull,
			limits:  func(t *testing.T) { transcript.SetLimits(t, 0, 400, 0) },
			entries: []transcript.Entry{{Role: "user", Content: secret + strings.Repeat("x", 100)}, {Role: "user", Content: strings.Repeat("x", 200)}}},
		{name: "too many entries", code: transcript.CodeTranscriptFull,
			limits:  func(t *testing.T) { transcript.SetLimits(t, 0, 0, 2) },
			entries: []transcript.Entry{{Role: "user"}, {Role: "user"}, {Role: "user"}}},
		{name: "unknown role", code: transcript.CodeInvalidEntry, entries: []transcript.Entry{{Role: "developer", Content: secret}}},
		{name: "missing role", code: transcript.CodeInvalidEntry, entries: []transcript.Entry{{Content: secret}}},
		{name: "header kind", code: transcript.CodeInvalidEntry, entries: []transcript.Entry{{Kind: "header", Role: "user"}}},
		{name: "unknown kind", code: transcript.CodeInvalidEntry, entries: []transcript.Entry{{Kind: "note", Role: "user"}}},
		{name: "conversation id in a message", code: transcript.CodeInvalidEntry, entries: []transcript.Entry{{Role: "user", ConversationID: testID}}},
		{name: "tool calls on a tool message", code: transcript.CodeInvalidEntry, entries: []transcript.Entry{{Role: "tool", ToolCalls: []transcript.ToolCall{{ID: "a"}}}}},
		{name: "tool call id on a user message", code: transcript.CodeInvalidEntry, entries: []transcript.Entry{{Role: "user", ToolCallID: "a"}}},
		{name: "year 10000", code: transcript.CodeInvalidEntry, entries: []transcript.Entry{{Role: "user", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.limits != nil {
				tt.limits(t)
			}
			f := create(t, privateDir(t))
			if err := f.Append(transcript.Entry{Role: "system", Content: "start"}); err != nil {
				t.Fatal(err)
			}
			before, size := readFile(t, f.Identity().File), f.Size()
			wantCode(t, f.Append(tt.entries...), tt.code)
			if !bytes.Equal(readFile(t, f.Identity().File), before) || f.Size() != size || f.Len() != 1 {
				t.Fatal("a refused Append wrote something")
			}
			if err := f.Append(transcript.Entry{Role: "user"}); err != nil {
				t.Fatalf("Append after a refusal: %v", err)
			}
			_, entries, _ := open(t, f.Identity().File)
			if len(entries) != 2 {
				t.Fatalf("reopened with %d entries, want 2", len(entries))
			}
		})
	}
}

// TestAppendFillsToTheLimits checks that Append and Open agree on every limit: a file Append
// filled to the brim is one Open reads.
func TestAppendFillsToTheLimits(t *testing.T) {
	f := create(t, privateDir(t))
	x := strings.Repeat("x", 200) // the line is longer than the header
	e := transcript.Entry{Role: "user", Content: x, At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	line := int64(len(`{"kind":"message","role":"user","content":"`+x+`","at":"2026-01-01T00:00:00Z"}`) + 1)
	transcript.SetLimits(t, int(line-1), f.Size()+3*line, 3)
	if err := f.Append(e, e, e); err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.Append(e), transcript.CodeTranscriptFull)
	f.Close()
	open(t, f.Identity().File)
}

func TestConcurrentAppend(t *testing.T) {
	f := create(t, privateDir(t))
	const writers, batches = 16, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				n := 1 + (w+b)%3
				batch := make([]transcript.Entry, n)
				for i := range batch {
					batch[i] = transcript.Entry{
						Role:      "user",
						RequestID: fmt.Sprintf("w%d-b%d-%d/%d", w, b, i, n),
						// Large enough that a write is many pages.
						Content: strings.Repeat(string(rune('a'+w)), 1+(w*7919+b*104729)%(64<<10)),
					}
				}
				if err := f.Append(batch...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	size := f.Size()
	f.Close()

	_, entries, repaired := open(t, f.Identity().File)
	if repaired {
		t.Fatal("repaired after clean appends")
	}
	if fi, err := os.Stat(f.Identity().File); err != nil || fi.Size() != size {
		t.Fatalf("file size %v, Size said %d", fi, size)
	}
	next := make([]int, writers) // the next batch expected from each writer
	for i := 0; i < len(entries); {
		var w, b, k, n int
		if _, err := fmt.Sscanf(entries[i].RequestID, "w%d-b%d-%d/%d", &w, &b, &k, &n); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if b != next[w] || k != 0 {
			t.Fatalf("entry %d is writer %d batch %d part %d; want batch %d part 0", i, w, b, k, next[w])
		}
		for j := range n { // a batch is contiguous
			want := fmt.Sprintf("w%d-b%d-%d/%d", w, b, j, n)
			if entries[i+j].RequestID != want || strings.Trim(entries[i+j].Content, string(rune('a'+w))) != "" {
				t.Fatalf("entry %d is %q, want %q", i+j, entries[i+j].RequestID, want)
			}
		}
		next[w]++
		i += n
	}
	for w, b := range next {
		if b != batches {
			t.Errorf("writer %d: %d batches, want %d", w, b, batches)
		}
	}
}

func TestOpenHonoursContext(t *testing.T) {
	dir := privateDir(t)
	f := create(t, dir)
	if err := f.Append(transcript.Entry{Role: "user"}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	path := f.Identity().File
	torn := append(readFile(t, path), `{"kind":`...)
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g, _, _, err := transcript.Open(ctx, path)
	if g != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v, %v", g, err)
	}
	if !bytes.Equal(readFile(t, path), torn) {
		t.Fatal("a cancelled Open repaired the file")
	}

	ctx, cancel = context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	if _, _, _, err := transcript.Open(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open past its deadline: %v", err)
	}
}

func TestOpenIdentity(t *testing.T) {
	dir := privateDir(t)
	a := create(t, dir)
	a.Close()
	g, _, _, err := transcript.OpenIdentity(t.Context(), a.Identity())
	if err != nil {
		t.Fatal(err)
	}
	g.Close()

	b := create(t, dir)
	b.Close()
	// The catalog names a's id, but the file at its path now holds b's conversation.
	if err := os.Rename(b.Identity().File, a.Identity().File); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = transcript.OpenIdentity(t.Context(), a.Identity())
	wantCode(t, err, transcript.CodeConversationIdentityMissing)
}
