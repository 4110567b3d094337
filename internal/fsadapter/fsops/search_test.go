//go:build linux

package fsops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// refSearch is the reference fs.search: whole files, no chunks, sorted afterwards.
func refSearch(t testing.TB, root, under, query string) []SearchMatch {
	var out []SearchMatch
	filepath.WalkDir(filepath.Join(root, under), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		for _, seg := range strings.Split(rel, "/") {
			if !validName(seg) {
				return nil
			}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(b[:min(len(b), binarySniffBytes)], 0) >= 0 || !utf8.Valid(b) {
			return nil
		}
		s := string(b)
		from := 0
		for {
			i := strings.Index(s[from:], query)
			if i < 0 {
				break
			}
			at := from + i
			ls := strings.LastIndexByte(s[:at], '\n') + 1
			line := strings.Count(s[:at], "\n") + 1
			text := s[ls:]
			if e := strings.IndexByte(text, '\n'); e >= 0 {
				text = text[:e]
			}
			if len(text) > MaxMatchTextBytes {
				text = text[:MaxMatchTextBytes]
				for !utf8.ValidString(text) {
					text = text[:len(text)-1]
				}
			}
			out = append(out, SearchMatch{Path: rel, Line: int64(line), Column: int64(utf8.RuneCountInString(s[ls:at]) + 1), Text: text})
			e := strings.IndexByte(s[at:], '\n')
			if e < 0 {
				break
			}
			from = at + e + 1
		}
		return nil
	})
	slices.SortStableFunc(out, func(a, b SearchMatch) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// makeSearchTree writes a random tree whose files exercise chunk boundaries, long lines,
// multi-byte text, binary files and the ordering of "a", "a-b", "a/b".
func makeSearchTree(t testing.TB, dir string, rng *rand.Rand, q string) {
	words := []string{"x", "yy", "é", "€", "𝄞", "\t", " ", q, string([]rune(q)[:len([]rune(q))/2]), "\n", "\n", "\r\n"}
	gen := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	names := []string{"a", "a-b", "a.b", "a/b", "a/b-c", "a/b/c", "b", "Z", "é", "a0", "a/0"}
	for i := 0; i < 30; i++ {
		name := names[rng.IntN(len(names))] + "/" + fmt.Sprint("f", i)
		if rng.IntN(3) == 0 {
			name = names[rng.IntN(len(names))] + fmt.Sprint("-f", i)
		}
		var content string
		switch rng.IntN(8) {
		case 0:
			content = strings.Repeat("z", 5000+rng.IntN(9000)) + q + gen(100) // long line
		case 1:
			content = gen(10) + "\x00" + q // binary
		case 2:
			content = gen(300) + "\xff" + q // invalid UTF-8
		default:
			content = gen(rng.IntN(12000))
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			continue // a file of that name is in the way
		}
		os.WriteFile(p, []byte(content), 0o644)
	}
	os.Symlink("a", filepath.Join(dir, "link-to-a"))
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	os.WriteFile(filepath.Join(dir, "bad\nname"), []byte(q), 0o644)
}

func TestSearchMatchesReference(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 1))
		dir := t.TempDir()
		q := []string{"needle", "é€", "ab", "𝄞x", "z\nz", "zz"}[seed]
		makeSearchTree(t, dir, rng, q)
		want := refSearch(t, dir, ".", q)
		for _, chunk := range []int{1, 7, 64, 1000, 4096, searchChunk} {
			r := openRoot(t, dir)
			r.chunk = chunk
			res, perr := r.Search(bg, SearchPayload{Path: ".", Query: q, MaxResults: ptr(MaxSearchResults)})
			noErr(t, perr)
			if len(want) > MaxSearchResults {
				want = want[:MaxSearchResults]
				if !res.Truncated {
					t.Fatalf("seed %d chunk %d: not truncated", seed, chunk)
				}
			} else if res.Truncated {
				t.Fatalf("seed %d chunk %d: truncated with %d matches, want %d (%d bytes)", seed, chunk, len(res.Matches), len(want), encodedSize(t, res))
			}
			if !slices.Equal(res.Matches, want) {
				for i := range min(len(want), len(res.Matches)) {
					if res.Matches[i] != want[i] {
						t.Fatalf("seed %d chunk %d query %q: match %d = %+v, want %+v", seed, chunk, q, i, res.Matches[i], want[i])
					}
				}
				t.Fatalf("seed %d chunk %d: %d matches, want %d", seed, chunk, len(res.Matches), len(want))
			}
		}
		if len(want) == 0 {
			t.Fatalf("seed %d: no matches generated", seed)
		}
	}
}

