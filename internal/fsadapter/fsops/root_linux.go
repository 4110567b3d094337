package fsops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/airlockhq/airlock/internal/protocol"
	"golang.org/x/sys/unix"
)

// resolveFlags confine every resolution: no component may leave the directory fd, and no
// symbolic link (magic links included) is followed anywhere in the path.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openat2Retries bounds the retries of an openat2 that failed EAGAIN, which RESOLVE_BENEATH
// returns when a concurrent rename made the kernel unsure a resolution stayed beneath the fd.
// Validated paths have no ".." so this is rare; a handful of retries rides out a racing rename.
const openat2Retries = 8

// openat2 is the system call, replaceable by tests to simulate kernels and failures.
var openat2 = unix.Openat2

// Options tune a Root. Zero members take the defaults.
type Options struct {
	// MaxResponseBytes bounds the JSON encoding of one result (DefaultMaxResponseBytes). A
	// server passes the grant's maxResponseBytes less its frame overhead.
	MaxResponseBytes int
	// MaxEditFileBytes bounds the file fs.edit reads and writes (DefaultMaxEditFileBytes).
	MaxEditFileBytes int
	// MaxSearchFiles bounds the files one fs.search opens (DefaultMaxSearchFiles).
	MaxSearchFiles int
	// MaxSearchDepth bounds the directory depth below the search path (DefaultMaxSearchDepth).
	MaxSearchDepth int
}

func (o Options) withDefaults() Options {
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.MaxEditFileBytes <= 0 {
		o.MaxEditFileBytes = DefaultMaxEditFileBytes
	}
	if o.MaxSearchFiles <= 0 {
		o.MaxSearchFiles = DefaultMaxSearchFiles
	}
	if o.MaxSearchDepth <= 0 {
		o.MaxSearchDepth = DefaultMaxSearchDepth
	}
	return o
}

// Root is a directory opened for the fs.* operations; see the package documentation for what it
// guarantees and what it does not.
//
// Root is safe for concurrent use. Writes and edits to one path are serialized; everything else
// runs concurrently. Close waits for operations in flight.
type Root struct {
	opts Options
	name string // canonical absolute path; for the operator only, never in an error

	// life guards fd and closed: operations hold it for reading, Close for writing.
	life   sync.RWMutex
	fd     int // O_PATH|O_DIRECTORY
	closed bool

	chunk  int  // fs.search read size; tests shrink it to exercise chunk boundaries
	noSync bool // skip fsync; only FuzzEdit sets it, to fuzz the algorithm at speed

	// locksMu guards locks, the per-path write serialization.
	locksMu sync.Mutex
	locks   map[string]*pathLock
}

type pathLock struct {
	mu   sync.Mutex
	refs int // guarded by Root.locksMu
}

// Open opens dir as a Root with default options.
func Open(dir string) (*Root, error) { return OpenOptions(dir, Options{}) }

// OpenOptions canonicalizes dir (absolute, symbolic links resolved), requires a directory and
// holds an O_PATH descriptor on it: a later rename of the directory moves the Root with it.
// It fails with confinement_unavailable when the kernel lacks openat2. Errors of OpenOptions
// are for the operator and may name dir.
func OpenOptions(dir string, opts Options) (*Root, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fsops: root %q: %w", dir, err)
	}
	canon, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("fsops: root %q: %w", dir, err)
	}
	fd, err := unix.Open(canon, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fsops: root %q: %w", canon, &os.PathError{Op: "open", Path: canon, Err: err})
	}
	// Probe openat2 once so that an old kernel fails at startup, not at the first request.
	probe, err := openat2(fd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOSYS) {
			return nil, errNoOpenat2()
		}
		return nil, fmt.Errorf("fsops: root %q: openat2: %w", canon, err)
	}
	unix.Close(probe)
	return &Root{opts: opts.withDefaults(), name: canon, fd: fd, chunk: searchChunk, locks: make(map[string]*pathLock)}, nil
}

// Name returns the canonical absolute path the Root was opened on. It is for the operator's
// logs and status; no result or error of an operation contains it.
func (r *Root) Name() string { return r.name }

