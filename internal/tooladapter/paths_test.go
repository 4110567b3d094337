package tooladapter

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateRelativePath(t *testing.T) {
	valid := []string{".", "a", "src/protocol.ts", "a/b/c", "...", "a/...", ".hidden", "a/.b", "dir with space/ü.txt", "a..b", "..a", strings.Repeat("a", 4096)}
	for _, p := range valid {
		if e := ValidateRelativePath(p); e != nil {
			t.Errorf("%.40q: %v", p, e)
		}
	}
	invalid := []struct{ p, reason string }{
		{"", reasonEmpty},
		{strings.Repeat("a", 4097), reasonTooLong},
		{strings.Repeat("é", 2049), reasonTooLong},
		{"a\xffb", reasonNotUTF8},
		{"/etc/passwd", reasonAbsolute},
		{"/", reasonAbsolute},
		{"src\\file", reasonBackslash},
		{"..\\secret", reasonBackslash},
		{"x\x00y", reasonControl},
		{"a\nb", reasonControl},
		{"a\tb", reasonControl},
		{"a\x7fb", reasonControl},
		{"a\u0085b", reasonControl},
		{"..", reasonDotDot},
		{"../secret", reasonDotDot},
		{"src/../secret", reasonDotDot},
		{"src/..", reasonDotDot},
		{"src//file", reasonNonCanonical},
		{"./x", reasonNonCanonical},
		{"a/./b", reasonNonCanonical},
		{"a/.", reasonNonCanonical},
		{"a/", reasonNonCanonical},
		{"./", reasonNonCanonical},
		{"//", reasonAbsolute},
	}
	for _, tt := range invalid {
		e := ValidateRelativePath(tt.p)
		if e == nil {
			t.Errorf("%.40q accepted", tt.p)
			continue
		}
		if e.Code != CodeInvalidPath || e.Details[DetailReason] != tt.reason {
			t.Errorf("%.40q: %v %v, want %s", tt.p, e, e.Details, tt.reason)
		}
	}
}

