package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// TestResultFrameMatchesEncodeFrame checks that the fast result encoding writes exactly the
// bytes tooladapter.EncodeFrame writes, for real results of every operation, including text
// that JSON escapes, and that results the fast path cannot carry take the slow one.
func TestResultFrameMatchesEncodeFrame(t *testing.T) {
	dir := t.TempDir()
	text := "line \"one\"\n\ttab\\ and \x01 ctrl, \u00e9\u2028\u2029 <html> & \U0001F600 done\n"
	for name, content := range map[string]string{"a.txt": text, "sub/b.txt": strings.Repeat("needle x\n", 50)} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root, err := fsops.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	id := tooladapter.Identity{AdapterID: "airlock-fs", AdapterVersion: "1.2.3-rc.1", HostInstanceID: "host-1",
		SessionID: "agent.a:b_c-d", Generation: 9007199254740991}
	c := &conn{s: &Server{log: slog.New(slog.DiscardHandler)}, g: &grant{id: "g-1", identity: id, root: root},
		maxOut: 4 << 20, head: resultHead(id)}
	if c.head == nil {
		t.Fatal("no result head: tooladapter's result encoding changed")
	}
	n := func(v int64) *int64 { return &v }
	cases := []struct {
		op   string
		args any
	}{
		{tooladapter.OpStat, &fsops.StatPayload{Path: "a.txt"}},
		{tooladapter.OpStat, &fsops.StatPayload{Path: "sub"}},
		{tooladapter.OpRead, &fsops.ReadPayload{Path: "a.txt"}},
		{tooladapter.OpRead, &fsops.ReadPayload{Path: "a.txt", Offset: n(3), MaxBytes: n(9)}},
		{tooladapter.OpRead, &fsops.ReadPayload{Path: "a.txt", Offset: n(1000)}},
		{tooladapter.OpList, &fsops.ListPayload{Path: "."}},
		{tooladapter.OpSearch, &fsops.SearchPayload{Path: ".", Query: "e"}},
		{tooladapter.OpWrite, &fsops.WritePayload{Path: "w.txt", Content: text}},
		{tooladapter.OpEdit, &fsops.EditPayload{Path: "w.txt", Edits: []fsops.Edit{{OldText: "done", NewText: "1\n"}}}},
	}
	for i, tc := range cases {
		r := &request{c: c, id: "req-" + tc.op + ":1", key: "tool-" + strings.Repeat("f", 64), op: tc.op,
			args: tc.args, ctx: context.Background()}
		res := c.execute(r)
		if res.err != nil {
			t.Fatalf("case %d %s: %+v", i, tc.op, res.err)
		}
		fast, ok := c.resultFrame(r, res.data)
		if !ok {
			t.Fatalf("case %d %s: fast path refused", i, tc.op)
		}
		slow, e := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindResult, Identity: id, RequestID: r.id,
			IdempotencyKey: r.key, Operation: r.op, OK: true, Data: res.data}, 0)
		if e != nil {
			t.Fatalf("case %d %s: EncodeFrame: %v", i, tc.op, e)
		}
		if !bytes.Equal(fast, slow) {
			t.Fatalf("case %d %s differs:\nfast %s\nslow %s", i, tc.op, fast, slow)
		}
		if res.owner != r || !bytes.Equal(res.frame, slow) {
			t.Fatalf("case %d %s: frame built with the data differs:\nbuilt %s\nslow  %s", i, tc.op, res.frame, slow)
		}
	}
	if _, ok := c.resultFrame(&request{id: `r"1`, key: "k", op: tooladapter.OpStat}, []byte(`{}`)); ok {
		t.Fatal("fast path took a request id JSON would escape")
	}
}

