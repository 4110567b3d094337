package mcp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/mcp"
)

// The composed tools (compose.go) against a real airlockd and airlock-fs.

var composedNames = []string{"fs_edit_preview", "fs_find", "fs_head", "fs_list_sorted", "fs_read_many", "fs_tail", "fs_tree"}

// TestComposedToolsFollowTheGrant: a composed tool is listed exactly when the grant holds
// every operation it calls, and one that is not listed cannot be called by name.
func TestComposedToolsFollowTheGrant(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	for i, c := range []struct {
		ops  string
		want []string
	}{
		{"fs.read", []string{"fs_head", "fs_read", "fs_read_many"}},
		{"fs.read,fs.stat", []string{"fs_head", "fs_read", "fs_read_many", "fs_stat", "fs_tail"}},
		{"fs.stat", []string{"fs_stat"}},
		{"fs.list", []string{"fs_find", "fs_list", "fs_list_sorted", "fs_tree"}},
		{"fs.edit", []string{"fs_edit"}},
		{"fs.read,fs.edit", []string{"fs_edit", "fs_edit_preview", "fs_head", "fs_read", "fs_read_many"}},
		{"fs.search,fs.write", []string{"fs_search", "fs_write"}},
	} {
		session := fmt.Sprintf("grant-%d", i)
		e.open(t, session, e.root, fsp.grant(t, e.host, e.root, session, 1, c.ops))
		cn := e.connect(t, mcp.Config{SessionID: session, Generation: 1})
		var names []string
		for n := range cn.tools(t) {
			names = append(names, n)
		}
		slices.Sort(names)
		if !slices.Equal(names, c.want) {
			t.Errorf("%s: tools %v, want %v", c.ops, names, c.want)
		}
		for _, n := range composedNames {
			if slices.Contains(c.want, n) {
				continue
			}
			if _, err := cn.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: n, Arguments: map[string]any{"path": "."}}); err == nil {
				t.Errorf("%s: %s is callable", c.ops, n)
			}
		}
	}
}

// composedEnv is a session granted every operation, with a bridge on it.
func composedEnv(t *testing.T, extra ...string) (*env, *conn, map[string]*sdk.Tool) {
	t.Helper()
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit", extra...))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	return e, cn, cn.tools(t)
}