// TestSearchShortQueriesAcrossChunks: a query of one byte, or of one multi-byte character,
// with few results wanted, in files longer than a chunk whose reads fill the buffer to its
// end. The scanner keeps what the next read still needs from a rune boundary; with nothing to
// keep it looked one byte past the buffer (a one-byte query on a 648 KB log crashed
// airlock-fs). Every chunk size gives the reference's first matches.
func TestSearchShortQueriesAcrossChunks(t *testing.T) {
	dir := t.TempDir()
	var ascii, mixed strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&ascii, "line %05d of the log\n", i)
		fmt.Fprintf(&mixed, "ligne %05d é du journal\n", i)
	}
	makeTree(t, dir, "ascii.log="+ascii.String(), "mixed.log="+mixed.String())
	for _, file := range []string{"ascii.log", "mixed.log"} {
		for _, q := range []string{"e", "9", "é", "\n"} {
			all := refSearch(t, dir, file, q)
			for _, chunk := range []int{1, 7, 4096, searchChunk} {
				for _, want := range []int{1, 2, 3, MaxSearchResults} {
					r := openRoot(t, dir)
					r.chunk = chunk
					res, perr := r.Search(bg, SearchPayload{Path: file, Query: q, MaxResults: ptr(want)})
					if perr != nil {
						if q == "\n" && perr.Code == CodeInvalidArgument {
							continue // a query of a line break alone is refused
						}
						t.Fatalf("%s %q chunk %d max %d: %v", file, q, chunk, want, perr)
					}
					exp := all[:min(want, len(all))]
					if !slices.Equal(res.Matches, exp) {
						t.Fatalf("%s %q chunk %d max %d: %d matches, want %d (first %+v)", file, q, chunk, want, len(res.Matches), len(exp), res.Matches[:min(1, len(res.Matches))])
					}
				}
			}
		}
	}
}

func TestSearch(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, "a/x=needle\nno\nneedle needle\n", "a-b=needle", "a.b=needle", "sub/deep/f=ééneedle",
		"l -> a/x", "bin=needle\x00", "long="+strings.Repeat("é", 3000)+"needle")
	r := openRoot(t, dir)
	res, perr := r.Search(bg, SearchPayload{Path: ".", Query: "needle"})
	noErr(t, perr)
	var got []string
	for _, m := range res.Matches {
		got = append(got, fmt.Sprintf("%s:%d:%d", m.Path, m.Line, m.Column))
	}
	if want := "a-b:1:1 a.b:1:1 a/x:1:1 a/x:3:1 long:1:3001 sub/deep/f:1:3"; strings.Join(got, " ") != want {
		t.Fatalf("matches %s, want %s", strings.Join(got, " "), want)
	}
	if m := res.Matches[4]; len(m.Text) != MaxMatchTextBytes || !utf8.ValidString(m.Text) {
		t.Fatalf("long line text: %d bytes", len(m.Text))
	}
	res, perr = r.Search(bg, SearchPayload{Path: "a/x", Query: "needle"})
	noErr(t, perr)
	if len(res.Matches) != 2 || res.Matches[0].Path != "a/x" {
		t.Fatalf("file search: %+v", res)
	}
	res, perr = r.Search(bg, SearchPayload{Path: ".", Query: "needle", MaxResults: ptr(6)})
	noErr(t, perr)
	if len(res.Matches) != 6 || res.Truncated {
		t.Fatalf("exact cap: %d truncated=%v", len(res.Matches), res.Truncated)
	}
	res, perr = r.Search(bg, SearchPayload{Path: ".", Query: "needle", MaxResults: ptr(3)})
	noErr(t, perr)
	if len(res.Matches) != 3 || !res.Truncated {
		t.Fatalf("cap 3: %d truncated=%v", len(res.Matches), res.Truncated)
	}
	_, perr = r.Search(bg, SearchPayload{Path: ".", Query: ""})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Search(bg, SearchPayload{Path: ".", Query: strings.Repeat("q", MaxQueryBytes+1)})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Search(bg, SearchPayload{Path: ".", Query: "\xff"})
	wantCode(t, perr, CodeNotUTF8)
	_, perr = r.Search(bg, SearchPayload{Path: ".", Query: "x", MaxResults: ptr(0)})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Search(bg, SearchPayload{Path: "l", Query: "x"})
	wantCode(t, perr, CodePathSymlink)
	_, perr = r.Search(bg, SearchPayload{Path: "nope", Query: "x"})
	wantCode(t, perr, CodeNotFound)

	budget, err := OpenOptions(dir, Options{MaxResponseBytes: 1200})
	mustDo(t, err)
	defer budget.Close()
	res, perr = budget.Search(bg, SearchPayload{Path: ".", Query: "needle"})
	noErr(t, perr)
	if !res.Truncated || encodedSize(t, res) > 1200 || len(res.Matches) != 4 {
		t.Fatalf("budget: %d matches, %d bytes, truncated=%v", len(res.Matches), encodedSize(t, res), res.Truncated)
	}
	bounded, err := OpenOptions(dir, Options{MaxSearchFiles: 2, MaxSearchDepth: 1})
	mustDo(t, err)
	defer bounded.Close()
	res, perr = bounded.Search(bg, SearchPayload{Path: ".", Query: "needle"})
	noErr(t, perr)
	if !res.Truncated || len(res.Matches) != 2 {
		t.Fatalf("file bound: %+v", res)
	}
	deep, err := OpenOptions(dir, Options{MaxSearchDepth: 1})
	mustDo(t, err)
	defer deep.Close()
	res, perr = deep.Search(bg, SearchPayload{Path: ".", Query: "needle"})
	noErr(t, perr)
	if !res.Truncated || len(res.Matches) != 5 {
		t.Fatalf("depth bound: %+v", res)
	}
}

