// Package ownersock creates owner-only Unix sockets: the directory, stale-socket and
// live-socket rules that airlockd's owner socket and airlock-fs's sockets share, and the
// peer-credential check every accepted connection goes through.
package ownersock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// probeTimeout bounds the dial that tells a live socket from a stale one. A server that is up
// answers a connect at once; one second leaves room for a loaded machine.
const probeTimeout = time.Second

// ErrActive reports that another process is serving the socket path.
var ErrActive = errors.New("socket is already active")

// Socket is a listening owner-only Unix socket and the identity of the file it created.
type Socket struct {
	*net.UnixListener
	path     string
	dev, ino uint64
}

// Listen creates the owner socket at path.
//
// The directory is created 0700 if missing and must then be a real directory (not a symlink)
// owned by uid and writable by nobody else. An existing path must be a socket owned by uid: if
// it still answers, Listen fails with ErrActive; otherwise the stale file is removed.
// The socket is chmod 0600 after listen; until then it carries the umask's mode, which the
// 0700 directory keeps out of reach of other users.
func Listen(path string, uid int) (*Socket, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create socket directory %s: %w", dir, err)
	}
	if err := checkOwnerDir(dir, uid); err != nil {
		return nil, err
	}
	if err := removeStale(path, uid); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The file is ours to remove only while it is the one we created.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		ln.Close()
		return nil, fmt.Errorf("stat socket %s: %w", path, err)
	}
	return &Socket{UnixListener: ln, path: path, dev: uint64(st.Dev), ino: st.Ino}, nil
}

// checkOwnerDir refuses a directory that another user could use to swap the socket.
func checkOwnerDir(dir string, uid int) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	switch {
	case st.Mode&syscall.S_IFMT == syscall.S_IFLNK:
		return fmt.Errorf("socket directory %s is a symlink", dir)
	case st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		return fmt.Errorf("socket directory %s is not a directory", dir)
	case int(st.Uid) != uid:
		return fmt.Errorf("socket directory %s is owned by uid %d, not %d", dir, st.Uid, uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("socket directory %s is writable by group or others (mode %#o)", dir, st.Mode&0o777)
	}
	return nil
}

// removeStale removes a dead socket left by an earlier run, and refuses anything else.
func removeStale(path string, uid int) error {
	var st syscall.Stat_t
	err := syscall.Lstat(path, &st)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket path %s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return fmt.Errorf("socket path %s exists and is not a socket", path)
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("socket path %s is owned by uid %d, not %d", path, st.Uid, uid)
	}
	c, err := net.DialTimeout("unix", path, probeTimeout)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: %w", path, ErrActive)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// Close stops listening and removes the socket file if it is still the one this listener
// created; a file that another process put there since is left alone.
func (s *Socket) Close() error {
	err := s.UnixListener.Close()
	var st syscall.Stat_t
	if syscall.Lstat(s.path, &st) == nil && uint64(st.Dev) == s.dev && st.Ino == s.ino {
		os.Remove(s.path)
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Pauses after a failed accept, as net/http's: the first, doubled at each failure in a row
// up to the last. A failure is almost always a lack of descriptors (EMFILE, ENFILE), which a
// flood of connections to any listener of the process causes, and which ends when the flood
// does: the pause keeps the accept loop from spinning, and from logging every failure,
// meanwhile, and its bound brings the socket back within a second.
const (
	acceptRetryFirst = 5 * time.Millisecond
	acceptRetryMax   = time.Second
)

// AcceptRetry returns the pause before the next accept after one failed, given the pause
// before it (0 after an accept that succeeded).
func AcceptRetry(prev time.Duration) time.Duration {
	return min(max(2*prev, acceptRetryFirst), acceptRetryMax)
}
