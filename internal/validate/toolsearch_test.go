package validate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// brokenSearch is the in-test adapter's fs.search: a plain implementation of the points of
// docs/tool-adapters.md "fs.search results" in mode "search", and in each other search-* mode
// the same with one point broken:
//
//	search-query-text        text is the query, not the line
//	search-byte-column       column counts bytes
//	search-every-occurrence  one entry per occurrence, not per line
//	search-unordered         names sorted directory by directory ("a/z.txt" before "a.txt")
//	search-case              case-insensitive
//	search-binary            binary files are searched
//	search-flat              subdirectories are not searched
//	search-crlf              a CR before the LF is dropped from text
//	search-truncated         truncated is true whenever maxResults entries are returned
func brokenSearch(g *toolGrant, mode string, payload json.RawMessage) (any, string) {
	var p struct {
		Path       string `json:"path"`
		Query      string `json:"query"`
		MaxResults int    `json:"maxResults"`
	}
	if json.Unmarshal(payload, &p) != nil || p.Query == "" {
		return nil, "bad payload"
	}
	if p.MaxResults == 0 {
		p.MaxResults = 1000
	}
	st, err := os.Lstat(filepath.Join(g.root, p.Path))
	if err != nil {
		return nil, "not found"
	}
	var files []string
	var walk func(rel string)
	walk = func(rel string) {
		ents, _ := os.ReadDir(filepath.Join(g.root, rel))
		key := func(e os.DirEntry) string {
			if e.IsDir() && mode != "search-unordered" {
				return e.Name() + "/"
			}
			return e.Name()
		}
		slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(key(a), key(b)) })
		for _, e := range ents {
			child := e.Name()
			if rel != "." {
				child = rel + "/" + child
			}
			switch {
			case e.IsDir() && mode != "search-flat":
				walk(child)
			case e.Type().IsRegular():
				files = append(files, child)
			}
		}
	}
	switch {
	case st.Mode().IsRegular():
		files = []string{p.Path}
	case st.IsDir():
		walk(p.Path)
	default:
		return nil, "not searchable"
	}
	matches := []searchMatch{}
	truncated, size, budget := false, 0, int(g.limits.MaxResponseBytes)-1024
	q := p.Query
	index := strings.Index
	if mode == "search-case" {
		index = func(s, sub string) int { return strings.Index(strings.ToLower(s), strings.ToLower(sub)) }
	}
files:
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(g.root, f))
		if err != nil || mode != "search-binary" && (bytes.IndexByte(b[:min(len(b), 8192)], 0) >= 0 || !utf8.Valid(b)) {
			continue
		}
		s, from := string(b), 0
		for {
			i := index(s[from:], q)
			if i < 0 {
				break
			}
			at := from + i
			start := strings.LastIndexByte(s[:at], '\n') + 1
			text, _, _ := strings.Cut(s[start:], "\n")
			if len(text) > 4096 {
				text = text[:4096]
			}
			m := searchMatch{Path: f, Line: int64(strings.Count(s[:at], "\n") + 1), Column: int64(utf8.RuneCountInString(s[start:at]) + 1), Text: text}
			switch mode {
			case "search-query-text":
				if !strings.Contains(q, "\n") { // the daemon's encoder refuses an LF in text
					m.Text = q
				}
			case "search-byte-column":
				m.Column = int64(at - start + 1)
			case "search-crlf":
				m.Text = strings.TrimSuffix(m.Text, "\r")
			}
			enc, _ := json.Marshal(m)
			if len(matches) == p.MaxResults || size+len(enc)+1 > budget {
				truncated = true
				break files
			}
			matches, size = append(matches, m), size+len(enc)+1
			if mode == "search-truncated" && len(matches) == p.MaxResults {
				truncated = true
			}
			nl := strings.IndexByte(s[at:], '\n')
			switch {
			case mode == "search-every-occurrence":
				from = at + len(q)
			case nl < 0:
				continue files
			default:
				from = at + nl + 1
			}
		}
	}
	return map[string]any{"matches": matches, "truncated": truncated}, ""
}

// TestToolAdapterSearchResults runs the harness against the in-test adapter with fs.search
// right, then with each point of "fs.search results" broken in turn: the search_results probe
// passes the first and fails each other with the rule it breaks, and nothing else changes.
// (TestToolAdapterAirlockFS and TestToolAdapterPython show airlock-fs and the Python example
// passing the same probe.)
func TestToolAdapterSearchResults(t *testing.T) {
	run := func(t *testing.T, mode string) Report {
		g := newToolGrant(t, "fs.read", "fs.stat", "fs.list", "fs.search")
		brokenAdapter(t, g, mode)
		return runTool(t, ToolConfig{Descriptor: g.descriptor(t, "broken"), Scratch: g.root, Wait: 2 * time.Second})
	}
	base := run(t, "search")
	if p, ok := base.Probe(ProbeToolSearchResults); !ok || !p.Pass || p.Skipped {
		t.Fatalf("search_results failed a plain search: %+v", p)
	}
	if p, _ := base.Probe(tooladapter.OpSearch); !p.Pass {
		t.Fatalf("fs.search failed a plain search: %+v", p)
	}
	for _, tc := range []struct{ mode, want string }{
		{"search-query-text", "line 2 of a.txt: text is the query, not the whole line"},
		{"search-byte-column", "line 2 of a.txt: column 8 counts bytes; want 5, in code points"},
		{"search-every-occurrence", "line 2 of a.txt gave more than one entry; a line with the query twice gives one entry, at its first occurrence"},
		{"search-unordered", "want paths in byte order (a.txt before a/z.txt), then lines"},
		{"search-case", "line 3 of b.txt holds the query only in other cases, yet gave an entry; the match is case-sensitive"},
		{"search-binary", "bin.dat gave an entry: a file with a NUL in its first 8 KiB is binary"},
		{"search-flat", "no entry for deep/1/2/3/d.txt: a directory is searched to every depth"},
		{"search-crlf", "line 2 of b.txt: text dropped the CR before the LF"},
		{"search-truncated", "answered truncated true with 10 of 10 matches (truncated is true exactly when a match was left out)"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			rep := run(t, tc.mode)
			if rep.Pass {
				t.Fatal("the harness passed a broken fs.search")
			}
			p, _ := rep.Probe(ProbeToolSearchResults)
			if p.Pass || !strings.Contains(p.Detail, tc.want) {
				t.Errorf("search_results: pass %v, detail %q; want a failure naming %q", p.Pass, p.Detail, tc.want)
			}
			for _, b := range base.Probes {
				if p, _ := rep.Probe(b.Name); b.Name != ProbeToolSearchResults && p.Pass != b.Pass {
					t.Errorf("probe %s: pass %v, with a plain search %v: %s", b.Name, p.Pass, b.Pass, p.Detail)
				}
			}
		})
	}
}
