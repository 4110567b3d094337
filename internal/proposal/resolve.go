package proposal

// This file checks a proposal against the workspace and pins what would run.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
)

// File is one file a proposal runs, pinned by its SHA-256. Role is capclient's: the
// executable, or the script an interpreter runs.
type File struct {
	Role   string `json:"role"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// Plan is a resolved proposal: the exact command and argv that would run, without a shell,
// and the files they run with the digests the operator approves.
type Plan struct {
	Workspace string   `json:"workspace"`
	Command   string   `json:"command"`
	Args      []string `json:"args"`
	Files     []File   `json:"files"`
}

// Resolve checks p against workspace (the session's working directory, an absolute path)
// and returns what would run: the command as an absolute path (an interpreter found on PATH,
// or a file of the workspace), the script and every argument that names an entry of the
// workspace as absolute paths, and the SHA-256 of the executable and the script.
//
// Every file of the workspace is reached one component at a time with lstat: a symbolic
// link anywhere below the workspace, a ".." or an absolute path outside it is refused with
// CodeOutsideWorkspace, as is a command or script that is not a regular file. A relative
// argument that names nothing in the workspace stays as it is (a word, not a path).
//
// What Resolve pins is what the operator approves; the daemon checks the files again after
// the approval and refuses to run what changed (capclient's digests, adapter_changed).
func Resolve(p *Proposal, workspace string) (*Plan, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(workspace) {
		return nil, refuse(CodeOutsideWorkspace, "", "the session has no absolute working directory")
	}
	// The workspace itself may sit below a link (/tmp on some systems); below it, none.
	root, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return nil, refuse(CodeOutsideWorkspace, "", "the session's working directory cannot be resolved")
	}
	plan := &Plan{Workspace: root, Args: make([]string, len(p.Args))}
	copy(plan.Args, p.Args)
	first := 0
	if Interpreter(p.Command) {
		path, err := exec.LookPath(p.Command)
		if err != nil || !filepath.IsAbs(path) {
			return nil, refuse(CodeOutsideWorkspace, "command", "interpreter %q is not found on the daemon's PATH", p.Command)
		}
		sum, err := hashFollow(path)
		if err != nil {
			return nil, refuse(CodeOutsideWorkspace, "command", "interpreter %q cannot be read: %v", p.Command, err)
		}
		plan.Command = filepath.Clean(path)
		plan.Files = append(plan.Files, File{Role: capclient.RoleExecutable, Path: plan.Command, SHA256: sum})
		script, sum, err := inside(root, p.Args[0], "args[0]")
		if err != nil {
			return nil, err
		}
		plan.Args[0] = script
		plan.Files = append(plan.Files, File{Role: capclient.RoleScript, Path: script, SHA256: sum})
		first = 1
	} else {
		if strings.HasPrefix(p.Command, "/") && !under(root, p.Command) {
			return nil, refuse(CodeOutsideWorkspace, "command", "must be a file of the workspace or a known interpreter (%s)", interpreterList())
		}
		if !strings.Contains(p.Command, "/") && !exists(root, p.Command) {
			return nil, refuse(CodeOutsideWorkspace, "command", "%q is no file of the workspace and no known interpreter (%s)", bounded(p.Command), interpreterList())
		}
		exe, sum, err := inside(root, p.Command, "command")
		if err != nil {
			return nil, err
		}
		if fi, err := os.Lstat(exe); err == nil && fi.Mode().Perm()&0o100 == 0 {
			// It could only fail once the operator approved it: a file the agent wrote is
			// not executable, and nothing it may call makes it so.
			return nil, refuse(CodeInvalid, "command", "%s is not executable: run it with an interpreter (%s) and the file as args[0]", bounded(p.Command), interpreterList())
		}
		plan.Command = exe
		plan.Files = append(plan.Files, File{Role: capclient.RoleExecutable, Path: exe, SHA256: sum})
	}
	for i := first; i < len(p.Args); i++ {
		a, f := p.Args[i], fmt.Sprintf("args[%d]", i)
		switch {
		case strings.HasPrefix(a, "/"):
			if !under(root, a) {
				return nil, refuse(CodeOutsideWorkspace, f, "an absolute path outside the workspace")
			}
			if _, err := walk(root, rel(root, a), f, false); err != nil {
				return nil, err
			}
		case a == "" || strings.HasPrefix(a, "-"):
		default:
			path, err := walk(root, a, f, false)
			switch {
			case err == nil:
				plan.Args[i] = path
			case CodeOf(err) == CodeOutsideWorkspace:
				return nil, err
			}
		}
	}
	return plan, nil
}

func interpreterList() string {
	names := make([]string, 0, len(interpreters))
	for n := range interpreters {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// under reports whether absolute path p is root or below it, lexically.
func under(root, p string) bool {
	c := filepath.Clean(p)
	return c == root || strings.HasPrefix(c, root+"/")
}

func rel(root, p string) string {
	r := strings.TrimPrefix(filepath.Clean(p), root)
	r = strings.TrimPrefix(r, "/")
	if r == "" {
		return "."
	}
	return r
}

func exists(root, name string) bool {
	_, err := os.Lstat(filepath.Join(root, name))
	return err == nil
}

// errMissing marks a path that names nothing in the workspace.
var errMissing = errors.New("no such file in the workspace")

// walk resolves name (relative to root, or absolute below it) one component at a time with
// lstat and returns its absolute path: a symbolic link or a "..", or a final entry that is
// not a regular file when wantFile, is CodeOutsideWorkspace; a missing component is
// CodeInvalid wrapping errMissing.
func walk(root, name, field string, wantFile bool) (string, error) {
	if strings.HasPrefix(name, "/") {
		if !under(root, name) {
			return "", refuse(CodeOutsideWorkspace, field, "an absolute path outside the workspace")
		}
		name = rel(root, name)
	}
	cur := root
	segs := strings.Split(name, "/")
	for i, seg := range segs {
		switch seg {
		case "", ".":
			continue
		case "..":
			return "", refuse(CodeOutsideWorkspace, field, "a path with \"..\" may leave the workspace")
		}
		cur = filepath.Join(cur, seg)
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", &Error{Code: CodeInvalid, Field: field, Reason: errMissing.Error()}
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return "", refuse(CodeOutsideWorkspace, field, "passes through a symbolic link, which a proposal may not name")
		}
		last := i == len(segs)-1
		if !last && !fi.IsDir() {
			return "", &Error{Code: CodeInvalid, Field: field, Reason: errMissing.Error()}
		}
		if last && wantFile && !fi.Mode().IsRegular() {
			return "", refuse(CodeOutsideWorkspace, field, "is not a regular file")
		}
	}
	return cur, nil
}

// inside resolves a file of the workspace that will run and hashes it without following a
// link.
func inside(root, name, field string) (string, string, error) {
	path, err := walk(root, name, field, true)
	if err != nil {
		return "", "", err
	}
	sum, err := hashNoFollow(path)
	if err != nil {
		return "", "", refuse(CodeOutsideWorkspace, field, "cannot be read as a regular file: %v", err)
	}
	return path, sum, nil
}

// Hash returns the SHA-256 of the file at path as the capability supervisor hashes it
// (symbolic links followed, at most capclient.MaxHashedFileBytes).
func Hash(path string) (string, error) { return hashFollow(path) }

func hashFollow(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", errors.New("unreadable")
	}
	defer f.Close()
	return hashOpen(f)
}

func hashNoFollow(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", errors.New("unreadable")
	}
	defer f.Close()
	return hashOpen(f)
}

func hashOpen(f *os.File) (string, error) {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", errors.New("not a regular file")
	}
	if fi.Size() > capclient.MaxHashedFileBytes {
		return "", fmt.Errorf("larger than %d bytes", capclient.MaxHashedFileBytes)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, capclient.MaxHashedFileBytes+1))
	if err != nil {
		return "", errors.New("unreadable")
	}
	if n > capclient.MaxHashedFileBytes {
		return "", fmt.Errorf("larger than %d bytes", capclient.MaxHashedFileBytes)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Changed compares the pinned files with the digests the capability supervisor recorded when
// it started the adapter (role and SHA-256; the supervisor's path of an interpreter may be
// the same file by another name). It returns the first pinned file whose content differs, or
// a file the supervisor pinned that the plan does not hold.
func (pl *Plan) Changed(recorded []capclient.FileDigest) (File, bool) {
	for _, f := range pl.Files {
		i := slices.IndexFunc(recorded, func(d capclient.FileDigest) bool { return d.Role == f.Role })
		if i < 0 || recorded[i].SHA256 != f.SHA256 {
			return f, true
		}
	}
	for _, d := range recorded {
		if !slices.ContainsFunc(pl.Files, func(f File) bool { return f.Role == d.Role }) {
			return File{Role: d.Role, Path: d.Path, SHA256: d.SHA256}, true
		}
	}
	return File{}, false
}

// Current re-hashes the pinned files of the workspace now (the interpreter too) and reports
// the first whose content is not the pinned one.
func (pl *Plan) Current() (File, bool) {
	for _, f := range pl.Files {
		var sum string
		var err error
		if f.Role == capclient.RoleExecutable && !under(pl.Workspace, f.Path) {
			sum, err = hashFollow(f.Path)
		} else {
			_, sum, err = inside(pl.Workspace, f.Path, f.Role)
		}
		if err != nil || sum != f.SHA256 {
			return f, true
		}
	}
	return File{}, false
}
