package tooladapter

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/internal/protocol"
)

// MaxRelativePathBytes bounds a relative path in UTF-8 bytes.
const MaxRelativePathBytes = protocol.MaxRelativePathBytes

// Reasons in details.reason of invalid_tool_adapter_path.
const (
	reasonEmpty        = protocol.PathEmpty
	reasonTooLong      = protocol.PathTooLong
	reasonNotUTF8      = protocol.PathNotUTF8
	reasonAbsolute     = protocol.PathAbsolute
	reasonBackslash    = protocol.PathBackslash
	reasonControl      = protocol.PathControl
	reasonDotDot       = protocol.PathDotDot
	reasonNonCanonical = protocol.PathNonCanonical
)

// ValidateRelativePath checks the syntax of a root-relative path with the rule of
// protocol.RelativePathProblem. Failures are invalid_tool_adapter_path with details.reason;
// the message never quotes the path.
func ValidateRelativePath(p string) *protocol.Error {
	if reason := protocol.RelativePathProblem(p); reason != "" {
		return pathError(reason)
	}
	return nil
}

func pathError(reason string) *protocol.Error {
	return protocol.Errorf(CodeInvalidPath, "path must be a canonical root-relative POSIX path (%s)", reason).
		With(DetailReason, reason)
}

// CanonicalRoot resolves a session cwd to the canonical directory every relative path is
// walked from. A cwd that is not absolute, cannot be resolved or is not a directory is
// adapter_root_invalid; the message never quotes the cwd.
func CanonicalRoot(cwd string) (string, *protocol.Error) {
	if !filepath.IsAbs(cwd) {
		return "", protocol.Errorf(CodeRootInvalid, "session cwd must be an absolute path")
	}
	real, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		return "", protocol.Errorf(CodeRootInvalid, "session cwd cannot be canonicalized")
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return "", protocol.Errorf(CodeRootInvalid, "session cwd cannot be canonicalized")
	}
	fi, err := os.Lstat(real)
	if err != nil || !fi.IsDir() {
		return "", protocol.Errorf(CodeRootInvalid, "session cwd is not a directory")
	}
	return real, nil
}

// ResolveUnder checks that p names an object beneath root without leaving it or following a
// symlink, and returns the error that forbids dispatch, or nil.
//
// Guarantee: a path that leaves root lexically is adapter_path_invalid; a path that breaks the
// relative-path rules is invalid_tool_adapter_path; then each component is lstat'ed from root
// down: a symlink at any depth is adapter_path_symlink, and a missing component, or a
// non-directory in the middle, is adapter_path_unavailable — except a missing final component
// when allowMissingLeaf (fs.write creating a file). root must be canonical (see CanonicalRoot),
// else adapter_root_invalid.
//
// Not guaranteed: the tree can change between this walk and the adapter's own resolution.
// That race is why the adapter confines itself independently; this walk only refuses requests
// that are already wrong.
func ResolveUnder(root, p string, allowMissingLeaf bool) *protocol.Error {
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return protocol.Errorf(CodeRootInvalid, "root must be a canonical absolute path")
	}
	if escapes(p) {
		return protocol.Errorf(CodePathInvalid, "path escapes the session root")
	}
	if e := ValidateRelativePath(p); e != nil {
		return e
	}
	mode, err := lstatType(root)
	if err != nil || mode != syscall.S_IFDIR {
		return protocol.Errorf(CodeRootInvalid, "session root is not a directory")
	}
	if p == "." {
		return nil
	}
	segs := strings.Split(p, "/")
	cur := root
	for i, seg := range segs {
		last := i == len(segs)-1
		next := filepath.Join(cur, seg)
		if !within(root, next) {
			return protocol.Errorf(CodePathInvalid, "path escapes the session root")
		}
		mode, err := lstatType(next)
		switch {
		case errors.Is(err, fs.ErrNotExist) && last && allowMissingLeaf:
			return nil
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			return unavailable(i, last)
		case err != nil:
			return unavailable(i, last)
		case mode == syscall.S_IFLNK:
			return protocol.Errorf(CodePathSymlink, "path component %d is a symbolic link", i+1).With("component", i+1)
		case !last && mode != syscall.S_IFDIR:
			return unavailable(i, last)
		}
		cur = next
	}
	return nil
}

// lstatType is os.Lstat for the walk, without its allocations: it returns the file type bits
// of path's mode (syscall.S_IFMT), and an error that errors.Is matches as os.Lstat's would.
func lstatType(path string) (uint32, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Lstat(path, &st)
		if err != syscall.EINTR {
			return uint32(st.Mode) & syscall.S_IFMT, err
		}
	}
}

func unavailable(i int, last bool) *protocol.Error {
	what := "a parent directory"
	if last {
		what = "the final component"
	}
	return protocol.Errorf(CodePathUnavailable, "path component %d (%s) is unavailable", i+1, what).With("component", i+1)
}

// escapes reports whether p, taken lexically relative to a root, climbs above it.
func escapes(p string) bool {
	depth := 0
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator)) || root == "/"
}

// CheckEndpoint checks an adapter socket before connecting: the socket and its parent are
// lstat'ed; neither may be a symlink; the socket must be a socket and the parent a directory
// whose realpath is itself; both must be owned by the effective uid with no group or other
// permission bits. Any failure is adapter_endpoint_insecure with details.reason; the message
// never quotes the path.
//
// Not guaranteed: the socket can be replaced between this check and connect(2). The check
// narrows what a misconfigured endpoint can do; the capability handle, which only the adapter
// that minted it accepts, is the authority.
func CheckEndpoint(p string) *protocol.Error {
	insecure := func(reason string) *protocol.Error {
		return protocol.Errorf(CodeEndpointInsecure, "adapter endpoint is not a private socket (%s)", reason).
			With(DetailReason, reason)
	}
	if !validSocketPath(p) {
		return insecure("path_invalid")
	}
	euid := uint32(os.Geteuid())
	parent := filepath.Dir(p)
	pfi, err := os.Lstat(parent)
	switch {
	case err != nil:
		return insecure("parent_unavailable")
	case pfi.Mode()&fs.ModeSymlink != 0:
		return insecure("parent_symlink")
	case !pfi.IsDir():
		return insecure("parent_not_directory")
	}
	if real, err := filepath.EvalSymlinks(parent); err != nil || real != parent {
		return insecure("parent_not_canonical")
	}
	if st, ok := pfi.Sys().(*syscall.Stat_t); !ok || st.Uid != euid {
		return insecure("parent_owner")
	}
	if pfi.Mode().Perm()&0o077 != 0 {
		return insecure("parent_mode")
	}
	sfi, err := os.Lstat(p)
	switch {
	case err != nil:
		return insecure("socket_unavailable")
	case sfi.Mode()&fs.ModeSymlink != 0:
		return insecure("socket_symlink")
	case sfi.Mode()&fs.ModeSocket == 0:
		return insecure("not_socket")
	}
	if st, ok := sfi.Sys().(*syscall.Stat_t); !ok || st.Uid != euid {
		return insecure("socket_owner")
	}
	if sfi.Mode().Perm()&0o077 != 0 {
		return insecure("socket_mode")
	}
	return nil
}
