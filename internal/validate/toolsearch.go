package validate

// This file owns the search_results probe: the fixtures it searches and the points of
// docs/tool-adapters.md "fs.search results" it checks, each failure worded as the rule it
// breaks, so that an author sees "text is the query, not the whole line" rather than a diff.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// ProbeToolSearchResults checks what an fs.search result means (issue #23): whole-line text,
// code-point columns from 1, one entry per line, byte order of paths, recursion, case, binary
// files, symbolic links, and maxResults and the response budget keeping a prefix.
const ProbeToolSearchResults = "search_results"

// searchMatch is one entry of an fs.search result.
type searchMatch struct {
	Path   string `json:"path"`
	Line   int64  `json:"line"`
	Column int64  `json:"column"`
	Text   string `json:"text"`
}

// Fixed parts of the search fixtures.
const (
	searchDir      = "search"      // beneath the fixture directory
	searchWideDir  = "search-wide" // the response-budget fixture, searched on its own
	searchLongLine = 5000          // bytes before the query on long.txt's one line
	searchWideLine = 4000          // bytes of each line of search-wide/w.txt
	searchTextCut  = 4096          // airlock-fs's cut of a long line, in bytes
	searchLateNUL  = 8192          // bytes of text before late-nul.txt's NUL
)

// searchFile is one file of the search fixtures: its content and, for the query, the entries
// a conforming search gives (text and columns derived from the content), or why it gives none.
type searchFile struct {
	name    string
	content string
	skip    string // why no entry may come from it, or ""
}

// searchFiles are the fixtures beneath searchDir, for the query q; span is the query across
// two lines that only span.txt holds.
func searchFiles(q, span string) []searchFile {
	first, second, _ := strings.Cut(span, "\n")
	return []searchFile{
		{name: ".hidden", content: q + " hidden\n"},
		{name: "a-b.txt", content: "x " + q + "\n"},
		{name: "a.txt", content: "first line\nαβγ " + q + " and " + q + " again\n"},
		{name: "a/z.txt", content: q + "\n"},
		{name: "b.txt", content: "no\r\nthe " + q + " line\r\n" + strings.ToLower(q) + " " + strings.ToUpper(q) + " other cases\r\n"},
		{name: "deep/1/2/3/d.txt", content: "deep " + q},
		{name: "bin.dat", content: q + "\x00" + q + "\n", skip: "a file with a NUL in its first 8 KiB is binary, and binary files are skipped"},
		{name: "latin1.txt", content: q + " caf\xe9\n", skip: "a file that is not valid UTF-8 is binary, and binary files are skipped"},
		{name: "late-nul.txt", content: strings.Repeat("x", searchLateNUL) + "\n" + q + " late\n\x00"},
		{name: "lines.txt", content: q + " one\nnothing\ntwo " + q + "\n"},
		{name: "long.txt", content: strings.Repeat("y", searchLongLine) + q},
		{name: "span.txt", content: "x " + first + "\n" + second + " y\n"},
	}
}