// TestSearchContract pins each point of fs.search that docs/tool-adapters.md ("fs.search
// results") states and `airlock validate tool-adapter` checks (issue #23), one file per point.
func TestSearchContract(t *testing.T) {
	const q = "Needle"
	dir := t.TempDir()
	makeTree(t, dir,
		"a.txt=first line\nαβγ Needle and Needle again\n", // one entry per line, column in code points
		"a-b.txt=x Needle\n", // order: "a-b.txt" < "a.txt" < "a/z.txt"
		"a/z.txt=Needle\n",
		".hidden=Needle hidden\n", // dot files are searched
		"b.txt=no\r\nthe Needle line\r\nneedle NEEDLE lower\r\n",        // CR kept in text; case-sensitive
		"deep/1/2/3/d.txt=deep Needle",                                  // recursion; a last line without LF
		"bin.dat=Needle\x00Needle\n",                                    // NUL in the first 8 KiB: skipped
		"latin1.txt=Needle caf\xe9\n",                                   // invalid UTF-8 anywhere: skipped
		"late-nul.txt="+strings.Repeat("x", 8192)+"\nNeedle late\n\x00", // NUL after 8 KiB: text
		"long.txt="+strings.Repeat("y", 5000)+"Needle",                  // text cut to 4096 bytes
		"span.txt=x end\nstart y\n",                                     // a query across lines
		"link -> a",                                                     // never followed
	)
	r := openRoot(t, dir)
	res, perr := r.Search(bg, SearchPayload{Path: ".", Query: q})
	noErr(t, perr)
	want := []SearchMatch{
		{".hidden", 1, 1, "Needle hidden"},
		{"a-b.txt", 1, 3, "x Needle"},
		{"a.txt", 2, 5, "αβγ Needle and Needle again"},
		{"a/z.txt", 1, 1, "Needle"},
		{"b.txt", 2, 5, "the Needle line\r"},
		{"deep/1/2/3/d.txt", 1, 6, "deep Needle"},
		{"late-nul.txt", 2, 1, "Needle late"},
		{"long.txt", 1, 5001, strings.Repeat("y", MaxMatchTextBytes)},
	}
	if !slices.Equal(res.Matches, want) || res.Truncated {
		t.Fatalf("matches %+v truncated %v,\nwant %+v", res.Matches, res.Truncated, want)
	}
	// A file path searches that file; the path of a match is root-relative.
	res, perr = r.Search(bg, SearchPayload{Path: "a", Query: q})
	noErr(t, perr)
	if !slices.Equal(res.Matches, want[3:4]) {
		t.Fatalf("search of a: %+v", res.Matches)
	}
	// maxResults keeps a prefix; truncated only when a match was left out.
	res, perr = r.Search(bg, SearchPayload{Path: ".", Query: q, MaxResults: ptr(3)})
	noErr(t, perr)
	if !slices.Equal(res.Matches, want[:3]) || !res.Truncated {
		t.Fatalf("maxResults 3: %+v truncated %v", res.Matches, res.Truncated)
	}
	res, perr = r.Search(bg, SearchPayload{Path: ".", Query: q, MaxResults: ptr(len(want))})
	noErr(t, perr)
	if !slices.Equal(res.Matches, want) || res.Truncated {
		t.Fatalf("maxResults %d: %+v truncated %v", len(want), res.Matches, res.Truncated)
	}
	// A query across lines is reported on its first line, whose text is that line alone.
	res, perr = r.Search(bg, SearchPayload{Path: ".", Query: "end\nstart"})
	noErr(t, perr)
	if !slices.Equal(res.Matches, []SearchMatch{{"span.txt", 1, 3, "x end"}}) {
		t.Fatalf("query across lines: %+v", res.Matches)
	}
	// No match: an empty list, not null.
	res, perr = r.Search(bg, SearchPayload{Path: ".", Query: "absent"})
	noErr(t, perr)
	if b, _ := json.Marshal(res); string(b) != `{"matches":[],"truncated":false}` {
		t.Fatalf("no match: %s", b)
	}
}
