package policy

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

var errEOF = io.EOF

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
