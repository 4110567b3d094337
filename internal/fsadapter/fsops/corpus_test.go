//go:build linux

package fsops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"golang.org/x/sys/unix"
)

// corpusCase is one adversarial path. Escape cases target the files outside the root (the
// sibling "root_evil" and "outside" trees), which must stay untouched and unread.
type corpusCase struct {
	path  string
	want  string // code of fs.stat, fs.read, fs.list and fs.search
	mut   string // code of fs.edit and fs.write when it differs from want
	write string // code of fs.write when it differs from mut; "created" for a new file inside
}

const created = "created"

// corpusTree builds base/{root,root_evil,outside} and returns the root, the absolute paths used
// by cases and the secret that outside files hold.
func corpusTree(t testing.TB) (base, root, secret string, cleanup func()) {
	base = t.TempDir()
	var rnd [8]byte
	rand.Read(rnd[:])
	secret = "OUTSIDE-SECRET-" + hex.EncodeToString(rnd[:])
	root = filepath.Join(base, "root")
	makeTree(t, base,
		"root_evil/secret="+secret, "outside/secret="+secret, "outside/dir/secret="+secret,
		"root/file.txt=inside", "root/sub/f=inside sub", "root/sub/deeper/g=inside deeper",
		"root/link_out_abs -> "+filepath.Join(base, "outside/secret"),
		"root/link_out_rel -> ../outside/secret",
		"root/link_evil -> ../root_evil",
		"root/link_evil_abs -> "+filepath.Join(base, "root_evil"),
		"root/link_in -> file.txt",
		"root/link_in_abs -> "+filepath.Join(root, "file.txt"),
		"root/dirlink_in -> sub",
		"root/dirlink_out -> ../outside",
		"root/dangling_out -> ../outside/created_through_link",
		"root/dangling_abs -> "+filepath.Join(base, "outside/created_abs"),
		"root/dangling_in -> nothere",
		"root/loop -> loop",
		"root/chain1 -> chain2", "root/chain2 -> link_out_rel",
		"root/sub/parent_link -> ..",
		"root/sub/up2 -> ../..",
		"root/proc_link -> /proc/self/root",
		"root/magic -> /proc/self/fd/0",
	)
	mustDo(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	ln, err := net.Listen("unix", filepath.Join(root, "sock"))
	mustDo(t, err)
	devices := true
	for name, dev := range map[string]int{"dev_null": int(unix.Mkdev(1, 3)), "dev_zero": int(unix.Mkdev(1, 5))} {
		if err := unix.Mknod(filepath.Join(root, name), unix.S_IFCHR|0o666, dev); err != nil {
			devices = false
		}
	}
	if !devices {
		t.Log("mknod not permitted: device-node cases are skipped")
	}
	return base, root, secret, func() { ln.Close() }
}

func corpusCases(base, root string) []corpusCase {
	var cs []corpusCase
	add := func(want, mut, write string, paths ...string) {
		for _, p := range paths {
			cs = append(cs, corpusCase{path: p, want: want, mut: mut, write: write})
		}
	}
	// ".." in every position, and other lexical escapes.
	add(CodeInvalidPath, "", "",
		"..", "../", "../outside/secret", "../root_evil/secret", "../root_evil", "../root/file.txt",
		"sub/..", "sub/../..", "sub/../../outside/secret", "sub/deeper/../../../outside/secret",
		"./..", "..//outside/secret", "file.txt/..", ".../..", "../../../../../../../../etc/passwd",
		"sub/../file.txt", "sub/deeper/..", "../"+filepath.Base(root)+"_evil/secret", "../..", "../../..",
		// Absolute paths, including the root's own absolute name and the sibling prefix.
		"/", "/etc/passwd", filepath.Join(base, "outside/secret"), filepath.Join(root, "file.txt"),
		root, root+"_evil/secret", filepath.Join(base, "root_evil/secret"), "//etc/passwd", "/..",
		"/proc/self/root/etc/passwd",
		// Backslashes.
		"..\\outside\\secret", "sub\\f", "\\", "..\\..\\", "file.txt\\", "\\etc\\passwd",
		// Control characters and NUL.
		"\x00", "file.txt\x00", "file.txt\x00../outside/secret", "\n", "sub\n/f", "\t", "\x1b[31m",
		"\x7f", "file\u0085", "file.txt\r", "sub/f\x00",
		// Overlong and non-canonical forms.
		strings.Repeat("a", MaxPathBytes+1), strings.Repeat("a/", MaxPathBytes/2+1),
		strings.Repeat("../", 1400), "", ".//", "./file.txt", "sub//f", "sub/", "sub/.", "sub/./f",
		"./", "//", "file.txt/", "./sub/../file.txt", "sub/f/",
		// Invalid UTF-8, including an overlong encoding of "." ("\xc0\xae").
		"\xc0\xae\xc0\xae/outside/secret", "\xff", "sub/\xfe",
	)
	// A component longer than NAME_MAX.
	add(CodeInvalidPath, "", "", strings.Repeat("n", 256), "sub/"+strings.Repeat("n", 300))
	// Look-alikes are literal names: absent, and creatable inside the root.
	add(CodeNotFound, "", created,
		"\u2025", "．．", "\uff0e", "%2e%2e", "..%2f", "%2e%2e%2f", "\u2024\u2024", ". .", ".. ", " ..",
		"..\u200b", "\u0338..", "\u2026", "....", "...", "..a", "a..", "%2f", "root_evil")
	add(CodeNotFound, CodeParentMissing, "",
		"\u2025/outside/secret", "．．/．．/outside/secret", "%2e%2e/%2e%2e/outside/secret",
		"root_evil/secret", "\u2026/secret", "nothere/x")
	// Symbolic links anywhere in the path, to outside or inside, are refused.
	add(CodePathSymlink, "", "",
		"link_out_abs", "link_out_rel", "link_evil", "link_evil/secret", "link_evil_abs",
		"link_evil_abs/secret", "link_in", "link_in_abs", "dirlink_in", "dirlink_in/f",
		"dirlink_out", "dirlink_out/secret", "dirlink_out/dir/secret", "dangling_out",
		"dangling_abs", "dangling_in", "loop", "chain1", "chain2", "sub/parent_link",
		"sub/parent_link/file.txt", "sub/parent_link/link_out_rel", "sub/up2", "sub/up2/outside/secret",
		"sub/up2/root_evil/secret", "proc_link", "proc_link/etc/passwd", "magic")
	// Devices, FIFOs and sockets are never opened.
	add(CodeUnsupportedFileType, "", "", "fifo", "sock", "dev_null", "dev_zero")
	add(CodeNotADirectory, "", "", "fifo/x", "file.txt/x", "dev_null/x", "sock/x")
	return cs
}

// snapshot records every name, mode, size, mtime and content under dir.
func snapshot(t testing.TB, dir string) map[string]string {
	m := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(p)
		mustDo(t, err)
		v := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			v += " " + readFile(t, p)
		}
		m[p] = v
		return nil
	})
	return m
}

