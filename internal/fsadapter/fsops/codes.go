package fsops

import (
	"errors"

	"github.com/airlockhq/airlock/internal/protocol"
	"golang.org/x/sys/unix"
)

// Error codes of the fs.* operations. Every failure of a Root method is a *protocol.Error with
// one of these codes; they are stable because adapters and agents branch on them.
//
//	invalid_path             the path breaks the relative-path rules (see ValidatePath), or a
//	                         component is longer than the filesystem allows
//	invalid_argument         a payload member other than the path is out of bounds
//	path_escape              the kernel refused a resolution that would leave the root (EXDEV);
//	                         lexical validation normally refuses such paths first
//	path_symlink             a component of the path, or the path itself, is a symbolic link
//	not_found                the path does not exist (fs.write: the leaf, when create is false)
//	parent_missing           fs.write: the parent directory of the leaf does not exist
//	not_a_file               a regular file was required and the path is a directory
//	not_a_directory          a directory was required and the path (or a component) is a file
//	unsupported_file_type    the path is a device, FIFO, socket or other non-regular object
//	not_utf8                 content read, searched for, written or edited is not valid UTF-8
//	file_exists              fs.write with overwrite false on an existing file
//	digest_mismatch          expectedDigest differs from the SHA-256 of the current bytes
//	edit_not_found           an edit's oldText does not occur (details.edit is its index)
//	edit_ambiguous           an edit's oldText occurs more than once (details.edit)
//	too_large                content or a file exceeds a size bound, or a response cannot fit
//	permission_denied        the operating system refused access (EACCES, EPERM, EROFS)
//	confinement_unavailable  the kernel lacks openat2; the adapter fails closed
//	canceled                 the context ended before the operation finished
//	root_closed              the Root was closed
//	io_error                 any other operating-system failure (retryable when transient)
const (
	CodeInvalidPath            = "invalid_path"
	CodeInvalidArgument        = "invalid_argument"
	CodePathEscape             = "path_escape"
	CodePathSymlink            = "path_symlink"
	CodeNotFound               = "not_found"
	CodeParentMissing          = "parent_missing"
	CodeNotAFile               = "not_a_file"
	CodeNotADirectory          = "not_a_directory"
	CodeUnsupportedFileType    = "unsupported_file_type"
	CodeNotUTF8                = "not_utf8"
	CodeFileExists             = "file_exists"
	CodeDigestMismatch         = "digest_mismatch"
	CodeEditNotFound           = "edit_not_found"
	CodeEditAmbiguous          = "edit_ambiguous"
	CodeTooLarge               = "too_large"
	CodePermissionDenied       = "permission_denied"
	CodeConfinementUnavailable = "confinement_unavailable"
	CodeCanceled               = "canceled"
	CodeRootClosed             = "root_closed"
	CodeIOError                = "io_error"
)

// Codes lists every code above, for documentation and schema tests.
var Codes = []string{
	CodeInvalidPath, CodeInvalidArgument, CodePathEscape, CodePathSymlink, CodeNotFound,
	CodeParentMissing, CodeNotAFile, CodeNotADirectory, CodeUnsupportedFileType, CodeNotUTF8,
	CodeFileExists, CodeDigestMismatch, CodeEditNotFound, CodeEditAmbiguous, CodeTooLarge,
	CodePermissionDenied, CodeConfinementUnavailable, CodeCanceled, CodeRootClosed, CodeIOError,
}

// Detail keys.
const (
	DetailReason = "reason" // invalid_path: which rule the path broke
	DetailField  = "field"  // invalid_argument, too_large: the payload member
	DetailEdit   = "edit"   // edit_not_found, edit_ambiguous: 0-based index of the edit
	DetailErrno  = "errno"  // io_error: the errno name, never a path
)

func argError(field, format string, args ...any) *protocol.Error {
	return protocol.Errorf(CodeInvalidArgument, format, args...).With(DetailField, field)
}

// errnoError maps a system-call failure to a wire error. what names the object for the message
// ("path", "parent directory"); the message never includes a path, least of all the root's.
func errnoError(err error, what string) *protocol.Error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return protocol.Errorf(CodeIOError, "%s: i/o error", what)
	}
	switch errno {
	case unix.ENOENT:
		return protocol.Errorf(CodeNotFound, "%s does not exist", what)
	case unix.ELOOP:
		return protocol.Errorf(CodePathSymlink, "%s is or passes through a symbolic link", what)
	case unix.EXDEV:
		return protocol.Errorf(CodePathEscape, "%s resolves outside the root", what)
	case unix.ENOTDIR:
		return protocol.Errorf(CodeNotADirectory, "a component of the %s is not a directory", what)
	case unix.EISDIR:
		return protocol.Errorf(CodeNotAFile, "%s is a directory", what)
	case unix.ENAMETOOLONG:
		return protocol.Errorf(CodeInvalidPath, "a component of the %s is too long", what).
			With(DetailReason, "too_long")
	case unix.ENXIO, unix.ENODEV, unix.EOPNOTSUPP:
		return protocol.Errorf(CodeUnsupportedFileType, "%s is not a regular file or directory", what)
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return protocol.Errorf(CodePermissionDenied, "%s: permission denied", what)
	case unix.ENOSYS:
		return errNoOpenat2()
	case unix.EFBIG, unix.ENOSPC, unix.EDQUOT:
		return protocol.Errorf(CodeTooLarge, "%s: %s", what, errno.Error())
	case unix.EAGAIN, unix.EINTR, unix.EBUSY, unix.EMFILE, unix.ENFILE, unix.ENOMEM:
		return protocol.Retryable(CodeIOError, "%s: transient i/o error", what).
			With(DetailErrno, unix.ErrnoName(errno))
	}
	return protocol.Errorf(CodeIOError, "%s: i/o error", what).With(DetailErrno, unix.ErrnoName(errno))
}

func errNoOpenat2() *protocol.Error {
	return protocol.Errorf(CodeConfinementUnavailable,
		"the kernel lacks openat2 (Linux 5.6 or later is required); refusing to resolve paths without it")
}

func errClosed() *protocol.Error { return protocol.Errorf(CodeRootClosed, "root is closed") }

func errCanceled() *protocol.Error {
	return protocol.Errorf(CodeCanceled, "operation canceled")
}
