package ownersock

import (
	"errors"
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

// ErrForeignPeer is wrapped by CheckPeer's error for a peer of another user.
var ErrForeignPeer = errors.New("the peer runs as another user")

// CheckPeer returns nil when the process at the other end of c runs as uid, else an error
// wrapping ErrForeignPeer (or SO_PEERCRED's error). A client calls it before it sends
// anything: the path of an owner-only socket says nothing of who listens there when another
// user could create it first (/tmp/airlock-$UID, the default without a runtime directory),
// and what a client sends (a descriptor with its capability handle, a join code) must reach
// its own user's server or no one (TestClientRefusesAForeignServer).
func CheckPeer(c *net.UnixConn, uid int) error {
	cred, err := PeerCred(c)
	if err != nil {
		return err
	}
	if cred.UID != uid {
		return fmt.Errorf("%w: uid %d, not %d", ErrForeignPeer, cred.UID, uid)
	}
	return nil
}
