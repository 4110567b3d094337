//go:build unix

package transcript

import (
	"io/fs"
	"syscall"
)

// openNoFollow makes an open fail with ELOOP when the last component is a symbolic link.
const openNoFollow = syscall.O_NOFOLLOW

// ownerUID returns the uid that owns fi.
func ownerUID(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
