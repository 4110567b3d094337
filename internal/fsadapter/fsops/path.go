package fsops

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/protocol"
)

// MaxPathBytes bounds a relative path in UTF-8 bytes.
const MaxPathBytes = protocol.MaxRelativePathBytes

// ValidatePath checks the syntax of a root-relative path with the daemon's rule
// (protocol.RelativePathProblem), without trusting that the daemon applied it. The error is
// invalid_path with details.reason; the message never quotes the path.
//
// Validation is a first line only: the kernel (openat2 with RESOLVE_BENEATH) decides whether a
// resolution stays beneath the root.
func ValidatePath(p string) *protocol.Error {
	if reason := protocol.RelativePathProblem(p); reason != "" {
		return protocol.Errorf(CodeInvalidPath, "path must be a canonical root-relative path (%s)", reason).
			With(DetailReason, reason)
	}
	return nil
}

// Reasons in details.reason of invalid_path.
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

// validName reports whether a directory entry's name can be addressed by a valid path, so that
// fs.list and fs.search never return a name the agent cannot pass back.
func validName(name string) bool {
	if name == "" || name == "." || name == ".." || !utf8.ValidString(name) ||
		strings.IndexByte(name, '\\') >= 0 || strings.IndexByte(name, '/') >= 0 {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// joinPath joins a validated directory path and an entry name.
func joinPath(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// splitPath splits a validated path other than "." into its parent and its leaf.
func splitPath(p string) (dir, leaf string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	return p[:i], p[i+1:]
}
