package mcp

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// The text renderings of fs_list and fs_search. A client that shows a tool result to a model
// usually passes it the text block, not structuredContent, so the text is what the agent
// reads and pays for in tokens. A listing as JSON repeats every member's name on every entry
// (about 90 bytes an entry, and more once escaped into a string); one line an entry says the
// same in about half. structuredContent keeps the exact values.

// listText renders an fs.list result, one line per entry: type, size in bytes, modification
// time to the second (appendTextTime) and name, a directory's name ending in "/". Names cannot hold control characters (the
// daemon checks the listing), so a name is the rest of its line. data is a result as the
// bridge receives it, walked by the strict decoder: tooladapter.WalkList reads it in place,
// and what WalkList does not settle is decoded in full.
func listText(data []byte) (string, bool) {
	b := make([]byte, 0, len(data)/2+64)
	entries := 0
	line := func(name, typ string, size int64, modifiedAt string) {
		entries++
		b = append(b, typ...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, size, 10)
		b = append(b, ' ')
		b = appendTextTime(b, modifiedAt)
		b = append(b, ' ')
		b = append(b, name...)
		if typ == "directory" {
			b = append(b, '/')
		}
		b = append(b, '\n')
	}
	truncated, ok := tooladapter.WalkList(data, line)
	if !ok {
		var r struct {
			Entries []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Size       int64  `json:"size"`
				ModifiedAt string `json:"modifiedAt"`
			} `json:"entries"`
			Truncated bool `json:"truncated"`
		}
		if json.Unmarshal(data, &r) != nil {
			return "", false
		}
		b, entries = b[:0], 0
		for _, e := range r.Entries {
			line(e.Name, e.Type, e.Size, e.ModifiedAt)
		}
		truncated = r.Truncated
	}
	switch {
	case truncated && entries >= tooladapter.MaxListEntries:
		// maxEntries is at its most: raising it, as the line below says, cannot be done
		// (TestListText).
		b = append(b, "(truncated: the directory has more entries than one listing holds; these are the first "+
			strconv.Itoa(entries)+" by name, and no tool lists the others)\n"...)
	case truncated:
		b = append(b, "(truncated: the directory has more entries; raise maxEntries or list a subdirectory)\n"...)
	case entries == 0:
		b = append(b, "(empty directory)\n"...)
	}
	return string(b), true
}

// appendTextTime appends a modification time as a listing's text shows it: to the second, its
// fraction cut (so never later than the file's time). A model reading a listing has no use for
// nanoseconds, which made a fifth of each line (a 1,000-entry listing's text 48 → 38 KB, and
// the go-sdk client's p50 on the answer 5.6–6.1 → 4.5–4.7 ms; docs/mcp.md, "Benchmark");
// structuredContent keeps the exact time.
func appendTextTime(b []byte, at string) []byte {
	if i := strings.IndexByte(at, '.'); i >= 0 && strings.HasSuffix(at, "Z") {
		return append(append(b, at[:i]...), 'Z')
	}
	return append(b, at...)
}

// searchText renders an fs.search result as grep does: path:line:column: text, a line per
// match. A match's text is the matching line, which may hold tabs or other control
// characters; it is quoted when it does, so that every match stays on one line.
func searchText(data []byte) (text string, matches int, truncated, ok bool) {
	var r struct {
		Matches []struct {
			Path   string `json:"path"`
			Line   int64  `json:"line"`
			Column int64  `json:"column"`
			Text   string `json:"text"`
		} `json:"matches"`
		Truncated bool `json:"truncated"`
	}
	if json.Unmarshal(data, &r) != nil {
		return "", 0, false, false
	}
	var b strings.Builder
	for _, m := range r.Matches {
		b.WriteString(m.Path)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(m.Line, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(m.Column, 10))
		b.WriteString(": ")
		if strings.ContainsFunc(m.Text, isControl) {
			b.WriteString(strconv.Quote(m.Text))
		} else {
			b.WriteString(m.Text)
		}
		b.WriteByte('\n')
	}
	switch {
	case r.Truncated:
		b.WriteString("(truncated: there are more matches; raise maxResults or narrow the path or query)\n")
	case len(r.Matches) == 0:
		b.WriteString("(no matches)\n")
	}
	return b.String(), len(r.Matches), r.Truncated, true
}

func isControl(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }

// readNote is what fs_read's text adds after the file's text when the window did not reach the
// end of the file (eof false): most clients show a model only the text, which would otherwise
// read as the whole file. It follows the text on a line of its own, as a truncated listing's
// note does; structuredContent.content stays the file's text alone.
func readNote(bytesRead int64) string {
	return "\n(truncated: the file goes on after these " + strconv.FormatInt(bytesRead, 10) +
		" bytes; call fs_read again with offset advanced by " + strconv.FormatInt(bytesRead, 10) + " to read on)\n"
}
