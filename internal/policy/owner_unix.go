package policy

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

var errEOF = io.EOF

// openNonblock opens name for reading without waiting on it: open(2) of a FIFO blocks until
// a writer comes, so a session open naming one (or airlock policy check) hung, and airlockd's
// shutdown with it (TestReadFileRefusesAFIFO). ownedByOperator then refuses what is not a
// regular file; a regular file's reads ignore O_NONBLOCK.
func openNonblock(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// ownedByOperator refuses a policy file that is not a regular file of this process's uid, or
// that its group or others may write: a policy another user could edit is not the operator's.
func ownedByOperator(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return &Error{Reason: fmt.Sprintf("cannot stat the policy file: %v", err)}
	}
	if !fi.Mode().IsRegular() {
		return &Error{Reason: "the policy file is not a regular file"}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &Error{Reason: "the policy file is writable by its group or others"}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return &Error{Reason: "the policy file is not owned by the daemon's user"}
	}
	return nil
}
