//go:build linux

package fsops

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// FuzzResolvePath: for any path, no operation panics, reads the outside secret, names the
// root in an error, or resolves to a descriptor outside the root; a path ValidatePath accepts
// is clean and local.
func FuzzResolvePath(f *testing.F) {
	base, root, secret, cleanup := corpusTree(f)
	f.Cleanup(cleanup)
	for _, c := range corpusCases(base, root) {
		f.Add(c.path)
	}
	r := openRoot(f, root)
	f.Fuzz(func(t *testing.T, p string) {
		checkValidPathProperty(t, p)
		results := []func() (any, error){
			func() (any, error) { return wrap(r.Stat(bg, StatPayload{Path: p})) },
			func() (any, error) { return wrap(r.Read(bg, ReadPayload{Path: p})) },
			func() (any, error) { return wrap(r.List(bg, ListPayload{Path: p})) },
			func() (any, error) { return wrap(r.Search(bg, SearchPayload{Path: p, Query: "SECRET"})) },
			func() (any, error) {
				return wrap(r.Edit(bg, EditPayload{Path: p, Edits: []Edit{{OldText: "\x01never\x02", NewText: "x"}}}))
			},
		}
		for _, fn := range results {
			v, err := fn()
			if b, _ := json.Marshal(v); strings.Contains(string(b), secret) {
				t.Fatalf("%q: result carries the outside secret", p)
			}
			if err != nil && strings.Contains(err.Error(), base) {
				t.Fatalf("%q: error names the root: %v", p, err)
			}
		}
		if ValidatePath(p) != nil {
			return
		}
		fd, _, perr := r.lookup(p)
		if perr != nil {
			return
		}
		defer unix.Close(fd)
		where, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			t.Fatal(err)
		}
		if where != root && !strings.HasPrefix(where, root+"/") {
			t.Fatalf("%q resolved to %q, outside %q", p, where, root)
		}
	})
}

func wrap[T any](v *T, perr interface{ Error() string }) (any, error) {
	if v == nil {
		return nil, fmt.Errorf("%s", perr.Error())
	}
	return v, nil
}

// refEdit is the reference edit algorithm: validation in fs.edit's order, then each oldText
// located by scanning every offset, which must find exactly one occurrence.
func refEdit(text string, edits []Edit) (string, string) {
	for _, e := range edits {
		if e.OldText == "" {
			return "", CodeInvalidArgument
		}
		if !utf8.ValidString(e.OldText) || !utf8.ValidString(e.NewText) {
			return "", CodeNotUTF8
		}
	}
	if !utf8.ValidString(text) {
		return "", CodeNotUTF8
	}
	for _, e := range edits {
		var at []int // up to two occurrences, overlapping ones included
		for i := 0; len(at) < 2 && i <= len(text); {
			k := strings.Index(text[i:], e.OldText)
			if k < 0 {
				break
			}
			at = append(at, i+k)
			i += k + 1
		}
		switch len(at) {
		case 0:
			return "", CodeEditNotFound
		case 1:
			text = text[:at[0]] + e.NewText + text[at[0]+len(e.OldText):]
		default:
			return "", CodeEditAmbiguous
		}
	}
	return text, ""
}

// FuzzEdit: fs.edit either fails with the reference's code and leaves the file unchanged, or
// leaves exactly the reference's result with its digest.
func FuzzEdit(f *testing.F) {
	f.Add("alpha beta gamma", "beta", "BETA", "BETA gamma", "x", true)
	f.Add("aaa", "aa", "b", "", "", false)
	f.Add("héllo wörld", "ö", "o", "hé", "he", true)
	f.Add("abc", "abc", "abcabc", "abc", "y", true)
	f.Add("x\xffy", "x", "y", "", "", false)
	f.Add("one two", "one", "", "two", "2", true)
	// On tmpfs when there is one: ext4 flushes a file renamed over another (auto_da_alloc),
	// which would make each execution cost milliseconds.
	dir := f.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "fsops-fuzz-"); err == nil {
		dir = shm
		f.Cleanup(func() { os.RemoveAll(shm) })
	}
	r := openRoot(f, dir)
	r.noSync = true // durability is TestCrashSafety's; here the algorithm runs at speed
	target := filepath.Join(dir, "f")
	f.Fuzz(func(t *testing.T, text, old1, new1, old2, new2 string, two bool) {
		if len(text)+len(old1)+len(new1)+len(old2)+len(new2) > 1<<16 {
			t.Skip("bounded input keeps executions fast")
		}
		if err := os.WriteFile(target, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		edits := []Edit{{OldText: old1, NewText: new1}}
		if two {
			edits = append(edits, Edit{OldText: old2, NewText: new2})
		}
		want, wantCode := refEdit(text, edits)
		res, perr := r.Edit(bg, EditPayload{Path: "f", Edits: edits})
		got := readFile(t, target)
		if wantCode != "" {
			if perr == nil || perr.Code != wantCode {
				t.Fatalf("Edit(%q, %q) = %v, want %s", text, edits, perr, wantCode)
			}
			if got != text {
				t.Fatalf("failed edit changed the file: %q -> %q", text, got)
			}
			return
		}
		if perr != nil {
			t.Fatalf("Edit(%q, %q) = %v, want %q", text, edits, perr, want)
		}
		if got != want || res.Digest != sum(want) || res.Replacements != len(edits) {
			t.Fatalf("Edit(%q, %q): file %q digest %s, want %q", text, edits, got, res.Digest, want)
		}
	})
}

// FuzzSearch: fs.search of one file, read in chunks of any size, finds exactly the
// reference's first matches (refSearch, which reads the file whole), or refuses the query.
// Its seeds include the one-byte query across a chunk boundary that once read past the
// scanner's buffer.
func FuzzSearch(f *testing.F) {
	f.Add("line 1 of the log\nline 2\n", "e", uint16(4), uint8(1))
	f.Add("héé\nxé\n", "é", uint16(1), uint8(2))
	f.Add("abcabcabc", "ca", uint16(2), uint8(0))
	f.Add("é\xff", "é", uint16(3), uint8(5))
	f.Add("x\x00needle", "needle", uint16(64), uint8(1))
	f.Add(strings.Repeat("e", 40), "e", uint16(7), uint8(1))
	dir := f.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "fsops-fuzz-"); err == nil {
		dir = shm
		f.Cleanup(func() { os.RemoveAll(shm) })
	}
	r := openRoot(f, dir)
	target := filepath.Join(dir, "f")
	f.Fuzz(func(t *testing.T, text, query string, chunk uint16, results uint8) {
		if len(text) > 1<<16 {
			t.Skip("bounded input keeps executions fast")
		}
		if err := os.WriteFile(target, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		want := int(results)%MaxSearchResults + 1
		r.chunk = int(chunk)%4096 + 1
		res, perr := r.Search(bg, SearchPayload{Path: "f", Query: query, MaxResults: &want})
		if perr != nil {
			if perr.Code != CodeInvalidArgument && perr.Code != CodeNotUTF8 {
				t.Fatalf("query %q: %v", query, perr)
			}
			return // an empty query, a line break, one over the bound, one not UTF-8
		}
		all := refSearch(t, dir, "f", query)
		if exp := all[:min(want, len(all))]; !slices.Equal(res.Matches, exp) {
			t.Fatalf("text %q query %q chunk %d max %d: %+v, want %+v", text, query, r.chunk, want, res.Matches, exp)
		}
	})
}
