//go:build unix

package store

import (
	"io/fs"
	"os"
	"syscall"
)

// openNoFollow makes the open of the database file fail with ELOOP on a symbolic link.
const openNoFollow = syscall.O_NOFOLLOW

// ownerUID returns the uid that owns fi.
func ownerUID(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// unlockFile drops bbolt's flock on f. Closing f alone is not enough when bbolt panicked after
// mapping the file: the mapping keeps the open file description, and with it the lock, alive.
func unlockFile(f *os.File) {
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