func write(t *testing.T, root, name, content string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// okCall calls a tool that must succeed, and checks its result against its output schema.
func okCall(t *testing.T, cn *conn, tools map[string]*sdk.Tool, name string, args map[string]any) (*sdk.CallToolResult, map[string]any) {
	t.Helper()
	r := cn.call(t, name, args)
	if r.IsError {
		t.Fatalf("%s %v: %s", name, args, text(r))
	}
	checkOutput(t, tools[name], r)
	return r, structured(t, r)
}

// failCall calls a tool that must fail with code, and returns the error's details.
func failCall(t *testing.T, cn *conn, name string, args map[string]any, code string) map[string]any {
	t.Helper()
	r := cn.call(t, name, args)
	if got := errorCode(t, r); got != code {
		t.Fatalf("%s %v: code %q (%s), want %s", name, args, got, text(r), code)
	}
	return errorDetails(t, r)
}

// secretBeside makes a directory beside the root with a secret in it, and a symbolic link
// to it inside the root, named esc.
func secretBeside(t *testing.T, root string) {
	t.Helper()
	outside := filepath.Join(filepath.Dir(root), "outside")
	write(t, outside, "secret", "SECRET")
	if err := os.Symlink(outside, filepath.Join(root, "esc")); err != nil {
		t.Fatal(err)
	}
}

func TestHeadAndTail(t *testing.T) {
	e, cn, tools := composedEnv(t, "--max-response-bytes", "65536")
	write(t, e.root, "lines.txt", "one\ntwo\nthree\nfour\nfive\n")
	write(t, e.root, "nolf.txt", "a\nb\nc")
	write(t, e.root, "empty.txt", "")
	os.Mkdir(filepath.Join(e.root, "dir"), 0o700)

	for _, c := range []struct {
		tool, path       string
		lines            int
		content          string
		offset           float64
		eof              bool
		maxBytes         int
		truncated        bool
		textAfterContent string
	}{
		{tool: "fs_head", path: "lines.txt", lines: 2, content: "one\ntwo\n", offset: 8},
		{tool: "fs_head", path: "lines.txt", lines: 5, content: "one\ntwo\nthree\nfour\nfive\n", offset: 24, eof: true},
		{tool: "fs_head", path: "lines.txt", lines: 9, content: "one\ntwo\nthree\nfour\nfive\n", offset: 24, eof: true},
		{tool: "fs_head", path: "nolf.txt", lines: 2, content: "a\nb\n", offset: 4},
		{tool: "fs_head", path: "nolf.txt", lines: 3, content: "a\nb\nc", offset: 5, eof: true},
		{tool: "fs_head", path: "empty.txt", lines: 1, content: "", offset: 0, eof: true},
		{tool: "fs_head", path: "lines.txt", lines: 5, maxBytes: 10, content: "one\ntwo\nth", offset: 10, truncated: true,
			textAfterContent: "\n(truncated: the 5 lines asked for do not fit in maxBytes; fs_read at offset 10 reads on)\n"},
		{tool: "fs_tail", path: "lines.txt", lines: 2, content: "four\nfive\n", offset: 14, eof: true},
		{tool: "fs_tail", path: "lines.txt", lines: 9, content: "one\ntwo\nthree\nfour\nfive\n", offset: 0, eof: true},
		{tool: "fs_tail", path: "nolf.txt", lines: 1, content: "c", offset: 4, eof: true},
		{tool: "fs_tail", path: "nolf.txt", lines: 2, content: "b\nc", offset: 2, eof: true},
		{tool: "fs_tail", path: "empty.txt", lines: 3, content: "", offset: 0, eof: true},
		{tool: "fs_tail", path: "lines.txt", lines: 3, maxBytes: 12, content: "four\nfive\n", offset: 14, eof: true, truncated: true,
			textAfterContent: "(truncated: the 3 lines asked for do not fit in maxBytes; these are the last 2 lines, from offset 14)\n"},
	} {
		args := map[string]any{"path": c.path, "lines": c.lines}
		if c.maxBytes > 0 {
			args["maxBytes"] = c.maxBytes
		}
		r, s := okCall(t, cn, tools, c.tool, args)
		want := map[string]any{"content": c.content, "lines": float64(strings.Count(c.content, "\n") + boolInt(c.content != "" && !strings.HasSuffix(c.content, "\n"))),
			"offset": c.offset, "eof": c.eof, "truncated": c.truncated}
		if fmt.Sprint(s) != fmt.Sprint(want) {
			t.Errorf("%s %v:\n got %v\nwant %v", c.tool, args, s, want)
		}
		if got := text(r); got != c.content+c.textAfterContent {
			t.Errorf("%s %v: text %q", c.tool, args, got)
		}
	}

	// fs_tail uses all of maxBytes: a file of maxBytes bytes is read whole, and a window
	// beginning inside a character begins at the next one, within maxBytes. It held 3 bytes
	// back for a step back to the character's start, even where none was needed: the file of
	// 24 bytes under maxBytes 24 came back without its first line, and "ab€\n" under 8 as
	// "b€\n"; the fs_tail maxBytes least was 8 for that step back, and is 4.
	write(t, e.root, "euro.txt", "ab€\n")
	write(t, e.root, "euros.txt", "€€€\n€€€\n€€€\n")
	for _, c := range []struct {
		path            string
		lines, maxBytes int
		content         string
		offset          float64
		truncated       bool
	}{
		{"lines.txt", 9, 24, "one\ntwo\nthree\nfour\nfive\n", 0, false},
		{"euro.txt", 1, 6, "ab€\n", 0, false},
		{"euro.txt", 3, 8, "ab€\n", 0, false},
		{"euros.txt", 2, 12, "€€€\n", 20, true}, // the window [18, 30) begins inside a €: at 19 then
		{"euros.txt", 3, 29, "€€€\n€€€\n", 10, true},
		{"euros.txt", 3, 30, "€€€\n€€€\n€€€\n", 0, false},
	} {
		args := map[string]any{"path": c.path, "lines": c.lines, "maxBytes": c.maxBytes}
		_, s := okCall(t, cn, tools, "fs_tail", args)
		if s["content"] != c.content || s["offset"] != c.offset || s["truncated"] != c.truncated || s["eof"] != true {
			t.Errorf("fs_tail %v: %v, want content %q from offset %v, truncated %v", args, s, c.content, c.offset, c.truncated)
		}
	}

	// A long file of 3-byte characters, whose 16 KiB windows counted back from the end begin
	// inside a character: fs_tail steps back to the character's start, and reads several
	// windows of growing size.
	var lines []string
	for i := range 3000 {
		lines = append(lines, fmt.Sprintf("L%d €€€\n", i))
	}
	// The last line grows until the byte 16 KiB before the end is inside a character.
	for pad := ""; ; pad += "x" {
		lines[2999] = "L2999 €€€" + pad + "\n"
		if all := strings.Join(lines, ""); all[len(all)-16384]&0xC0 == 0x80 {
			break
		}
	}
	body := strings.Join(lines, "")
	write(t, e.root, "wide.txt", body)
	_, s := okCall(t, cn, tools, "fs_tail", map[string]any{"path": "wide.txt", "lines": 2500})
	if want := strings.Join(lines[500:], ""); s["content"] != want || s["lines"] != 2500.0 || s["offset"] != float64(len(body)-len(want)) {
		t.Fatalf("fs_tail of wide.txt: %d bytes, lines %v, offset %v", len(s["content"].(string)), s["lines"], s["offset"])
	}
	_, s = okCall(t, cn, tools, "fs_head", map[string]any{"path": "wide.txt", "lines": 2999})
	if want := strings.Join(lines[:2999], ""); s["content"] != want || s["eof"] != false {
		t.Fatalf("fs_head of wide.txt: %d bytes, eof %v", len(s["content"].(string)), s["eof"])
	}

	// Failures: the adapter's for a directory, the daemon's for a path out of the root, the
	// bridge's own for its arguments.
	failCall(t, cn, "fs_tail", map[string]any{"path": "dir", "lines": 1}, "not_a_file")
	failCall(t, cn, "fs_head", map[string]any{"path": "dir", "lines": 1}, "not_a_file")
	failCall(t, cn, "fs_head", map[string]any{"path": "../lines.txt", "lines": 1}, "invalid_tool_adapter_path")
	failCall(t, cn, "fs_tail", map[string]any{"path": "missing.txt", "lines": 1}, "adapter_path_unavailable")
	if d := failCall(t, cn, "fs_head", map[string]any{"path": "lines.txt", "lines": 0}, "adapter_request_invalid"); d["field"] != "lines" {
		t.Errorf("lines 0: details %v", d)
	}
	if d := failCall(t, cn, "fs_head", map[string]any{"path": "lines.txt"}, "adapter_request_invalid"); d["field"] != "lines" {
		t.Errorf("no lines: details %v", d)
	}
	if d := failCall(t, cn, "fs_tail", map[string]any{"path": "lines.txt", "lines": 1, "from": 2}, "adapter_request_invalid"); d["field"] != "from" {
		t.Errorf("unknown argument: details %v", d)
	}
	if d := failCall(t, cn, "fs_tail", map[string]any{"path": "lines.txt", "lines": "3"}, "adapter_request_invalid"); d["field"] != "lines" {
		t.Errorf("a string: details %v", d)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestReadMany reads several files in one call: each file's outcome is its own, the content
// is bounded by maxBytes (shared, then what is left goes to the files in order), and a path
// out of the root is refused for that file alone.
func TestReadMany(t *testing.T) {
	e, cn, tools := composedEnv(t, "--max-response-bytes", "4096")
	secretBeside(t, e.root)
	write(t, e.root, "a.txt", "alpha\n")
	write(t, e.root, "b.txt", "beta")
	write(t, e.root, "big.txt", strings.Repeat("0123456789", 500))
	os.Mkdir(filepath.Join(e.root, "sub"), 0o700)

	r, s := okCall(t, cn, tools, "fs_read_many", map[string]any{"paths": []string{"a.txt", "missing.txt", "sub", "b.txt", "../outside/secret", "esc/secret"}})
	files := s["files"].([]any)
	codes := []string{}
	for _, f := range files {
		f := f.(map[string]any)
		if e, ok := f["error"].(map[string]any); ok {
			codes = append(codes, e["code"].(string))
		} else {
			codes = append(codes, fmt.Sprintf("%q %v", f["content"], f["eof"]))
		}
	}
	want := []string{`"alpha\n" true`, "adapter_path_unavailable", "not_a_file", `"beta" true`, "invalid_tool_adapter_path", "adapter_path_symlink"}
	if !slices.Equal(codes, want) || s["truncated"] != false || strings.Contains(text(r), "SECRET") {
		t.Fatalf("fs_read_many: %q (truncated %v), want %q\n%s", codes, s["truncated"], want, text(r))
	}
	if got := text(r); !strings.HasPrefix(got, "==> a.txt <==\nalpha\n==> missing.txt <== error adapter_path_unavailable: ") ||
		!strings.Contains(got, "\n==> b.txt <==\nbeta\n==> ../outside/secret <== error invalid_tool_adapter_path: ") {
		t.Fatalf("fs_read_many text:\n%s", got)
	}

	// The grant's responses hold 4096 bytes, so a call returns at most 3072 bytes of content:
	// both files get 1536 in the first round, then big.txt what a.txt left.
	r, s = okCall(t, cn, tools, "fs_read_many", map[string]any{"paths": []string{"big.txt", "a.txt"}})
	big := s["files"].([]any)[0].(map[string]any)
	if big["bytesRead"] != 3066.0 || big["eof"] != false || big["content"] != strings.Repeat("0123456789", 500)[:3066] || s["truncated"] != true {
		t.Fatalf("big.txt: %v bytes, eof %v, truncated %v", big["bytesRead"], big["eof"], s["truncated"])
	}
	if !strings.HasPrefix(text(r), "==> big.txt <== (the first 3066 bytes: read on with fs_read at offset 3066)\n0123") {
		t.Fatalf("text: %.120s", text(r))
	}
	// Too little for a share each: the files are read in order until maxBytes is spent.
	r, s = okCall(t, cn, tools, "fs_read_many", map[string]any{"paths": []string{"a.txt", "b.txt"}, "maxBytes": 3})
	if got := text(r); got != "==> a.txt <== (the first 3 bytes: read on with fs_read at offset 3)\nalp\n==> b.txt <== (not read: maxBytes was spent on the files before it)\n" || s["truncated"] != true {
		t.Fatalf("maxBytes 3: %q", got)
	}
	// Too little for the first character of the first file: it is not read, and nothing was
	// spent on files before it, which its line said.
	write(t, e.root, "euro.txt", "€uro\n")
	r, s = okCall(t, cn, tools, "fs_read_many", map[string]any{"paths": []string{"euro.txt", "a.txt"}, "maxBytes": 2})
	if got := text(r); got != "==> euro.txt <== (not read: the 2 bytes left of maxBytes are fewer than its first character)\n"+
		"==> a.txt <== (the first 2 bytes: read on with fs_read at offset 2)\nal\n" || s["truncated"] != true {
		t.Fatalf("maxBytes 2: %q", got)
	}

	many := make([]string, 65)
	for i := range many {
		many[i] = "a.txt"
	}
	if d := failCall(t, cn, "fs_read_many", map[string]any{"paths": many}, "adapter_request_invalid"); d["field"] != "paths" {
		t.Errorf("65 paths: %v", d)
	}
	if d := failCall(t, cn, "fs_read_many", map[string]any{"paths": []string{"a.txt"}, "maxBytes": 3073}, "adapter_request_invalid"); d["field"] != "maxBytes" {
		t.Errorf("maxBytes over the grant's: %v", d)
	}
}

// tree is the directory TestTree and TestFind walk.
func tree(t *testing.T, root string) {
	for _, f := range []string{"a.txt", "dir/b.txt", "dir/deep/c.txt", "dir/deep/d.go", "e.go", "node_modules/x.js", "z.md"} {
		write(t, root, f, f+"\n")
	}
	secretBeside(t, root)
}

func TestTree(t *testing.T) {
	e, cn, tools := composedEnv(t)
	tree(t, e.root)
	all := "a.txt\ndir/\ndir/b.txt\ndir/deep/\ndir/deep/c.txt\ndir/deep/d.go\ne.go\nnode_modules/\nnode_modules/x.js\nz.md\n"
	for _, c := range []struct {
		args map[string]any
		text string
	}{
		// esc, a symbolic link out of the root, is not an entry: fs.list omits links.
		{map[string]any{"path": "."}, all},
		{map[string]any{"path": ".", "maxEntries": 10}, all},
		{map[string]any{"path": "dir"}, "dir/b.txt\ndir/deep/\ndir/deep/c.txt\ndir/deep/d.go\n"},
		{map[string]any{"path": ".", "exclude": []string{"node_modules", "*.go", "dir/deep"}}, "a.txt\ndir/\ndir/b.txt\nz.md\n"},
		{map[string]any{"path": ".", "maxDepth": 1}, "a.txt\ndir/ (not listed: maxDepth)\ne.go\nnode_modules/ (not listed: maxDepth)\nz.md\n"},
		// Breadth first: a bound keeps the top of the tree.
		{map[string]any{"path": ".", "maxEntries": 5}, "a.txt\ndir/\ne.go\nnode_modules/\nz.md\n" +
			"(truncated: there are more entries; raise maxEntries, lower maxDepth, exclude some, or list a subdirectory)\n"},
		{map[string]any{"path": ".", "maxEntries": 7}, "a.txt\ndir/\ndir/b.txt\ndir/deep/\ne.go\nnode_modules/\nz.md\n" +
			"(truncated: there are more entries; raise maxEntries, lower maxDepth, exclude some, or list a subdirectory)\n"},
		{map[string]any{"path": "dir/deep/c.txt/.."}, ""},
	} {
		if c.text == "" {
			failCall(t, cn, "fs_tree", c.args, "invalid_tool_adapter_path")
			continue
		}
		r, s := okCall(t, cn, tools, "fs_tree", c.args)
		if got := text(r); got != c.text {
			t.Errorf("fs_tree %v:\n%s\nwant:\n%s", c.args, got, c.text)
		}
		if s["truncated"] != strings.Contains(c.text, "(truncated") {
			t.Errorf("fs_tree %v: truncated %v", c.args, s["truncated"])
		}
	}
	_, s := okCall(t, cn, tools, "fs_tree", map[string]any{"path": "dir", "maxDepth": 1})
	if en := s["entries"].([]any); len(en) != 2 || en[1].(map[string]any)["notListed"] != true || en[0].(map[string]any)["size"] != 10.0 {
		t.Fatalf("entries: %v", en)
	}

	failCall(t, cn, "fs_tree", map[string]any{"path": "esc"}, "adapter_path_symlink")
	failCall(t, cn, "fs_tree", map[string]any{"path": "../outside"}, "invalid_tool_adapter_path")
	failCall(t, cn, "fs_tree", map[string]any{"path": ".", "exclude": []string{"[x"}}, "adapter_request_invalid")
	failCall(t, cn, "fs_tree", map[string]any{"path": ".", "pattern": "*"}, "adapter_request_invalid")

	// A walk reports its progress when asked to.
	params := &sdk.CallToolParams{Name: "fs_tree", Arguments: map[string]any{"path": "."}}
	params.SetProgressToken("tree-1")
	if r, err := cn.cs.CallTool(context.Background(), params); err != nil || r.IsError {
		t.Fatalf("fs_tree with progress: %v %v", err, r)
	}
	waitFor(t, "the walk's progress", func() bool {
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return slices.ContainsFunc(cn.prog, func(p *sdk.ProgressNotificationParams) bool {
			return p.ProgressToken == "tree-1" && strings.HasSuffix(p.Message, " entries")
		})
	})
}

func TestFind(t *testing.T) {
	e, cn, tools := composedEnv(t)
	tree(t, e.root)
	for _, c := range []struct {
		args map[string]any
		text string
	}{
		{map[string]any{"path": ".", "pattern": "**/*.go"}, "dir/deep/d.go\ne.go\n"},
		{map[string]any{"path": ".", "pattern": "*.go"}, "e.go\n"},
		{map[string]any{"path": ".", "pattern": "dir/**"}, "dir/b.txt\ndir/deep/\ndir/deep/c.txt\ndir/deep/d.go\n"},
		{map[string]any{"path": ".", "pattern": "{dir,node_modules}/*"}, "dir/b.txt\ndir/deep/\nnode_modules/x.js\n"},
		{map[string]any{"path": ".", "pattern": "**/*.go", "exclude": []string{"deep"}}, "e.go\n"},
		{map[string]any{"path": "dir", "pattern": "*/*.txt"}, "dir/deep/c.txt\n"},
		{map[string]any{"path": "dir", "pattern": "./deep/./*.go"}, "dir/deep/d.go\n"},
		{map[string]any{"path": ".", "pattern": "**/d*"}, "dir/\ndir/deep/\ndir/deep/d.go\n"},
		{map[string]any{"path": ".", "pattern": "*.rs"}, "(no matches)\n"},
		// The link is not followed: the secret beyond it is not found.
		{map[string]any{"path": ".", "pattern": "**/secret"}, "(no matches)\n"},
		{map[string]any{"path": ".", "pattern": "**", "maxResults": 10}, "a.txt\ndir/\ndir/b.txt\ndir/deep/\ndir/deep/c.txt\ndir/deep/d.go\ne.go\nnode_modules/\nnode_modules/x.js\nz.md\n"},
		{map[string]any{"path": ".", "pattern": "**", "maxResults": 9}, "a.txt\ndir/\ndir/b.txt\ndir/deep/\ndir/deep/c.txt\ne.go\nnode_modules/\nnode_modules/x.js\nz.md\n" +
			"(truncated: there may be more matches; raise maxResults, narrow the path or pattern, or exclude some directories)\n"},
	} {
		r, s := okCall(t, cn, tools, "fs_find", c.args)
		if got := text(r); got != c.text {
			t.Errorf("fs_find %v:\n%s\nwant:\n%s", c.args, got, c.text)
		}
		if s["truncated"] != strings.Contains(c.text, "(truncated") {
			t.Errorf("fs_find %v: truncated %v", c.args, s["truncated"])
		}
	}

	// A pattern that would leave the root: its literal start is a path the daemon refuses
	// (lexically, or walking into the link); after a wildcard, ".." is refused by the bridge.
	for pattern, code := range map[string]string{
		"../outside/*":   "invalid_tool_adapter_path",
		"/etc/*":         "invalid_tool_adapter_path",
		"dir/../../*":    "invalid_tool_adapter_path",
		"esc/*":          "adapter_path_symlink",
		"esc/**/secret":  "adapter_path_symlink",
		"*/../../secret": "adapter_request_invalid",
		"[abc":           "adapter_request_invalid",
	} {
		r := cn.call(t, "fs_find", map[string]any{"path": ".", "pattern": pattern})
		if got := errorCode(t, r); got != code || strings.Contains(text(r), "SECRET") {
			t.Errorf("fs_find %s: %s %q, want %s", pattern, got, text(r), code)
		}
	}
	failCall(t, cn, "fs_find", map[string]any{"path": "dir/.."}, "adapter_request_invalid")
}

func TestListSorted(t *testing.T) {
	e, cn, tools := composedEnv(t)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, f := range []struct {
		name string
		size int
	}{{"small.txt", 1}, {"big.txt", 100}, {"mid.txt", 10}, {"dir", -1}} {
		p := filepath.Join(e.root, f.name)
		if f.size < 0 {
			os.Mkdir(p, 0o700)
		} else {
			write(t, e.root, f.name, strings.Repeat("x", f.size))
		}
		// small.txt newest, dir oldest; mid.txt half a second after big.txt.
		at := base.Add(-time.Duration(i) * time.Hour)
		if f.name == "mid.txt" {
			at = base.Add(-time.Hour + 500*time.Millisecond)
		}
		os.Chtimes(p, at, at)
	}
	line := map[string]string{
		"big.txt":   "file 100 2026-01-02T02:04:05Z big.txt\n",
		"dir":       "directory 0 2026-01-02T00:04:05Z dir/\n",
		"mid.txt":   "file 10 2026-01-02T02:04:05Z mid.txt\n", // to the second; sorted by the exact time
		"small.txt": "file 1 2026-01-02T03:04:05Z small.txt\n",
	}
	lines := func(names ...string) string {
		var b strings.Builder
		for _, n := range names {
			b.WriteString(line[n])
		}
		return b.String()
	}
	const totals = "3 files (111 bytes), 1 directories\n"
	for _, c := range []struct {
		args map[string]any
		text string
	}{
		{map[string]any{"path": ".", "sortBy": "name"}, lines("big.txt", "dir", "mid.txt", "small.txt") + totals},
		{map[string]any{"path": ".", "sortBy": "size"}, lines("big.txt", "mid.txt", "small.txt", "dir") + totals},
		{map[string]any{"path": ".", "sortBy": "modified"}, lines("small.txt", "mid.txt", "big.txt", "dir") + totals},
		{map[string]any{"path": ".", "sortBy": "size", "maxEntries": 2}, lines("big.txt", "mid.txt") + totals +
			"(truncated: the first 2 of 4 entries; raise maxEntries)\n"},
	} {
		r, s := okCall(t, cn, tools, "fs_list_sorted", c.args)
		if got := text(r); got != c.text {
			t.Errorf("fs_list_sorted %v:\n%s\nwant:\n%s", c.args, got, c.text)
		}
		if s["truncated"] != strings.Contains(c.text, "(truncated") || s["files"] != 3.0 || s["directories"] != 1.0 || s["bytes"] != 111.0 {
			t.Errorf("fs_list_sorted %v: %v", c.args, s)
		}
	}
	if d := failCall(t, cn, "fs_list_sorted", map[string]any{"path": ".", "sortBy": "date"}, "adapter_request_invalid"); d["field"] != "sortBy" {
		t.Errorf("sortBy date: %v", d)
	}
	failCall(t, cn, "fs_list_sorted", map[string]any{"path": "..", "sortBy": "name"}, "invalid_tool_adapter_path")
}

// fileState is what a preview must leave unchanged: the bytes, the inode, the change and
// modification times, and the directory's names (no temporary file either).
func fileState(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(filepath.Dir(p))
	var ns []string
	for _, n := range names {
		ns = append(ns, n.Name())
	}
	// Not the access time, which a read may change.
	return fmt.Sprintf("%q ino %d mtime %v ctime %v %v", b, st.Ino, st.Mtim, st.Ctim, ns)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestEditPreview: the preview's diff is exactly the change fs_edit then makes; nothing is
// written; each refusal is fs_edit's own, by code.
func TestEditPreview(t *testing.T) {
	e, cn, tools := composedEnv(t)
	const code = "package main\n\nfunc a() int {\n\treturn 1\n}\n\nfunc b() int {\n\treturn 2\n}\n"
	write(t, e.root, "code.go", code)
	file := filepath.Join(e.root, "code.go")
	before := fileState(t, file)

	edits := []map[string]any{
		{"oldText": "return 1", "newText": "return 10"},
		{"oldText": "func b() int {\n\treturn 2\n}\n", "newText": "func b() int {\n\treturn 20\n}\n\nfunc c() {}\n"},
	}
	r, s := okCall(t, cn, tools, "fs_edit_preview", map[string]any{"path": "code.go", "edits": edits})
	const diff = "--- a/code.go\n+++ b/code.go\n" +
		"@@ -1,9 +1,11 @@\n package main\n \n func a() int {\n-\treturn 1\n+\treturn 10\n }\n \n func b() int {\n-\treturn 2\n+\treturn 20\n }\n+\n+func c() {}\n"
	if s["diff"] != diff || s["digest"] != sha(code) || s["replacements"] != 2.0 || s["truncated"] != false {
		t.Fatalf("preview: %v\n%s", s, s["diff"])
	}
	if got := text(r); got != diff+"(dry run: nothing was written; 2 replacements; fs_edit with expectedDigest "+sha(code)+" applies exactly this)\n" {
		t.Fatalf("preview text:\n%s", got)
	}
	if fileState(t, file) != before {
		t.Fatal("the preview changed the file or its directory")
	}

	// Refusals, each the same code as fs_edit's with the same arguments; nothing written.
	for _, c := range []struct {
		args map[string]any
		code string
	}{
		{map[string]any{"path": "code.go", "edits": []map[string]any{{"oldText": "return 1", "newText": "x"}, {"oldText": "return 3", "newText": "y"}}}, "edit_not_found"},
		{map[string]any{"path": "code.go", "edits": []map[string]any{{"oldText": "int {", "newText": "x"}}}, "edit_ambiguous"},
		// The first edit makes the second's oldText occur twice.
		{map[string]any{"path": "code.go", "edits": []map[string]any{{"oldText": "return 1", "newText": "return 2"}, {"oldText": "return 2", "newText": "z"}}}, "edit_ambiguous"},
		{map[string]any{"path": "code.go", "edits": edits, "expectedDigest": sha("other")}, "digest_mismatch"},
		{map[string]any{"path": "code.go", "edits": []map[string]any{{"oldText": "", "newText": "x"}}}, "adapter_request_invalid"},
		{map[string]any{"path": "code.go", "edits": []map[string]any{}}, "adapter_request_invalid"},
		{map[string]any{"path": "code.go", "edits": edits, "dryRun": true}, "adapter_request_invalid"},
		{map[string]any{"path": "../code.go", "edits": edits}, "invalid_tool_adapter_path"},
		{map[string]any{"path": "missing.go", "edits": edits}, "adapter_path_unavailable"},
		{map[string]any{"path": ".", "edits": edits}, "not_a_file"},
	} {
		p := failCall(t, cn, "fs_edit_preview", c.args, c.code)
		if fe := errorCode(t, cn.call(t, "fs_edit", c.args)); fe != c.code {
			t.Errorf("%v: fs_edit answers %s, the preview %s", c.args, fe, c.code)
		}
		if c.code == "edit_not_found" && p["edit"] != 1.0 {
			t.Errorf("edit_not_found details %v", p)
		}
		if fileState(t, file) != before {
			t.Fatalf("%v changed the file", c.args)
		}
	}

	// An edit that changes nothing previews as no change.
	r, s = okCall(t, cn, tools, "fs_edit_preview", map[string]any{"path": "code.go", "edits": []map[string]any{{"oldText": "return 1", "newText": "return 1"}}})
	if s["diff"] != "" || !strings.HasPrefix(text(r), "(no change: the edits leave the file as it is)\n(dry run") {
		t.Fatalf("no change: %v %q", s, text(r))
	}

	// fs_edit with the preview's digest makes exactly the change shown.
	_, p := okCall(t, cn, tools, "fs_edit_preview", map[string]any{"path": "code.go", "edits": edits})
	_, ed := okCall(t, cn, tools, "fs_edit", map[string]any{"path": "code.go", "edits": edits, "expectedDigest": p["digest"]})
	after, _ := os.ReadFile(file)
	if ed["digest"] != p["newDigest"] || sha(string(after)) != p["newDigest"] {
		t.Fatalf("fs_edit digest %v, preview's newDigest %v, file %s", ed["digest"], p["newDigest"], sha(string(after)))
	}
}

// TestEditPreviewBounds: a diff longer than the grant's response keeps its first hunks and
// says so; a file larger than one read is read whole.
func TestEditPreviewBounds(t *testing.T) {
	e, cn, tools := composedEnv(t, "--max-response-bytes", "4096")
	var sb strings.Builder
	for i := range 400 {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	code := sb.String() // 3,490 bytes: two reads of at most 3,072
	write(t, e.root, "long.txt", code)
	r, s := okCall(t, cn, tools, "fs_edit_preview", map[string]any{"path": "long.txt", "edits": []map[string]any{
		{"oldText": "line 1\n", "newText": "line one\n"},
		{"oldText": "line 300\n", "newText": strings.Repeat("much longer\n", 300)},
	}})
	d := s["diff"].(string)
	if s["truncated"] != true || strings.Count(d, "@@ -") != 1 || !strings.Contains(d, "+line one\n") || s["digest"] != sha(code) ||
		!strings.Contains(text(r), "(truncated: the diff is longer than one response; these are its first hunks)\n") {
		t.Fatalf("truncated diff (%v):\n%s", s["truncated"], text(r))
	}
}

// TestComposedCancelAbortsItsCalls cancels an fs_read_many whose reads a scripted adapter
// holds: each read in flight is aborted in the adapter (as a plain fs call is), and none is
// sent after.
func TestComposedCancelAbortsItsCalls(t *testing.T) {
	e := startEnv(t)
	a := startScripted(t)
	e.open(t, "agent", e.root, scriptedDescriptor(a.socket, e.host, "agent", "fs.read"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	for _, f := range []string{"a", "b", "c"} {
		write(t, e.root, f, f) // the daemon walks the paths before it sends them
	}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cn.cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_read_many", Arguments: map[string]any{"paths": []string{"a", "b", "c"}}})
		errc <- err
	}()
	waitFor(t, "three reads at once", func() bool { return len(a.framesOf("invoke")) == 3 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	waitFor(t, "three aborts", func() bool { return len(a.framesOf("abort")) == 3 })
	var invoked, aborted []string
	for _, f := range a.framesOf("invoke") {
		invoked = append(invoked, f["requestId"].(string))
	}
	for _, f := range a.framesOf("abort") {
		aborted = append(aborted, f["targetRequestId"].(string))
	}
	slices.Sort(invoked)
	slices.Sort(aborted)
	if !slices.Equal(invoked, aborted) {
		t.Fatalf("aborts target %v, the reads were %v", aborted, invoked)
	}
	a.unblock()
	// The session still answers, and the cancelled call sent nothing more.
	if r := cn.call(t, "fs_read", map[string]any{"path": "a"}); r.IsError {
		t.Fatalf("a read after the cancel: %s", text(r))
	}
	if n := len(a.framesOf("invoke")); n != 4 {
		t.Fatalf("%d invokes, want the 3 cancelled and 1 after", n)
	}
}

// TestWalkOfAnOverfullDirectory: a directory with more entries than one fs.list holds (here
// the grant's 64 KiB response frame) is looked at only as far as its listing goes. fs_find
// and fs_tree then say so, and that no argument of theirs reaches the rest, where their text
// said to raise maxResults (or maxEntries) or narrow the pattern, which a model did in vain.
// A walk that a bound of the tool cut still says to raise it.
func TestWalkOfAnOverfullDirectory(t *testing.T) {
	e, cn, tools := composedEnv(t, "--max-response-bytes", "65536")
	for i := range 1500 {
		write(t, e.root, fmt.Sprintf("big/f%04d", i), "")
	}
	overfull := regexp.MustCompile(`\(truncated: big/ has more entries than one listing holds: only its first \d+ by name were looked at, and no argument of this tool reaches the others\)\n$`)
	for _, c := range []struct {
		tool string
		args map[string]any
		full bool // the text says the listing held too few, not to raise a bound
	}{
		{"fs_find", map[string]any{"path": ".", "pattern": "big/f14*"}, true},
		{"fs_find", map[string]any{"path": ".", "pattern": "**/f14*"}, true},
		{"fs_tree", map[string]any{"path": "big", "maxEntries": 10000}, true},
		{"fs_find", map[string]any{"path": "big", "pattern": "f0*", "maxResults": 3}, false},
		{"fs_tree", map[string]any{"path": "big", "maxEntries": 5}, false},
	} {
		r, s := okCall(t, cn, tools, c.tool, c.args)
		got := text(r)
		if s["truncated"] != true || overfull.MatchString(got) != c.full || !c.full && !strings.Contains(got, "raise max") {
			t.Errorf("%s %v: truncated %v, text ends %q", c.tool, c.args, s["truncated"], got[max(0, len(got)-200):])
		}
	}
}