// opDeadline bounds one corpus operation: generous for a loaded machine, and a blocked FIFO
// open would never return at all.
const opDeadline = 10 * time.Second

// runBounded runs fn and fails the test if it does not return within the deadline (a FIFO
// opened for reading would block).
func runBounded(t *testing.T, what string, fn func() (any, *protocol.Error)) (any, *protocol.Error) {
	type out struct {
		v    any
		perr *protocol.Error
	}
	ch := make(chan out, 1)
	go func() { v, perr := fn(); ch <- out{v, perr} }()
	select {
	case o := <-ch:
		return o.v, o.perr
	case <-time.After(opDeadline):
		t.Fatalf("%s did not return", what)
		return nil, nil
	}
}

func TestTraversalCorpus(t *testing.T) {
	base, root, secret, cleanup := corpusTree(t)
	defer cleanup()
	cases := corpusCases(base, root)
	if len(cases) < 100 {
		t.Fatalf("corpus has %d cases, want at least 100", len(cases))
	}
	outsideBefore := snapshot(t, filepath.Join(base, "outside"))
	evilBefore := snapshot(t, filepath.Join(base, "root_evil"))
	baseEntries, _ := os.ReadDir(base)
	r := openRoot(t, root)
	ctx := context.Background()

	ran := 0
	for i, c := range cases {
		if strings.HasPrefix(c.path, "dev_") {
			first, _, _ := strings.Cut(c.path, "/")
			if _, err := os.Lstat(filepath.Join(root, first)); err != nil {
				continue
			}
		}
		ran++
		mut := c.mut
		if mut == "" {
			mut = c.want
		}
		write := c.write
		if write == "" {
			write = mut
		}
		ops := []struct {
			name string
			want string
			fn   func() (any, *protocol.Error)
		}{
			{"stat", c.want, func() (any, *protocol.Error) { return r.Stat(ctx, StatPayload{Path: c.path}) }},
			{"read", c.want, func() (any, *protocol.Error) { return r.Read(ctx, ReadPayload{Path: c.path}) }},
			{"list", c.want, func() (any, *protocol.Error) { return r.List(ctx, ListPayload{Path: c.path}) }},
			{"search", c.want, func() (any, *protocol.Error) {
				return r.Search(ctx, SearchPayload{Path: c.path, Query: "OUTSIDE-SECRET"})
			}},
			{"edit", mut, func() (any, *protocol.Error) {
				return r.Edit(ctx, EditPayload{Path: c.path, Edits: []Edit{{OldText: "OUTSIDE", NewText: "pwned"}}})
			}},
			{"write", write, func() (any, *protocol.Error) {
				return r.Write(ctx, WritePayload{Path: c.path, Content: "pwned", Overwrite: ptr(true)})
			}},
		}
		for _, op := range ops {
			v, perr := runBounded(t, fmt.Sprintf("case %d %s %q", i, op.name, c.path), op.fn)
			label := fmt.Sprintf("case %d %s %q", i, op.name, c.path)
			if op.want == created {
				if perr != nil {
					t.Errorf("%s: %v, want a new file inside the root", label, perr)
					continue
				}
				if got := readFile(t, filepath.Join(root, c.path)); got != "pwned" {
					t.Errorf("%s: created file holds %q", label, got)
				}
				mustDo(t, os.Remove(filepath.Join(root, c.path)))
				continue
			}
			if perr == nil || perr.Code != op.want {
				t.Errorf("%s: got %v, want %s", label, perr, op.want)
			} else {
				sawCode(perr.Code)
			}
			if perr != nil && strings.Contains(perr.Error(), base) {
				t.Errorf("%s: error names the root: %v", label, perr)
			}
			if b, _ := json.Marshal(v); strings.Contains(string(b), secret) {
				t.Errorf("%s: result carries the outside secret", label)
			}
		}
	}

	t.Logf("%d cases × 6 operations", ran)

	// Nothing outside was touched, read through, or created.
	for name, before := range map[string]map[string]string{"outside": outsideBefore, "root_evil": evilBefore} {
		after := snapshot(t, filepath.Join(base, name))
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("%s changed:\nbefore %v\nafter  %v", name, before, after)
		}
	}
	if now, _ := os.ReadDir(base); len(now) != len(baseEntries) {
		t.Errorf("entries appeared next to the root: %v", now)
	}
	// And a search of the whole root never reads the secret through links or specials.
	res, perr := r.Search(ctx, SearchPayload{Path: ".", Query: "OUTSIDE-SECRET"})
	noErr(t, perr)
	if len(res.Matches) != 0 {
		t.Fatalf("search found the outside secret: %+v", res.Matches)
	}
	list, perr := r.List(ctx, ListPayload{Path: "."})
	noErr(t, perr)
	for _, e := range list.Entries {
		if e.Type == TypeFile && e.Name != "file.txt" {
			t.Errorf("list reports %q as a file", e.Name)
		}
	}
	assertNoTemps(t, root)
}
