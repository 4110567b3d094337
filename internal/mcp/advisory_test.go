package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/mcp"
)

// The two 2025 advisories of the reference MCP filesystem server
// (@modelcontextprotocol/server-filesystem, fixed in 2025.7.1):
//
//   - CVE-2025-53110, directory containment bypass: the allowed-directory check was a bare
//     string prefix, so with /x/allowed allowed, /x/allowed_evil/... passed.
//   - CVE-2025-53109, symlink bypass: a symbolic link inside an allowed directory that points
//     anywhere passed, because a failed realpath check fell back to validating the link's
//     lexical parent, and the file operation then followed the link.
//
// advisoryLayout is the tree both servers get: the grant root (the reference server's allowed
// directory) "allowed", a sibling "allowed_evil" whose name has the root's name as a prefix,
// and "outside", reached from the root only by symbolic links.
type advisoryLayout struct {
	parent, root, evil, outside string
}

// Secrets no refused call may return.
const (
	evilSecret    = "SIBLING-SECRET"
	outsideSecret = "OUTSIDE-SECRET"
)

func makeAdvisoryLayout(t testing.TB, parent string) *advisoryLayout {
	t.Helper()
	l := &advisoryLayout{parent: parent, root: filepath.Join(parent, "allowed"),
		evil: filepath.Join(parent, "allowed_evil"), outside: filepath.Join(parent, "outside")}
	for _, d := range []string{l.root, l.evil, l.outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct{ path, text string }{
		{filepath.Join(l.root, "inside.txt"), "inside\n"},
		{filepath.Join(l.evil, "secret"), evilSecret + "\n"},
		{filepath.Join(l.outside, "secret"), outsideSecret + "\n"},
	} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"link_secret": filepath.Join(l.outside, "secret"),
		"link_dir":    l.outside,
		"link_new":    filepath.Join(l.outside, "created.txt"), // dangling: its target does not exist
	} {
		if err := os.Symlink(target, filepath.Join(l.root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// advisoryCase is one attack, sent to airlock as an fs tool call and to the reference server as
// the matching tool with the same path made absolute beneath its allowed directory.
type advisoryCase struct {
	advisory, name string
	op             string // read, list or write
	path           string // as the agent writes it, relative to the root unless absolute
	// created is a file outside the root that the call must not create.
	created func(l *advisoryLayout) string
}

var advisoryCases = []advisoryCase{
	{advisory: "CVE-2025-53110", name: "read a sibling-prefix file by absolute path", op: "read", path: "{evil}/secret"},
	{advisory: "CVE-2025-53110", name: "read a sibling-prefix file through ..", op: "read", path: "../allowed_evil/secret"},
	{advisory: "CVE-2025-53110", name: "list a sibling-prefix directory", op: "list", path: "{evil}"},
	{advisory: "CVE-2025-53110", name: "write into a sibling-prefix directory", op: "write", path: "{evil}/pwned.txt",
		created: func(l *advisoryLayout) string { return filepath.Join(l.evil, "pwned.txt") }},
	{advisory: "CVE-2025-53109", name: "read a symlink to a file outside", op: "read", path: "link_secret"},
	{advisory: "CVE-2025-53109", name: "read through a symlink to a directory outside", op: "read", path: "link_dir/secret"},
	{advisory: "CVE-2025-53109", name: "list through a symlink to a directory outside", op: "list", path: "link_dir"},
	{advisory: "CVE-2025-53109", name: "write through a dangling symlink", op: "write", path: "link_new",
		created: func(l *advisoryLayout) string { return filepath.Join(l.outside, "created.txt") }},
	{advisory: "CVE-2025-53109", name: "write through a symlink to a directory outside", op: "write", path: "link_dir/pwned.txt",
		created: func(l *advisoryLayout) string { return filepath.Join(l.outside, "pwned.txt") }},
}

// airlockCall and referenceCall are the tool calls of c for each server.
func (c advisoryCase) airlockCall(l *advisoryLayout) *sdk.CallToolParams {
	p := strings.ReplaceAll(c.path, "{evil}", l.evil)
	switch c.op {
	case "read":
		return &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": p}}
	case "list":
		return &sdk.CallToolParams{Name: "fs_list", Arguments: map[string]any{"path": p}}
	}
	return &sdk.CallToolParams{Name: "fs_write", Arguments: map[string]any{"path": p, "content": "pwned\n", "create": true}}
}

func (c advisoryCase) referenceCall(l *advisoryLayout) *sdk.CallToolParams {
	p := strings.ReplaceAll(c.path, "{evil}", l.evil)
	if !filepath.IsAbs(p) {
		p = filepath.Join(l.root, p) // Join cleans "..": the form the prefix check saw
	}
	switch c.op {
	case "read":
		return &sdk.CallToolParams{Name: "read_text_file", Arguments: map[string]any{"path": p}}
	case "list":
		return &sdk.CallToolParams{Name: "list_directory", Arguments: map[string]any{"path": p}}
	}
	return &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": p, "content": "pwned\n"}}
}

// advisoryOutcome is what one server did with one case.
type advisoryOutcome struct {
	refused bool
	detail  string // the error's first line, or what leaked
}

// runAdvisory sends c through cs and judges it: refused means an error (a tool error result or
// a protocol error), no secret in anything returned, and no file created outside the root.
func runAdvisory(cs *sdk.ClientSession, l *advisoryLayout, c advisoryCase, params *sdk.CallToolParams) advisoryOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cs.CallTool(ctx, params)
	var out advisoryOutcome
	var body string
	switch {
	case err != nil:
		out, body = advisoryOutcome{refused: true, detail: "protocol error: " + err.Error()}, err.Error()
	default:
		b, _ := json.Marshal(r)
		body = string(b)
		msg := ""
		for _, ct := range r.Content {
			if tc, ok := ct.(*sdk.TextContent); ok {
				msg = tc.Text
				break
			}
		}
		msg, _, _ = strings.Cut(msg, "\n")
		out = advisoryOutcome{refused: r.IsError, detail: msg}
		if !r.IsError {
			out.detail = "ANSWERED: " + msg
		}
	}
	for _, s := range []string{evilSecret, outsideSecret} {
		if strings.Contains(body, s) {
			out = advisoryOutcome{detail: "LEAKED " + s + ": " + out.detail}
		}
	}
	if c.created != nil {
		if _, err := os.Lstat(c.created(l)); err == nil {
			out = advisoryOutcome{detail: "CREATED " + c.created(l) + ": " + out.detail}
			os.Remove(c.created(l))
		}
	}
	if len(out.detail) > 160 {
		out.detail = out.detail[:160] + "…"
	}
	return out
}

// TestFilesystemAdvisories sends both advisories' attacks through airlock's MCP tools over a
// real daemon and airlock-fs: every one is refused, returns no secret and creates nothing.
func TestFilesystemAdvisories(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	l := makeAdvisoryLayout(t, filepath.Dir(e.root))
	e.open(t, "agent", l.root, fsp.grant(t, e.host, l.root, "agent", 1, "fs.read,fs.list,fs.write"))
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1})
	if r := cn.call(t, "fs_read", map[string]any{"path": "inside.txt"}); r.IsError || text(r) != "inside\n" {
		t.Fatalf("the root itself is not readable: %s", text(r))
	}
	for _, c := range advisoryCases {
		got := runAdvisory(cn.cs, l, c, c.airlockCall(l))
		t.Logf("%s %-50s %s", c.advisory, c.name, got.detail)
		if !got.refused || !strings.HasPrefix(got.detail, "airlock: ") {
			t.Errorf("%s %s (%s): %s", c.advisory, c.name, c.path, got.detail)
		}
	}
}
