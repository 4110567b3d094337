//go:build unix

package room

import "syscall"

// noFollow makes opening a host key file fail on a symbolic link.
const noFollow = syscall.O_NOFOLLOW
