package mcp

import (
	"fmt"
	"strings"
	"testing"
)

func TestListText(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{`{"entries":[{"name":"notes.txt","type":"file","size":26,"modifiedAt":"2026-12-05T07:00:00Z"},` +
			`{"name":"a dir","type":"directory","size":0,"modifiedAt":"2026-12-05T07:00:01.5Z"}],"truncated":false}`,
			"file 26 2026-12-05T07:00:00Z notes.txt\ndirectory 0 2026-12-05T07:00:01Z a dir/\n"},
		// The text shows a time to the second, cut (never rounded up); structuredContent keeps it.
		{`{"entries":[{"name":"n","type":"file","size":1,"modifiedAt":"2026-12-31T23:59:59.999999999Z"}],"truncated":false}`,
			"file 1 2026-12-31T23:59:59Z n\n"},
		{`{"entries":[],"truncated":false}`, "(empty directory)\n"},
		// Read in place (WalkList) and, a key spelled with an escape, decoded in full: the same.
		{` { "truncated" : false , "entries" : [ { "modifiedAt" : "2026-12-05T07:00:00Z" , "type" : "file" , "name" : "caf\u00e9 \"q\"" } ] } `,
			"file 0 2026-12-05T07:00:00Z café \"q\"\n"},
		{`{"entries":[{"n\u0061me":"caf\u00e9 \"q\"","type":"file","modifiedAt":"2026-12-05T07:00:00Z"}],"truncated":false}`,
			"file 0 2026-12-05T07:00:00Z café \"q\"\n"},
		{`{"entries":[{"name":"x","type":"file","size":1,"modifiedAt":"2026-12-05T07:00:00Z"}],"truncated":true}`,
			"file 1 2026-12-05T07:00:00Z x\n(truncated: the directory has more entries; raise maxEntries or list a subdirectory)\n"},
	} {
		if got, ok := listText([]byte(tc.data)); !ok || got != tc.want {
			t.Errorf("listText(%s) = %q, %v; want %q", tc.data, got, ok, tc.want)
		}
	}
	if _, ok := listText([]byte(`{"entries":7}`)); ok {
		t.Error("listText accepted a result it cannot read")
	}
	// A listing of the most entries fs.list gives that is still truncated: maxEntries cannot
	// be raised, which the line said to do.
	var full strings.Builder
	full.WriteString(`{"entries":[`)
	for i := range 10000 {
		if i > 0 {
			full.WriteByte(',')
		}
		fmt.Fprintf(&full, `{"name":"f%05d","type":"file","size":0,"modifiedAt":"2026-12-05T07:00:00Z"}`, i)
	}
	full.WriteString(`],"truncated":true}`)
	got, ok := listText([]byte(full.String()))
	if want := "file 0 2026-12-05T07:00:00Z f09999\n(truncated: the directory has more entries than one listing holds; these are the first 10000 by name, and no tool lists the others)\n"; !ok || !strings.HasSuffix(got, want) {
		t.Errorf("a full listing, truncated: text ends %q", got[max(0, len(got)-200):])
	}
}

func TestSearchText(t *testing.T) {
	for _, tc := range []struct {
		data, want string
		n          int
		truncated  bool
	}{
		{`{"matches":[{"path":"a/b.go","line":3,"column":9,"text":"\tx := grant()"},` +
			`{"path":"c.txt","line":1,"column":1,"text":"grant\r"}],"truncated":false}`,
			"a/b.go:3:9: \tx := grant()\nc.txt:1:1: \"grant\\r\"\n", 2, false},
		{`{"matches":[],"truncated":false}`, "(no matches)\n", 0, false},
		{`{"matches":[{"path":"x","line":1,"column":2,"text":"q"}],"truncated":true}`,
			"x:1:2: q\n(truncated: there are more matches; raise maxResults or narrow the path or query)\n", 1, true},
	} {
		got, n, truncated, ok := searchText([]byte(tc.data))
		if !ok || got != tc.want || n != tc.n || truncated != tc.truncated {
			t.Errorf("searchText(%s) = %q, %d, %v, %v; want %q, %d, %v", tc.data, got, n, truncated, ok, tc.want, tc.n, tc.truncated)
		}
	}
	if _, _, _, ok := searchText([]byte(`[]`)); ok {
		t.Error("searchText accepted a result it cannot read")
	}
}

// BenchmarkListText is the rendering of a 1,000-entry listing as airlock mcp receives it.
func BenchmarkListText(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"entries":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"name":"f%04d.txt","type":"file","size":2,"modifiedAt":"2026-12-04T02:35:59.123456789Z"}`, i)
	}
	sb.WriteString(`],"truncated":false}`)
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, ok := listText(data); !ok {
			b.Fatal("not rendered")
		}
	}
}
