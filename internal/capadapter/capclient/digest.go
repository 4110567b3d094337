package capclient

// This file owns the executable digests of a registration: which files count, how they are
// hashed, and how a recorded set is compared with the files as they are now.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Digest roles: which file of a registration a FileDigest names.
const (
	// RoleExecutable is the registered command itself (symbolic links followed).
	RoleExecutable = "executable"
	// RoleScript is the script a known interpreter runs (see ScriptPath).
	RoleScript = "script"
)

// MaxHashedFileBytes bounds the size of a file the supervisor hashes: far above any
// interpreter or adapter binary, low enough that hashing before a start stays well under a
// second or two.
const MaxHashedFileBytes = 1 << 30

// DigestPrefixLen is how many hex digits of a digest Status shows.
const DigestPrefixLen = 12

// FileDigest is the recorded SHA-256 of one file of a registration.
type FileDigest struct {
	Role   string `json:"role"`   // RoleExecutable or RoleScript
	Path   string `json:"path"`   // absolute
	SHA256 string `json:"sha256"` // lowercase hex of the whole file's bytes
}

// interpreters are the command base names whose script argument is hashed too, besides
// python3.N for any N.
var interpreters = map[string]bool{
	"python": true, "python3": true, "node": true, "sh": true, "bash": true, "dash": true, "perl": true, "ruby": true,
}

// IsInterpreter reports whether command (a path) names a known interpreter: its base name is
// python, python3, python3.N, node, sh, bash, dash, perl or ruby (the base name of the
// command as registered: symbolic links are not followed, so /bin/sh counts as sh).
func IsInterpreter(command string) bool {
	base := filepath.Base(command)
	if interpreters[base] {
		return true
	}
	rest, ok := strings.CutPrefix(base, "python3.")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// ScriptPath returns the script of a registration whose command is a known interpreter (see
// IsInterpreter): the first argument that does not start with "-" and names an existing
// regular file (symbolic links followed), a relative one taken from dir, the directory the
// child starts in. It returns "" when the command is no interpreter or no argument
// qualifies. So `python3 -u light.py` hashes light.py; `python3 -m pkg` hashes nothing but
// python3 (pkg names no file); an option's value that names a file (`-X file`) counts.
func ScriptPath(command string, args []string, dir string) string {
	if !IsInterpreter(command) {
		return ""
	}
	for _, a := range args {
		if a == "" || strings.HasPrefix(a, "-") {
			continue
		}
		p := a
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return filepath.Clean(p)
		}
	}
	return ""
}

// errUnreadable marks a file that could not be hashed.
var errUnreadable = errors.New("unreadable")

// fileDigests hashes the files of reg as they are now: its command and, for an interpreter,
// its script. A file that cannot be read (or is over MaxHashedFileBytes) is returned with an
// empty SHA256 and makes the error non-nil; the error never quotes file contents.
func fileDigests(reg Registration) ([]FileDigest, error) {
	dir, _ := os.Getwd() // the child inherits the daemon's working directory
	out := []FileDigest{{Role: RoleExecutable, Path: reg.Command}}
	if p := ScriptPath(reg.Command, reg.Args, dir); p != "" {
		out = append(out, FileDigest{Role: RoleScript, Path: p})
	}
	var errs []error
	for i := range out {
		sum, err := hashFile(out[i].Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", out[i].Role, out[i].Path, err))
			continue
		}
		out[i].SHA256 = sum
	}
	return out, errors.Join(errs...)
}

// hashFile hashes the regular file at path. It opens it without blocking: open(2) of a FIFO
// put where an adapter's script was waits for a writer, and would hold the supervisor's lock
// (a registration) or an adapter's restart, and Close after them, forever
// (TestFileDigestsRefusesAFIFO); the FIFO is refused unreadable instead.
func hashFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", errUnreadable
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", errUnreadable
	}
	if fi.Size() > MaxHashedFileBytes {
		return "", fmt.Errorf("larger than %d bytes", MaxHashedFileBytes)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, MaxHashedFileBytes+1))
	if err != nil {
		return "", errUnreadable
	}
	if n > MaxHashedFileBytes {
		return "", fmt.Errorf("larger than %d bytes", MaxHashedFileBytes)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sameDigests reports whether two digest sets name the same files with the same, known
// digests.
func sameDigests(a, b []FileDigest) bool {
	return len(a) > 0 && slices.EqualFunc(a, b, func(x, y FileDigest) bool {
		return x.Role == y.Role && x.Path == y.Path && x.SHA256 != "" && x.SHA256 == y.SHA256
	})
}

// conflictingDigest returns the first recorded digest that a file of current (same role and
// path) contradicts, for a re-registration: ok is false when none does.
func conflictingDigest(recorded, current []FileDigest) (FileDigest, bool) {
	for _, r := range recorded {
		for _, c := range current {
			if c.Role == r.Role && c.Path == r.Path && c.SHA256 != r.SHA256 {
				return r, true
			}
		}
	}
	return FileDigest{}, false
}

// DigestChange is one file of a registration as Approve reports it: the digest recorded
// before and the one recorded now (empty when the file was not part of the set).
type DigestChange struct {
	Role string `json:"role"`
	Path string `json:"path"`
	Old  string `json:"old,omitempty"`
	New  string `json:"new,omitempty"`
}

// digestChanges pairs the files of old and new by role.
func digestChanges(old, new []FileDigest) []DigestChange {
	var out []DigestChange
	for _, role := range []string{RoleExecutable, RoleScript} {
		var c DigestChange
		for _, d := range old {
			if d.Role == role {
				c.Role, c.Path, c.Old = role, d.Path, d.SHA256
			}
		}
		for _, d := range new {
			if d.Role == role {
				c.Role, c.Path, c.New = role, d.Path, d.SHA256
			}
		}
		if c.Role != "" {
			out = append(out, c)
		}
	}
	return out
}

// DigestStatus is one recorded file digest as Status shows it: prefixes only, never the
// file.
type DigestStatus struct {
	Role     string `json:"role"`
	Path     string `json:"path"`
	Recorded string `json:"recorded"`          // the first DigestPrefixLen hex digits
	Current  string `json:"current,omitempty"` // set while changed: the file's prefix now, or "missing"
}

func prefix(d string) string {
	if len(d) > DigestPrefixLen {
		return d[:DigestPrefixLen]
	}
	return d
}

// digestStatus shows recorded, and, when current is set (the adapter is changed), what
// differs.
func digestStatus(recorded, current []FileDigest) []DigestStatus {
	out := make([]DigestStatus, 0, len(recorded))
	for _, r := range recorded {
		ds := DigestStatus{Role: r.Role, Path: r.Path, Recorded: prefix(r.SHA256)}
		if current != nil {
			now := "missing"
			for _, c := range current {
				if c.Role == r.Role && c.Path == r.Path && c.SHA256 != "" {
					now = prefix(c.SHA256)
				}
			}
			if now != ds.Recorded {
				ds.Current = now
			}
		}
		out = append(out, ds)
	}
	return out
}
