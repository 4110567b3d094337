package ownersock

import (
	"net"

	"golang.org/x/sys/unix"
)

// PeerGone reports whether the peer of c has closed its end entirely, as poll(2) reports it
// (POLLHUP: the kernel shut down both directions when the peer's socket was released). A peer
// that shut down only its writing — a client that sent its commands and still reads the
// answers — is not gone, though a read of c meets the end of the stream either way. It does
// not block.
func PeerGone(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd)}}
		n, err := unix.Poll(fds, 0)
		gone = err == nil && n > 0 && fds[0].Revents&unix.POLLHUP != 0
	})
	return gone
}
