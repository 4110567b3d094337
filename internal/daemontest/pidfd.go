package daemontest

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a process a test watches for its exit through a pidfd, which names that process
// only (never a later one given the same pid).
type Process struct {
	t  testing.TB
	fd int
}

// Watch opens a pidfd of pid, closed at the end of the test. The process must exist.
func Watch(t testing.TB, pid int) *Process {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd of %d: %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &Process{t: t, fd: fd}
}

// Exited reports whether the process has exited (a zombie counts), waiting for that up to
// wait; a zero wait only looks.
func (p *Process) Exited(wait time.Duration) bool {
	p.t.Helper()
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}, int(wait.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			p.t.Fatal(err)
		}
		return n == 1
	}
}