// searchEntries derives the entries a conforming fs.search for query gives in files, each
// path prefixed with dir, in the documented order.
func searchEntries(dir string, files []searchFile, query string) []searchMatch {
	var out []searchMatch
	for _, f := range files {
		if f.skip != "" {
			continue
		}
		s, from := f.content, 0
		for {
			i := strings.Index(s[from:], query)
			if i < 0 {
				break
			}
			at := from + i
			start := strings.LastIndexByte(s[:at], '\n') + 1
			text, _, _ := strings.Cut(s[start:], "\n")
			if len(text) > searchTextCut {
				text = text[:searchTextCut]
				for !utf8.ValidString(text) {
					text = text[:len(text)-1]
				}
			}
			out = append(out, searchMatch{Path: dir + "/" + f.name, Line: int64(strings.Count(s[:at], "\n") + 1),
				Column: int64(utf8.RuneCountInString(s[start:at]) + 1), Text: text})
			nl := strings.IndexByte(s[at:], '\n')
			if nl < 0 {
				break
			}
			from = at + nl + 1
		}
	}
	slices.SortStableFunc(out, func(a, b searchMatch) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// searchQueries are the probe's queries: a word with upper and lower case letters, and one
// across two lines.
func (h *toolHarness) searchQueries() (q, span string) {
	return "Needle-" + h.run, "end-" + h.run + "\nstart"
}

// searchFixtures creates the search fixtures beneath the fixture directory.
func (h *toolHarness) searchFixtures() error {
	q, span := h.searchQueries()
	var errs []error
	for _, f := range searchFiles(q, span) {
		p := filepath.Join(h.baseAbs, searchDir, filepath.FromSlash(f.name))
		errs = append(errs, os.MkdirAll(filepath.Dir(p), 0o700), os.WriteFile(p, []byte(f.content), 0o600))
	}
	errs = append(errs, os.Symlink("a", filepath.Join(h.baseAbs, searchDir, "link")))
	wide := filepath.Join(h.baseAbs, searchWideDir)
	errs = append(errs, os.Mkdir(wide, 0o700), os.WriteFile(filepath.Join(wide, "w.txt"), []byte(h.wideText()), 0o600))
	return errors.Join(errs...)
}

// wideText is search-wide/w.txt: lines of searchWideLine bytes, each starting with the query,
// more of them than maxResponseBytes can carry.
func (h *toolHarness) wideText() string {
	q, _ := h.searchQueries()
	line := q + strings.Repeat("w", searchWideLine-1-len(q)) + "\n"
	return strings.Repeat(line, int(h.desc.Limits.MaxResponseBytes)/searchWideLine+2)
}

func (h *toolHarness) probeSearchResults() {
	if !h.desc.Grants(tooladapter.OpSearch) {
		h.skip(ProbeToolSearchResults, "fs.search is not granted")
		return
	}
	q, span := h.searchQueries()
	files := searchFiles(q, span)
	dir := h.rel(searchDir)
	want := searchEntries(dir, files, q)
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	search := func(payload map[string]any) ([]searchMatch, bool, bool) {
		var d struct {
			Matches   []searchMatch `json:"matches"`
			Truncated bool          `json:"truncated"`
		}
		if err := h.callOK(tooladapter.OpSearch, payload, &d); err != nil {
			bad("%v", err)
			return nil, false, false
		}
		return d.Matches, d.Truncated, true
	}

	// The whole tree: every point but the limits.
	payload := map[string]any{"path": dir, "query": q, "maxResults": 100}
	got, truncated, ok := search(payload)
	if !ok {
		h.result(ProbeToolSearchResults, problems, "")
		return
	}
	sent := sentText(tooladapter.OpSearch, payload)
	for _, p := range searchDiff(dir, files, q, got, want) {
		bad("%s: %s", sent, p)
	}
	if truncated {
		bad("%s: truncated is true, though all %d matches fit maxResults 100", sent, len(want))
	}

	// A path naming a file searches that file.
	file := dir + "/lines.txt"
	payload = map[string]any{"path": file, "query": q}
	if got, _, ok := search(payload); ok && !slices.Equal(got, entriesOf(want, file)) {
		bad("%s gave %s; want %s (a path naming a file searches that file, and each match names it)",
			sentText(tooladapter.OpSearch, payload), matchList(got), matchList(entriesOf(want, file)))
	}

	// maxResults keeps a prefix; truncated says exactly whether an entry was left out.
	for _, max := range []int{3, len(want)} {
		payload = map[string]any{"path": dir, "query": q, "maxResults": max}
		got, truncated, ok := search(payload)
		if !ok {
			continue
		}
		if !slices.Equal(got, want[:max]) {
			bad("%s gave %s; want the first %d entries of the whole result, %s", sentText(tooladapter.OpSearch, payload),
				matchList(got), max, matchList(want[:max]))
		}
		if truncated != (max < len(want)) {
			bad("%s answered truncated %v with %d of %d matches (truncated is true exactly when a match was left out)",
				sentText(tooladapter.OpSearch, payload), truncated, max, len(want))
		}
	}

	// A query across lines is reported on the line where the match starts.
	payload = map[string]any{"path": dir, "query": span}
	if got, _, ok := search(payload); ok {
		if w := searchEntries(dir, files, span); !slices.Equal(got, w) {
			bad("%s gave %s; want %s (a match across lines is reported on its first line, with that line as text)",
				sentText(tooladapter.OpSearch, payload), matchList(got), matchList(w))
		}
	}

	// The response budget keeps a prefix too, and says so.
	wide := h.rel(searchWideDir)
	payload = map[string]any{"path": wide, "query": q, "maxResults": tooladapter.MaxSearchResults}
	if got, truncated, ok := search(payload); ok {
		line := strings.TrimSuffix(h.wideText()[:searchWideLine], "\n")
		for i, m := range got {
			if m != (searchMatch{Path: wide + "/w.txt", Line: int64(i + 1), Column: 1, Text: line}) {
				bad("%s: entry %d is %s; want line %d of w.txt, a prefix of its lines (the response budget cuts the end of the list)",
					sentText(tooladapter.OpSearch, payload), i+1, matchList([]searchMatch{m}), i+1)
				break
			}
		}
		if !truncated {
			bad("%s: %d lines of %d bytes match, more than maxResponseBytes %d carries, but truncated is false",
				sentText(tooladapter.OpSearch, payload), int(h.desc.Limits.MaxResponseBytes)/searchWideLine+2, searchWideLine,
				h.desc.Limits.MaxResponseBytes)
		}
	}
	h.result(ProbeToolSearchResults, problems, fmt.Sprintf("%d entries checked", len(want)))
}

// searchDiff names, rule by rule, how got differs from want, the result of searching dir
// for q in files.
func searchDiff(dir string, files []searchFile, q string, got, want []searchMatch) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	type key struct {
		path string
		line int64
	}
	wantAt := map[key]searchMatch{}
	for _, m := range want {
		wantAt[key{m.Path, m.Line}] = m
	}
	content := map[string]searchFile{}
	for _, f := range files {
		content[dir+"/"+f.name] = f
	}
	seen := map[key]int{}
	var order []key
	for _, m := range got {
		k := key{m.Path, m.Line}
		if seen[k]++; seen[k] > 1 {
			if _, expected := wantAt[k]; expected && seen[k] == 2 {
				bad("line %d of %s gave more than one entry; a line with the query twice gives one entry, at its first occurrence", m.Line, rel(dir, m.Path))
			}
			continue
		}
		order = append(order, k)
		w, expected := wantAt[k]
		f, known := content[m.Path]
		switch {
		case !expected && strings.HasPrefix(m.Path, dir+"/link/"):
			bad("%s: the search followed the symbolic link link; links are never followed", rel(dir, m.Path))
		case !expected && known && f.skip != "":
			bad("%s gave an entry: %s", rel(dir, m.Path), f.skip)
		case !expected && rel(dir, m.Path) == "b.txt" && m.Line == 3:
			bad("line 3 of b.txt holds the query only in other cases, yet gave an entry; the match is case-sensitive")
		case !expected:
			bad("%s: no match is there", matchList([]searchMatch{m}))
		default:
			problems = append(problems, entryDiff(rel(dir, m.Path), q, m, w, f)...)
		}
	}
	for _, w := range want {
		if seen[key{w.Path, w.Line}] > 0 {
			continue
		}
		switch name := rel(dir, w.Path); {
		case strings.Contains(name, "/"):
			bad("no entry for %s: a directory is searched to every depth", name)
		case strings.HasPrefix(name, "."):
			bad("no entry for %s: dot files are searched too", name)
		case name == "late-nul.txt":
			bad("no entry for late-nul.txt, whose only NUL is after its first 8 KiB: only a NUL in the first 8 KiB makes a file binary")
		default:
			bad("no entry for line %d of %s", w.Line, name)
		}
	}
	var wantOrder []key
	for _, w := range want {
		if seen[key{w.Path, w.Line}] > 0 {
			wantOrder = append(wantOrder, key{w.Path, w.Line})
		}
	}
	var gotOrder []key
	for _, k := range order {
		if _, ok := wantAt[k]; ok {
			gotOrder = append(gotOrder, k)
		}
	}
	if !slices.Equal(gotOrder, wantOrder) {
		var names []string
		for _, k := range gotOrder {
			names = append(names, fmt.Sprintf("%s:%d", rel(dir, k.path), k.line))
		}
		bad("entries in the order %s; want paths in byte order (a.txt before a/z.txt), then lines", strings.Join(names, " "))
	}
	return problems
}

// entryDiff names how the entry m for a line differs from w, the conforming one.
func entryDiff(name, q string, m, w searchMatch, f searchFile) []string {
	var problems []string
	where := fmt.Sprintf("line %d of %s", w.Line, name)
	if m.Text != w.Text {
		switch {
		case m.Text == q:
			problems = append(problems, fmt.Sprintf("%s: text is the query, not the whole line %s", where, quoteN(w.Text, 80)))
		case strings.HasSuffix(w.Text, "\r") && m.Text == strings.TrimSuffix(w.Text, "\r"):
			problems = append(problems, fmt.Sprintf("%s: text dropped the CR before the LF; only LF ends a line", where))
		case len(w.Text) == searchTextCut:
			problems = append(problems, fmt.Sprintf("%s: text of a %d-byte line is %d bytes, not its first %d", where,
				searchLongLine+len(q), len(m.Text), searchTextCut))
		default:
			problems = append(problems, fmt.Sprintf("%s: text is %s, not the whole line %s", where, quoteN(m.Text, 80), quoteN(w.Text, 80)))
		}
	}
	if m.Column != w.Column {
		line := strings.Split(f.content, "\n")[w.Line-1]
		byteCol := int64(strings.Index(line, q) + 1)
		switch {
		case m.Column == w.Column-1:
			problems = append(problems, fmt.Sprintf("%s: column %d counts from 0; want %d", where, m.Column, w.Column))
		case m.Column == byteCol:
			problems = append(problems, fmt.Sprintf("%s: column %d counts bytes; want %d, in code points", where, m.Column, w.Column))
		default:
			problems = append(problems, fmt.Sprintf("%s: column %d; want %d, the first occurrence, in code points from 1", where, m.Column, w.Column))
		}
	}
	return problems
}

func rel(dir, p string) string { return strings.TrimPrefix(p, dir+"/") }

func entriesOf(ms []searchMatch, path string) []searchMatch {
	var out []searchMatch
	for _, m := range ms {
		if m.Path == path {
			out = append(out, m)
		}
	}
	return out
}

// matchList renders entries for a report, each text cut short.
func matchList(ms []searchMatch) string {
	parts := []string{}
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("%s:%d:%d %s", m.Path, m.Line, m.Column, quoteN(m.Text, 40)))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