// TestCheckResultRead checks that a read result is held to the protocol's rules: the check of
// the result without its content, and the content's length.
func TestCheckResultRead(t *testing.T) {
	ok := &fsops.ReadResult{Content: "abc", BytesRead: 3, EOF: true}
	if e := checkResult(tooladapter.OpRead, ok, []byte(`{"content":"abc","bytesRead":3,"eof":true}`)); e != nil {
		t.Fatalf("valid read refused: %v", e)
	}
	long := &fsops.ReadResult{Content: strings.Repeat("x", tooladapter.MaxContentBytes+1), BytesRead: 1, EOF: true}
	if e := checkResult(tooladapter.OpRead, long, nil); e == nil {
		t.Fatal("content over MaxContentBytes passed")
	}
	if e := checkResult(tooladapter.OpRead, &fsops.ReadResult{BytesRead: -1}, nil); e == nil {
		t.Fatal("negative bytesRead passed")
	}
	if e := checkResult(tooladapter.OpStat, &fsops.StatResult{Type: "fifo"}, []byte(`{"type":"fifo","size":0}`)); e == nil {
		t.Fatal("stat of an unknown type passed")
	}
}

// TestCheckResultList checks that a listing, checked as its values, is held to exactly the
// protocol's rules: each case gets the verdict and the field that tooladapter.ValidateResult
// gives its encoding. The one difference is stricter: a name that is not UTF-8, which
// encoding/json would send with U+FFFD in place of its bad bytes (naming no entry), is refused.
func TestCheckResultList(t *testing.T) {
	const at = "2026-01-02T03:04:05.123456789Z"
	file := func(name string) fsops.ListEntry {
		return fsops.ListEntry{Name: name, Type: fsops.TypeFile, Size: 2, ModifiedAt: at}
	}
	many := make([]fsops.ListEntry, tooladapter.MaxListEntries+1)
	for i := range many {
		many[i] = file(fmt.Sprintf("f%05d", i))
	}
	cases := []struct {
		name     string
		res      fsops.ListResult
		field    string // "" when valid
		stricter bool   // the encoding passes the protocol's check
	}{
		{"valid", fsops.ListResult{Entries: []fsops.ListEntry{file("a"), {Name: "d", Type: fsops.TypeDirectory}}}, "", false},
		{"empty", fsops.ListResult{Entries: []fsops.ListEntry{}, Truncated: true}, "", false},
		{"null entries", fsops.ListResult{}, "entries", false},
		{"too many", fsops.ListResult{Entries: many}, "entries", false},
		{"empty name", fsops.ListResult{Entries: []fsops.ListEntry{file("")}}, "entries.name", false},
		{"dot dot", fsops.ListResult{Entries: []fsops.ListEntry{file("a"), file("..")}}, "entries.name", false},
		{"slash", fsops.ListResult{Entries: []fsops.ListEntry{file("a/b")}}, "entries.name", false},
		{"control", fsops.ListResult{Entries: []fsops.ListEntry{file("a\x01")}}, "entries.name", false},
		{"invalid UTF-8", fsops.ListResult{Entries: []fsops.ListEntry{file("a\xff")}}, "entries.name", true},
		{"type", fsops.ListResult{Entries: []fsops.ListEntry{{Name: "p", Type: "fifo"}}}, "entries.type", false},
		{"no type", fsops.ListResult{Entries: []fsops.ListEntry{{Name: "p"}}}, "entries.type", false},
		{"size", fsops.ListResult{Entries: []fsops.ListEntry{{Name: "p", Type: fsops.TypeFile, Size: -1}}}, "entries.size", false},
		{"size over 2^53", fsops.ListResult{Entries: []fsops.ListEntry{{Name: "p", Type: fsops.TypeFile, Size: 1 << 53}}}, "entries.size", false},
		{"modifiedAt", fsops.ListResult{Entries: []fsops.ListEntry{{Name: "p", Type: fsops.TypeFile, ModifiedAt: "yesterday"}}}, "entries.modifiedAt", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, err := json.Marshal(&c.res)
			if err != nil {
				t.Fatal(err)
			}
			want := tooladapter.ValidateResult(tooladapter.OpList, data)
			got := checkResult(tooladapter.OpList, &c.res, data)
			field := func(e *protocol.Error) any {
				if e == nil {
					return ""
				}
				return e.Details[tooladapter.DetailField]
			}
			if c.stricter {
				want = got
			}
			if field(got) != c.field || field(want) != c.field {
				t.Fatalf("field %q, the encoding's check %q, want %q (%v; %v)", field(got), field(want), c.field, got, want)
			}
			if got != nil && (got.Code != want.Code || got.Message != want.Message) {
				t.Fatalf("checkResult %v, ValidateResult of the encoding %v", got, want)
			}
		})
	}
}