// pathTree builds the fixture of the confinement corpus:
//
//	base/outside/secret          must never be reachable
//	base/root/                   the canonical session root
//	  file.txt  src/a.go  src/deep/x/y.txt  dir with space/ü.txt
//	  link-file -> file.txt      link-dir -> src      link-out -> /etc
//	  link-up -> ..              src/link-parent -> ..   dangling -> nowhere
//	  link-abs-in -> <root>/src  (absolute, but inside: still refused)
func pathTree(t *testing.T) (root, base string) {
	t.Helper()
	base = shortRoot(t)
	root = filepath.Join(base, "root")
	for _, d := range []string{"outside", "root/src/deep/x", "root/dir with space"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"outside/secret", "root/file.txt", "root/src/a.go", "root/src/deep/x/y.txt", "root/dir with space/ü.txt"} {
		if err := os.WriteFile(filepath.Join(base, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"link-file": "file.txt", "link-dir": "src", "link-out": "/etc", "link-up": "..",
		"src/link-parent": "..", "dangling": "nowhere", "link-abs-in": filepath.Join(root, "src"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root, base
}

// TestResolveUnderCorpus is the traversal and symlink corpus. Escape cases name the file they
// aim at (target); the walk reads nothing, so the target only documents the attack.
func TestResolveUnderCorpus(t *testing.T) {
	root, base := pathTree(t)
	tests := []struct {
		path   string
		write  bool
		code   string // "" = allowed
		target string
	}{
		{".", false, "", ""},
		{"src", false, "", ""},
		{"src/a.go", false, "", ""},
		{"file.txt", false, "", ""},
		{"src/deep", false, "", ""},
		{"src/deep/x", false, "", ""},
		{"src/deep/x/y.txt", false, "", ""},
		{"dir with space/ü.txt", false, "", ""},
		{"...", true, "", ""},
		{"missing", false, CodePathUnavailable, ""},
		{"missing", true, "", ""},
		{"src/new.go", true, "", ""},
		{"src/deep/x/new.txt", true, "", ""},
		{"missing/child", true, CodePathUnavailable, ""},
		{"missing/child", false, CodePathUnavailable, ""},
		{"src/missing/child.go", true, CodePathUnavailable, ""},
		{"file.txt/child", false, CodePathUnavailable, ""},
		{"file.txt/child", true, CodePathUnavailable, ""},
		{"src/deep/x/y.txt/z", false, CodePathUnavailable, ""},
		{"link-file", false, CodePathSymlink, "root/file.txt"},
		{"link-dir", false, CodePathSymlink, "root/src"},
		{"link-dir/a.go", false, CodePathSymlink, "root/src/a.go"},
		{"link-out/passwd", false, CodePathSymlink, "/etc/passwd"},
		{"link-out", true, CodePathSymlink, "/etc"},
		{"link-up/outside/secret", false, CodePathSymlink, "outside/secret"},
		{"src/link-parent/file.txt", false, CodePathSymlink, "root/file.txt"},
		{"src/link-parent/link-up/outside/secret", false, CodePathSymlink, "outside/secret"},
		{"dangling", false, CodePathSymlink, "root/nowhere"},
		{"dangling", true, CodePathSymlink, "root/nowhere"},
		{"link-abs-in/a.go", false, CodePathSymlink, "root/src/a.go"},
		{"..", false, CodePathInvalid, "base"},
		{"../outside/secret", false, CodePathInvalid, "outside/secret"},
		{"src/../../outside/secret", false, CodePathInvalid, "outside/secret"},
		{"src/deep/../../..", false, CodePathInvalid, "base"},
		{"../root/file.txt", true, CodePathInvalid, "root/file.txt"},
		{"src/..", false, CodeInvalidPath, ""},
		{"src/../file.txt", false, CodeInvalidPath, ""},
		{"/etc/passwd", false, CodeInvalidPath, "/etc/passwd"},
		{"", false, CodeInvalidPath, ""},
		{"src//a.go", false, CodeInvalidPath, ""},
		{"./src", false, CodeInvalidPath, ""},
		{"src/", false, CodeInvalidPath, ""},
		{"src/./a.go", false, CodeInvalidPath, ""},
		{"src\\a.go", false, CodeInvalidPath, ""},
		{"..\\..\\outside\\secret", false, CodeInvalidPath, "outside/secret"},
		{"x\x00y", false, CodeInvalidPath, ""},
		{"a\nb", true, CodeInvalidPath, ""},
		{"\xff", false, CodeInvalidPath, ""},
		{strings.Repeat("a/", 2048) + "b", false, CodeInvalidPath, ""},
	}
	if len(tests) < 40 {
		t.Fatalf("corpus has %d cases", len(tests))
	}
	for _, tt := range tests {
		e := ResolveUnder(root, tt.path, tt.write)
		got := ""
		if e != nil {
			got = e.Code
			if strings.Contains(errorTexts(e), base) {
				t.Errorf("%.40q: error quotes the root: %v", tt.path, e)
			}
		}
		if got != tt.code {
			t.Errorf("ResolveUnder(%.40q, write=%v) = %v, want %q (target %s)", tt.path, tt.write, e, tt.code, tt.target)
		}
	}
	if b, err := os.ReadFile(filepath.Join(base, "outside/secret")); err != nil || string(b) != "x" {
		t.Fatal("the outside file changed")
	}
	for _, bad := range []string{"root", root + "/", filepath.Join(root, "file.txt"), filepath.Join(root, "link-dir"), filepath.Join(base, "nope")} {
		if e := ResolveUnder(bad, "src", false); e == nil || e.Code != CodeRootInvalid {
			t.Errorf("root %q: %v", bad, e)
		}
	}
}

func TestCanonicalRoot(t *testing.T) {
	root, base := pathTree(t)
	if got, e := CanonicalRoot(root); e != nil || got != root {
		t.Fatalf("CanonicalRoot(root) = %q, %v", got, e)
	}
	alias := filepath.Join(base, "alias")
	if err := os.Symlink(root, alias); err != nil {
		t.Fatal(err)
	}
	if got, e := CanonicalRoot(alias); e != nil || got != root {
		t.Fatalf("CanonicalRoot(alias) = %q, %v", got, e)
	}
	for _, bad := range []string{"relative/dir", filepath.Join(base, "missing"), filepath.Join(root, "file.txt"), filepath.Join(root, "dangling")} {
		_, e := CanonicalRoot(bad)
		wantCode(t, e, CodeRootInvalid)
		if strings.Contains(errorTexts(e), base) {
			t.Fatalf("error quotes the cwd: %v", e)
		}
	}
}

func TestCheckEndpoint(t *testing.T) {
	base := shortRoot(t)
	mkdir := func(p string, mode os.FileMode) string {
		p = filepath.Join(base, p)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	listen := func(p string, mode os.FileMode) string {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := listen(filepath.Join(mkdir("good", 0o700), "s.sock"), 0o600)
	if e := CheckEndpoint(good); e != nil {
		t.Fatal(e)
	}
	openSock := listen(filepath.Join(mkdir("opensock", 0o700), "s.sock"), 0o660)
	openDir := listen(filepath.Join(mkdir("opendir", 0o750), "s.sock"), 0o600)
	linkSock := filepath.Join(base, "good", "link.sock")
	if err := os.Symlink(good, linkSock); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(base, "linkdir")
	if err := os.Symlink(filepath.Join(base, "good"), linkDir); err != nil {
		t.Fatal(err)
	}
	nested := mkdir("nested", 0o700)
	mkdir("nested/sub", 0o700)
	listen(filepath.Join(nested, "sub", "s.sock"), 0o600)
	if err := os.Symlink(nested, filepath.Join(base, "alias")); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(base, "good", "file")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, reason string }{
		{openSock, "socket_mode"},
		{openDir, "parent_mode"},
		{linkSock, "socket_symlink"},
		{filepath.Join(linkDir, "s.sock"), "parent_symlink"},
		{filepath.Join(base, "alias", "sub", "s.sock"), "parent_not_canonical"},
		{regular, "not_socket"},
		{filepath.Join(base, "good", "missing.sock"), "socket_unavailable"},
		{filepath.Join(base, "missing", "s.sock"), "parent_unavailable"},
		{filepath.Join(regular, "s.sock"), "parent_not_directory"},
		{"relative.sock", "path_invalid"},
	}
	for _, tt := range tests {
		e := CheckEndpoint(tt.path)
		wantCode(t, e, CodeEndpointInsecure)
		if e.Details[DetailReason] != tt.reason {
			t.Errorf("%s: reason %v, want %s", tt.path, e.Details[DetailReason], tt.reason)
		}
		if strings.Contains(errorTexts(e), base) {
			t.Errorf("error quotes the path: %v", e)
		}
	}
}
