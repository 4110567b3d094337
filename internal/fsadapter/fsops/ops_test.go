//go:build linux

package fsops

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/protocol"
	"golang.org/x/sys/unix"
)

var modifiedAtRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$`)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// encodedSize is the size of v as ndjson.Marshal encodes it, without the newline.
func encodedSize(t testing.TB, v any) int {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Len() - 1
}

func TestOpen(t *testing.T) {
	base := t.TempDir()
	makeTree(t, base, "real/f=x", "file=x", "link -> real")
	r := openRoot(t, filepath.Join(base, "link"))
	if want, _ := filepath.EvalSymlinks(filepath.Join(base, "real")); r.Name() != want {
		t.Fatalf("Name = %q, want %q", r.Name(), want)
	}
	if _, err := Open(filepath.Join(base, "file")); err == nil {
		t.Fatal("Open of a file succeeded")
	}
	if _, err := Open(filepath.Join(base, "missing")); err == nil {
		t.Fatal("Open of a missing directory succeeded")
	}
	mustDo(t, r.Close())
	mustDo(t, r.Close()) // idempotent
}

func TestStat(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, "f=hello", "d/", "l -> f")
	mustDo(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	r := openRoot(t, dir)
	st, perr := r.Stat(bg, StatPayload{Path: "f"})
	noErr(t, perr)
	if st.Type != TypeFile || st.Size != 5 || !modifiedAtRE.MatchString(st.ModifiedAt) {
		t.Fatalf("stat f = %+v", st)
	}
	st, perr = r.Stat(bg, StatPayload{Path: "d"})
	noErr(t, perr)
	if st.Type != TypeDirectory || st.Size != 0 {
		t.Fatalf("stat d = %+v", st)
	}
	st, perr = r.Stat(bg, StatPayload{Path: "."})
	noErr(t, perr)
	if st.Type != TypeDirectory {
		t.Fatalf("stat . = %+v", st)
	}
	_, perr = r.Stat(bg, StatPayload{Path: "l"})
	wantCode(t, perr, CodePathSymlink)
	_, perr = r.Stat(bg, StatPayload{Path: "fifo"})
	wantCode(t, perr, CodeUnsupportedFileType)
	_, perr = r.Stat(bg, StatPayload{Path: "nope"})
	wantCode(t, perr, CodeNotFound)
	_, perr = r.Stat(bg, StatPayload{Path: "f/x"})
	wantCode(t, perr, CodeNotADirectory)
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, "b=12", "a/", "c=1", "B=", "l -> c", "dl -> a", "bad\nname=", "back\\slash=", "bad\xffutf=", "é=x")
	mustDo(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
	mustDo(t, err)
	defer ln.Close()
	r := openRoot(t, dir)
	res, perr := r.List(bg, ListPayload{Path: "."})
	noErr(t, perr)
	var names []string
	for _, e := range res.Entries {
		names = append(names, e.Name+":"+e.Type)
		if !modifiedAtRE.MatchString(e.ModifiedAt) {
			t.Errorf("entry %q modifiedAt %q", e.Name, e.ModifiedAt)
		}
	}
	if got, want := strings.Join(names, ","), "B:file,a:directory,b:file,c:file,é:file"; got != want {
		t.Fatalf("entries = %s, want %s", got, want)
	}
	if res.Truncated || res.Entries[2].Size != 2 || res.Entries[1].Size != 0 {
		t.Fatalf("list = %+v", res)
	}
	res, perr = r.List(bg, ListPayload{Path: ".", MaxEntries: ptr(2)})
	noErr(t, perr)
	if len(res.Entries) != 2 || !res.Truncated {
		t.Fatalf("maxEntries 2: %+v", res)
	}
	res, perr = r.List(bg, ListPayload{Path: ".", MaxEntries: ptr(5)})
	noErr(t, perr)
	if len(res.Entries) != 5 || res.Truncated {
		t.Fatalf("maxEntries 5: %+v", res)
	}
	_, perr = r.List(bg, ListPayload{Path: ".", MaxEntries: ptr(0)})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.List(bg, ListPayload{Path: ".", MaxEntries: ptr(10001)})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.List(bg, ListPayload{Path: "b"})
	wantCode(t, perr, CodeNotADirectory)
	_, perr = r.List(bg, ListPayload{Path: "fifo"})
	wantCode(t, perr, CodeUnsupportedFileType)
	_, perr = r.List(bg, ListPayload{Path: "dl"})
	wantCode(t, perr, CodePathSymlink)
}

func TestListResponseBudget(t *testing.T) {
	dir := t.TempDir()
	for i := range 300 {
		makeTree(t, dir, strings.Repeat("n", 40)+string(rune('a'+i%26))+strings.Repeat("\"", i%5)+"-"+strconv.Itoa(i)+"=x")
	}
	r, err := OpenOptions(dir, Options{MaxResponseBytes: 4096})
	mustDo(t, err)
	defer r.Close()
	res, perr := r.List(bg, ListPayload{Path: "."})
	noErr(t, perr)
	if !res.Truncated || len(res.Entries) == 0 {
		t.Fatalf("want a truncated, non-empty list, got %d entries truncated=%v", len(res.Entries), res.Truncated)
	}
	if n := encodedSize(t, res); n > 4096 {
		t.Fatalf("encoded list is %d bytes, budget 4096", n)
	}
	// One more entry would not have fit.
	res.Entries = append(res.Entries, res.Entries[len(res.Entries)-1])
	if n := encodedSize(t, res); n <= 4096 {
		t.Fatalf("list stopped early: %d bytes with one more entry", n)
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	text := "héllo wörld €uro 𝄞 end"
	makeTree(t, dir, "f="+text, "bin=a\xffb", "d/", "empty=")
	r := openRoot(t, dir)
	read := func(off, max int64) (*ReadResult, *protocol.Error) {
		p := ReadPayload{Path: "f"}
		if off >= 0 {
			p.Offset = &off
		}
		if max > 0 {
			p.MaxBytes = &max
		}
		return r.Read(bg, p)
	}
	res, perr := read(-1, -1)
	noErr(t, perr)
	if res.Content != text || !res.EOF || res.BytesRead != int64(len(text)) {
		t.Fatalf("whole read = %+v", res)
	}
	// Reassemble through windows of every size; each window ends on a rune boundary.
	for w := int64(4); w <= 9; w++ {
		var got strings.Builder
		off := int64(0)
		for {
			res, perr := read(off, w)
			noErr(t, perr)
			got.WriteString(res.Content)
			off += res.BytesRead
			if res.EOF {
				break
			}
			if res.BytesRead == 0 {
				t.Fatal("empty window without eof")
			}
		}
		if got.String() != text {
			t.Fatalf("window %d: %q", w, got.String())
		}
	}
	_, perr = read(2, 10) // inside "é"
	wantCode(t, perr, CodeInvalidArgument)
	res, perr = read(int64(len(text)), 10)
	noErr(t, perr)
	if res.Content != "" || !res.EOF {
		t.Fatalf("read at end = %+v", res)
	}
	res, perr = read(1000, 10)
	noErr(t, perr)
	if !res.EOF || res.BytesRead != 0 {
		t.Fatalf("read past end = %+v", res)
	}
	clef := int64(strings.Index(text, "𝄞"))
	_, perr = read(clef, 2) // the 4-byte character does not fit
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = read(0, 0x400001)
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Read(bg, ReadPayload{Path: "f", Offset: ptr(int64(-1))})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Read(bg, ReadPayload{Path: "f", MaxBytes: ptr(int64(0))})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Read(bg, ReadPayload{Path: "bin"})
	wantCode(t, perr, CodeNotUTF8)
	res, perr = r.Read(bg, ReadPayload{Path: "bin", MaxBytes: ptr(int64(1))})
	noErr(t, perr) // only the window is checked
	if res.Content != "a" || res.EOF {
		t.Fatalf("read bin[0:1] = %+v", res)
	}
	_, perr = r.Read(bg, ReadPayload{Path: "bin", Offset: ptr(int64(2))})
	noErr(t, perr)
	_, perr = r.Read(bg, ReadPayload{Path: "bin", Offset: ptr(int64(1))})
	wantCode(t, perr, CodeNotUTF8) // a stray byte, not the middle of a character
	_, perr = r.Read(bg, ReadPayload{Path: "d"})
	wantCode(t, perr, CodeNotAFile)
	res, perr = r.Read(bg, ReadPayload{Path: "empty"})
	noErr(t, perr)
	if res.Content != "" || !res.EOF {
		t.Fatalf("read empty = %+v", res)
	}
}

func TestReadResponseBudget(t *testing.T) {
	dir := t.TempDir()
	content := strings.Repeat("\x01a\"\u2028", 2000) // costs 6+1+2+6 per 8 bytes
	makeTree(t, dir, "f="+content)
	r, err := OpenOptions(dir, Options{MaxResponseBytes: 1024})
	mustDo(t, err)
	defer r.Close()
	res, perr := r.Read(bg, ReadPayload{Path: "f"})
	noErr(t, perr)
	if res.EOF || res.BytesRead == 0 || res.Content != content[:res.BytesRead] {
		t.Fatalf("budgeted read = eof %v bytesRead %d", res.EOF, res.BytesRead)
	}
	if n := encodedSize(t, res); n > 1024 || n < 1000 {
		t.Fatalf("encoded read is %d bytes, budget 1024", n)
	}
	tiny, err := OpenOptions(dir, Options{MaxResponseBytes: 40})
	mustDo(t, err)
	defer tiny.Close()
	_, perr = tiny.Read(bg, ReadPayload{Path: "f"})
	wantCode(t, perr, CodeTooLarge)
}

func TestJSONCostMatchesEncoder(t *testing.T) {
	var all []rune
	for c := rune(0); c < 0x100; c++ {
		all = append(all, c)
	}
	all = append(all, 0x2028, 0x2029, 0xfffd, 0x10ffff, '€')
	for _, c := range all {
		s := string(c) + "x"
		if got, want := jsonStringCost(s), encodedSize(t, s); got != want {
			t.Errorf("cost of %q = %d, encoder %d", s, got, want)
		}
	}
	for _, v := range []int64{0, 9, 10, 99, 12345678901} {
		if got, want := intCost(v), encodedSize(t, v); got != want {
			t.Errorf("intCost(%d) = %d, want %d", v, got, want)
		}
	}
}

// TestValidJSONPrefix checks the one-pass check and cut of fs.read against the two passes it
// replaces: utf8.Valid, then jsonPrefix over valid text.
func TestValidJSONPrefix(t *testing.T) {
	texts := []string{"", "x", "plain ascii text, long enough for words", "a\"b\\c\nd\x01e", "héllo wörld €€€ \U0001F600",
		"\u2028\u2029 separators", "bad \xff byte", "cut \xe2\x82", strings.Repeat("0123456\n", 9) + "\xc3(",
		strings.Repeat("é", 20), strings.Repeat("\x01", 20)}
	for _, s := range texts {
		for budget := 0; budget <= 6*len(s)+3; budget++ {
			k, valid := validJSONPrefix([]byte(s), budget)
			if want := utf8.ValidString(s); (valid && utf8.ValidString(s[k:])) != want {
				t.Fatalf("%q budget %d: valid %v at %d, want %v", s, budget, valid, k, want)
			} else if !want {
				continue
			}
			if _, want := jsonPrefix([]byte(s), budget); k != want {
				t.Fatalf("%q budget %d: prefix %d, want %d", s, budget, k, want)
			}
		}
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, "old=old", "d/", "file=x", "l -> old")
	mustDo(t, os.Chmod(filepath.Join(dir, "old"), 0o640))
	r := openRoot(t, dir)
	res, perr := r.Write(bg, WritePayload{Path: "new", Content: "héllo"})
	noErr(t, perr)
	if !res.Created || res.BytesWritten != 6 || res.Digest != sum("héllo") || readFile(t, filepath.Join(dir, "new")) != "héllo" {
		t.Fatalf("write new = %+v", res)
	}
	fi, err := os.Stat(filepath.Join(dir, "new"))
	mustDo(t, err)
	if mask := syscall.Umask(0); true {
		syscall.Umask(mask)
		if fi.Mode().Perm() != os.FileMode(0o644&^mask) {
			t.Fatalf("new file mode %v, umask %o", fi.Mode(), mask)
		}
	}
	_, perr = r.Write(bg, WritePayload{Path: "old", Content: "new"})
	wantCode(t, perr, CodeFileExists)
	res, perr = r.Write(bg, WritePayload{Path: "old", Content: "new", Overwrite: ptr(true)})
	noErr(t, perr)
	if res.Created || readFile(t, filepath.Join(dir, "old")) != "new" {
		t.Fatalf("overwrite = %+v", res)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "old")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode not preserved: %v", fi.Mode())
	}
	_, perr = r.Write(bg, WritePayload{Path: "missing", Content: "x", Create: ptr(false), Overwrite: ptr(true)})
	wantCode(t, perr, CodeNotFound)
	_, perr = r.Write(bg, WritePayload{Path: "nodir/x", Content: "x"})
	wantCode(t, perr, CodeParentMissing)
	_, perr = r.Write(bg, WritePayload{Path: "file/x", Content: "x"})
	wantCode(t, perr, CodeNotADirectory)
	_, perr = r.Write(bg, WritePayload{Path: "d", Content: "x", Overwrite: ptr(true)})
	wantCode(t, perr, CodeNotAFile)
	_, perr = r.Write(bg, WritePayload{Path: ".", Content: "x"})
	wantCode(t, perr, CodeNotAFile)
	_, perr = r.Write(bg, WritePayload{Path: "l", Content: "x", Overwrite: ptr(true)})
	wantCode(t, perr, CodePathSymlink)
	// Digest guard.
	_, perr = r.Write(bg, WritePayload{Path: "old", Content: "guarded", Overwrite: ptr(true), ExpectedDigest: ptr(sum("wrong"))})
	wantCode(t, perr, CodeDigestMismatch)
	if readFile(t, filepath.Join(dir, "old")) != "new" {
		t.Fatal("digest_mismatch wrote")
	}
	_, perr = r.Write(bg, WritePayload{Path: "old", Content: "guarded", Overwrite: ptr(true), ExpectedDigest: ptr(sum("new"))})
	noErr(t, perr)
	_, perr = r.Write(bg, WritePayload{Path: "fresh", Content: "x", ExpectedDigest: ptr(sum(""))})
	wantCode(t, perr, CodeDigestMismatch)
	_, perr = r.Write(bg, WritePayload{Path: "old", Content: "x", Overwrite: ptr(true), ExpectedDigest: ptr("ABC")})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Write(bg, WritePayload{Path: "big", Content: strings.Repeat("x", MaxContentBytes+1)})
	wantCode(t, perr, CodeTooLarge)
	_, perr = r.Write(bg, WritePayload{Path: "bad", Content: "\xff"})
	wantCode(t, perr, CodeNotUTF8)
	res, perr = r.Write(bg, WritePayload{Path: "d/empty", Content: ""})
	noErr(t, perr)
	if res.Digest != sum("") || res.BytesWritten != 0 {
		t.Fatalf("empty write = %+v", res)
	}
	assertNoTemps(t, dir)
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(fi.Name(), tempPrefix) {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

func TestEdit(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, "f=alpha beta gamma", "aaa=aaa", "bin=\xff", "d/")
	r := openRoot(t, dir)
	res, perr := r.Edit(bg, EditPayload{Path: "f", Edits: []Edit{{"beta", "BETA"}, {"BETA gamma", "$1 done"}}})
	noErr(t, perr)
	if got := readFile(t, filepath.Join(dir, "f")); got != "alpha $1 done" || res.Replacements != 2 || res.Digest != sum(got) {
		t.Fatalf("edit = %+v, file %q", res, got)
	}
	_, perr = r.Edit(bg, EditPayload{Path: "f", Edits: []Edit{{"alpha", "A"}, {"zzz", "y"}}})
	wantCode(t, perr, CodeEditNotFound)
	if perr.Details[DetailEdit] != 1 || readFile(t, filepath.Join(dir, "f")) != "alpha $1 done" {
		t.Fatalf("edit_not_found: %v; file changed", perr.Details)
	}
	_, perr = r.Edit(bg, EditPayload{Path: "aaa", Edits: []Edit{{"aa", "b"}}}) // overlapping occurrences
	wantCode(t, perr, CodeEditAmbiguous)
	_, perr = r.Edit(bg, EditPayload{Path: "f", Edits: []Edit{{"a", "b"}}})
	wantCode(t, perr, CodeEditAmbiguous)
	if perr.Details[DetailEdit] != 0 {
		t.Fatalf("details %v", perr.Details)
	}
	_, perr = r.Edit(bg, EditPayload{Path: "f", Edits: []Edit{{"done", "x"}}, ExpectedDigest: ptr(sum("other"))})
	wantCode(t, perr, CodeDigestMismatch)
	_, perr = r.Edit(bg, EditPayload{Path: "f", Edits: []Edit{{"done", "x"}}, ExpectedDigest: ptr(sum("alpha $1 done"))})
	noErr(t, perr)
	_, perr = r.Edit(bg, EditPayload{Path: "f", Edits: []Edit{{"", "x"}}})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Edit(bg, EditPayload{Path: "f"})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Edit(bg, EditPayload{Path: "f", Edits: make([]Edit, MaxEdits+1)})
	wantCode(t, perr, CodeInvalidArgument)
	_, perr = r.Edit(bg, EditPayload{Path: "bin", Edits: []Edit{{"x", "y"}}})
	wantCode(t, perr, CodeNotUTF8)
	_, perr = r.Edit(bg, EditPayload{Path: "missing", Edits: []Edit{{"x", "y"}}})
	wantCode(t, perr, CodeNotFound)
	_, perr = r.Edit(bg, EditPayload{Path: "d", Edits: []Edit{{"x", "y"}}})
	wantCode(t, perr, CodeNotAFile)
	small, err := OpenOptions(dir, Options{MaxEditFileBytes: 8})
	mustDo(t, err)
	defer small.Close()
	_, perr = small.Edit(bg, EditPayload{Path: "f", Edits: []Edit{{"alpha", "x"}}})
	wantCode(t, perr, CodeTooLarge)
	_, perr = small.Edit(bg, EditPayload{Path: "aaa", Edits: []Edit{{"aaa", "123456789"}}})
	wantCode(t, perr, CodeTooLarge)
	assertNoTemps(t, dir)
}

// TestKernelRefusesEscape bypasses lexical validation to show that the kernel alone refuses
// ".." and absolute paths beneath the root descriptor.
func TestKernelRefusesEscape(t *testing.T) {
	base := t.TempDir()
	makeTree(t, base, "root/d/f=in", "root_evil/secret=out")
	r := openRoot(t, filepath.Join(base, "root"))
	for _, p := range []string{"..", "../root_evil/secret", "/etc/passwd", "d/../../root_evil/secret", filepath.Join(base, "root_evil/secret")} {
		fd, err := openAt(r.fd, p, unix.O_RDONLY, 0)
		if err == nil {
			unix.Close(fd)
			t.Fatalf("openat2 opened %q", p)
		}
		if perr := errnoError(err, "path"); perr.Code != CodePathEscape {
			t.Errorf("%q: %v, want path_escape", p, perr)
		}
	}
}

// withOpenat2 replaces the system call for one test.
func withOpenat2(t *testing.T, fn func(int, string, *unix.OpenHow) (int, error)) {
	old := openat2
	openat2 = fn
	t.Cleanup(func() { openat2 = old })
}

func failWith(errno unix.Errno) func(int, string, *unix.OpenHow) (int, error) {
	return func(int, string, *unix.OpenHow) (int, error) { return -1, errno }
}

func TestKernelFailures(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, "f=x")
	r := openRoot(t, dir)
	cases := []struct {
		errno     unix.Errno
		code      string
		retryable bool
	}{
		{unix.ENOSYS, CodeConfinementUnavailable, false},
		{unix.EXDEV, CodePathEscape, false},
		{unix.EACCES, CodePermissionDenied, false},
		{unix.EIO, CodeIOError, false},
		{unix.EAGAIN, CodeIOError, true},
		{unix.ENAMETOOLONG, CodeInvalidPath, false},
	}
	for _, c := range cases {
		calls := 0
		withOpenat2(t, func(int, string, *unix.OpenHow) (int, error) { calls++; return -1, c.errno })
		_, perr := r.Stat(bg, StatPayload{Path: "f"})
		wantCode(t, perr, c.code)
		if perr.Retryable != c.retryable || strings.Contains(perr.Message, dir) {
			t.Errorf("%v: %+v", c.errno, perr)
		}
		if c.errno == unix.EAGAIN && calls != openat2Retries+1 {
			t.Errorf("EAGAIN: %d calls", calls)
		}
	}
	withOpenat2(t, failWith(unix.ENOSYS))
	_, err := Open(dir)
	if perr := protocol.AsError(err); perr.Code != CodeConfinementUnavailable {
		t.Fatalf("Open without openat2: %v", err)
	}
}

func TestCanceledAndClosed(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, "f=x")
	r, err := Open(dir)
	mustDo(t, err)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, perr := r.Read(ctx, ReadPayload{Path: "f"})
	wantCode(t, perr, CodeCanceled)
	_, perr = r.Search(ctx, SearchPayload{Path: ".", Query: "x"})
	wantCode(t, perr, CodeCanceled)
	mustDo(t, r.Close())
	_, perr = r.Stat(bg, StatPayload{Path: "f"})
	wantCode(t, perr, CodeRootClosed)
	_, perr = r.Write(bg, WritePayload{Path: "g", Content: "x"})
	wantCode(t, perr, CodeRootClosed)
}

// TestHardLinkDocumentedBehaviour pins the documented hard-link behaviour: a link to an outside
// file is read as an ordinary file, and a write through it breaks the link without modifying
// the outside file.
func TestHardLinkDocumentedBehaviour(t *testing.T) {
	base := t.TempDir()
	makeTree(t, base, "root/", "outside=OUTSIDE")
	mustDo(t, os.Link(filepath.Join(base, "outside"), filepath.Join(base, "root/hl")))
	r := openRoot(t, filepath.Join(base, "root"))
	res, perr := r.Read(bg, ReadPayload{Path: "hl"})
	noErr(t, perr)
	if res.Content != "OUTSIDE" {
		t.Fatalf("read through a hard link = %q", res.Content)
	}
	_, perr = r.Write(bg, WritePayload{Path: "hl", Content: "mine", Overwrite: ptr(true)})
	noErr(t, perr)
	_, perr = r.Edit(bg, EditPayload{Path: "hl", Edits: []Edit{{"mine", "ours"}}})
	noErr(t, perr)
	if readFile(t, filepath.Join(base, "outside")) != "OUTSIDE" || readFile(t, filepath.Join(base, "root/hl")) != "ours" {
		t.Fatal("a write through a hard link modified the outside file")
	}
}

func TestWritesSerialized(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, "counter=0")
	r := openRoot(t, dir)
	const n = 20
	done := make(chan struct{})
	for range n {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				cur, perr := r.Read(bg, ReadPayload{Path: "counter"})
				if perr != nil && perr.Retryable && perr.Code == CodeIOError {
					continue // a write's rename landed between the read's two opens
				}
				if perr != nil {
					t.Error(perr)
					return
				}
				_, perr = r.Write(bg, WritePayload{Path: "counter", Content: cur.Content + "+", Overwrite: ptr(true), ExpectedDigest: ptr(sum(cur.Content))})
				if perr == nil {
					return
				}
				if perr.Code != CodeDigestMismatch {
					t.Error(perr)
					return
				}
			}
		}()
	}
	for range n {
		<-done
	}
	if got := readFile(t, filepath.Join(dir, "counter")); got != "0"+strings.Repeat("+", n) {
		t.Fatalf("lost updates: %q", got)
	}
	if len(r.locks) != 0 {
		t.Fatalf("lock map not emptied: %d", len(r.locks))
	}
}

// TestReadReleaseReuse: the content of a read with a large maxBytes shares a pooled buffer; after Release the
// result no longer shows it, and the next reads, which may reuse the buffer, see their own
// content, concurrently too.
func TestReadReleaseReuse(t *testing.T) {
	dir := t.TempDir()
	const size = 1000 // the buffer's size follows maxBytes, not the file's
	for i, c := range []string{"a", "b", "c", "d"} {
		mustDo(t, os.WriteFile(filepath.Join(dir, c), []byte(strings.Repeat(c, size-i)), 0o600))
	}
	r := openRoot(t, dir)
	maxBytes := int64(minPooledRead)
	first, perr := r.Read(bg, ReadPayload{Path: "a", MaxBytes: &maxBytes})
	noErr(t, perr)
	if first.Content != strings.Repeat("a", size) || first.buf == nil {
		t.Fatalf("first read: %d bytes, pooled %v", len(first.Content), first.buf != nil)
	}
	first.Release()
	first.Release()
	if first.Content != "" {
		t.Fatal("content still set after Release")
	}
	var wg sync.WaitGroup
	for i, c := range []string{"a", "b", "c", "d"} {
		wg.Go(func() {
			for range 20 {
				res, perr := r.Read(bg, ReadPayload{Path: c, MaxBytes: &maxBytes})
				if perr != nil {
					t.Error(perr)
					return
				}
				if res.Content != strings.Repeat(c, size-i) {
					t.Errorf("read of %s returned other content", c)
				}
				res.Release()
			}
		})
	}
	wg.Wait()
}
