package ownersock

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerUID returns the uid of the process at the other end of a Unix connection, from
// SO_PEERCRED: the credentials the kernel recorded at connect, which the peer cannot forge.
func PeerUID(c *net.UnixConn) (int, error) {
	cred, err := PeerCred(c)
	return cred.UID, err
}

// Cred is a peer's credentials as the kernel recorded them at connect.
type Cred struct {
	PID int // the process that connected; shares of a Pool are counted by it
	UID int
}

// PeerCred returns the credentials of the process at the other end of a Unix connection, from
// SO_PEERCRED. On error both members are -1.
func PeerCred(c *net.UnixConn) (Cred, error) {
	none := Cred{PID: -1, UID: -1}
	raw, err := c.SyscallConn()
	if err != nil {
		return none, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return none, err
	}
	if serr != nil {
		return none, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return Cred{PID: int(cred.Pid), UID: int(cred.Uid)}, nil
}
