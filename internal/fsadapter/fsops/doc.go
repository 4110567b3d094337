// Package fsops is the filesystem core of airlock-fs, the reference host tool adapter: a Root
// opened on one directory, and one method per fs.* operation (List, Stat, Read, Search, Write,
// Edit) that takes the decoded payload and returns the result or a *protocol.Error whose code
// is listed in codes.go. The wire server, grants and idempotency live above this package.
//
// # Guarantee
//
// Every path is first checked lexically (ValidatePath: the daemon's rules, re-applied because
// the adapter never trusts the daemon) and then resolved by the kernel beneath the Root's
// directory descriptor with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS).
// A path therefore never reaches outside the root, whatever ".." or absolute or symbolic-link
// tricks it or the tree holds, and no path string is ever checked and then used: the check is
// the open. Symbolic links are refused wherever they appear (path_symlink), even when they
// point inside the root. Devices, FIFOs and sockets are classified through O_PATH descriptors
// and never opened or returned as files (unsupported_file_type); fs.list and fs.search omit
// them. If the kernel lacks openat2 (Linux < 5.6, or a seccomp filter returning ENOSYS), Open
// and every operation fail confinement_unavailable; there is no fallback to path checks.
// Errors never contain the root's absolute path.
//
// # Not guaranteed
//
//   - Hard links. A hard link inside the root to a file outside it is, at the inode level, an
//     ordinary file of the root: no resolution flag can tell it apart, so fs.read, fs.search
//     and fs.stat see the outside file's content. Operators must not hard-link sensitive files
//     into a grant root (and should keep fs.protected_hardlinks=1 so other users cannot). Writes
//     and edits replace the directory entry atomically, so they break such a link and never
//     modify the outside file (TestHardLinkDocumentedBehaviour).
//   - Mount points. Bind mounts and other mounts inside the root are crossed (no
//     RESOLVE_NO_XDEV): creating them needs privilege, and the operator who made them chose to.
//   - Consistency against other writers. Writes and edits through one Root are serialized per
//     path, and the expectedDigest guard is checked under that lock, but a process writing the
//     file directly between the check and the rename is not detected.
//   - Entries swapped during fs.search. For speed, the walk opens an entry that getdents
//     reported as a regular file directly (O_RDONLY|O_NONBLOCK|O_NOCTTY, beneath the root,
//     no links) instead of classifying it through O_PATH first, as the other operations do. An
//     entry replaced by a device node between the listing and the open (creating one needs
//     privilege) is opened, recognized by fstat and closed unread; a FIFO cannot block the
//     open.
//   - Temporary files. A crash in the middle of fs.write or fs.edit may leave a file named
//     ".airlock-tmp-*" in the target's directory; the target itself always holds the old or the
//     new content.
//
// # Concurrency
//
// A Root is safe for concurrent use. Close waits for operations in flight; a moved root
// directory is still the Root (it holds a descriptor, not a name).
//
// # Kernel caveats
//
// openat2 can fail EAGAIN when a concurrent rename makes a RESOLVE_BENEATH walk ambiguous; the
// resolution is retried a few times and then fails io_error, retryable.
package fsops