// Close releases the directory descriptor once operations in flight have returned. Later
// operations fail root_closed. Close is idempotent.
func (r *Root) Close() error {
	r.life.Lock()
	defer r.life.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return unix.Close(r.fd)
}

// enter starts an operation: it fails when the Root is closed or ctx is done. The caller must
// call r.life.RUnlock when it returns nil.
func (r *Root) enter(ctx context.Context) *protocol.Error {
	if ctx.Err() != nil {
		return errCanceled()
	}
	r.life.RLock()
	if r.closed {
		r.life.RUnlock()
		return errClosed()
	}
	return nil
}

// lockPath serializes mutations of one path; the returned func releases the lock.
func (r *Root) lockPath(p string) func() {
	r.locksMu.Lock()
	l := r.locks[p]
	if l == nil {
		l = &pathLock{}
		r.locks[p] = l
	}
	l.refs++
	r.locksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.locksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(r.locks, p)
		}
		r.locksMu.Unlock()
	}
}

// openAt resolves rel beneath dirfd with the confinement flags. rel must already be
// validated; flags always gain O_CLOEXEC, and O_NOFOLLOW unless O_PATH (with O_PATH a trailing
// link would yield a descriptor of the link itself instead of ELOOP).
func openAt(dirfd int, rel string, flags uint64, mode uint64) (int, error) {
	flags |= unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOFOLLOW
	}
	how := unix.OpenHow{Flags: flags, Mode: mode, Resolve: resolveFlags}
	for i := 0; ; i++ {
		fd, err := openat2(dirfd, rel, &how)
		if err == unix.EINTR || (err == unix.EAGAIN && i < openat2Retries) {
			continue
		}
		return fd, err
	}
}

// fileKind classifies a mode: TypeFile, TypeDirectory, or "" with the wire error for anything
// else.
func fileKind(mode uint32, what string) (string, *protocol.Error) {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile, nil
	case unix.S_IFDIR:
		return TypeDirectory, nil
	case unix.S_IFLNK:
		return "", protocol.Errorf(CodePathSymlink, "%s is a symbolic link", what)
	}
	return "", protocol.Errorf(CodeUnsupportedFileType, "%s is not a regular file or directory", what)
}

// lookup resolves a validated path to an O_PATH descriptor and its status. O_PATH opens have no
// side effects on any kind of file, so devices, FIFOs and sockets are classified without being
// opened. The caller closes fd.
func (r *Root) lookup(p string) (fd int, st unix.Stat_t, perr *protocol.Error) {
	fd, err := openAt(r.fd, p, unix.O_PATH, 0)
	if err != nil {
		return -1, st, errnoError(err, "path")
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, errnoError(err, "path")
	}
	return fd, st, nil
}

// openRegular opens a regular file for reading beneath dirfd: it classifies the path through an
// O_PATH descriptor first (so a device or FIFO is never opened), then opens it O_RDONLY with
// O_NONBLOCK and O_NOCTTY and checks that the descriptor is the regular file it classified. A
// swap between the two opens fails rather than returning another object.
func openRegular(dirfd int, p string) (fd int, st unix.Stat_t, perr *protocol.Error) {
	pfd, err := openAt(dirfd, p, unix.O_PATH, 0)
	if err != nil {
		return -1, st, errnoError(err, "path")
	}
	var pst unix.Stat_t
	err = unix.Fstat(pfd, &pst)
	unix.Close(pfd)
	if err != nil {
		return -1, st, errnoError(err, "path")
	}
	kind, perr := fileKind(pst.Mode, "path")
	if perr != nil {
		return -1, st, perr
	}
	if kind != TypeFile {
		return -1, st, protocol.Errorf(CodeNotAFile, "path is a directory")
	}
	fd, err = openAt(dirfd, p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return -1, st, errnoError(err, "path")
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, errnoError(err, "path")
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != pst.Ino || st.Dev != pst.Dev {
		unix.Close(fd)
		return -1, st, protocol.Retryable(CodeIOError, "path changed while it was opened")
	}
	return fd, st, nil
}

// preadFull reads into b at off until b is full or end of file.
func preadFull(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if k == 0 {
			break
		}
		n += k
	}
	return n, nil
}
