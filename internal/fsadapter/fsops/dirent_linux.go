package fsops

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// dirent is one entry of a directory as getdents64 returns it. typ is the d_type (unix.DT_*),
// DT_UNKNOWN on filesystems that do not fill it in.
type dirent struct {
	name string
	typ  uint8
}

// direntBufSize is the getdents64 buffer: large enough that a directory of a few hundred
// entries is read in one system call.
const direntBufSize = 32 << 10

// readDirents reads every entry of the directory open on fd, except "." and "..". It parses
// getdents64 itself rather than use os.File.ReadDir, whose fallback for DT_UNKNOWN lstats a
// path string; here a later fstatat is made relative to the directory descriptor instead.
func readDirents(fd int, buf []byte, out []dirent) ([]dirent, error) {
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if n <= 0 {
			return out, nil
		}
		b := buf[:n]
		for len(b) >= 19 {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return out, unix.EIO
			}
			typ := b[18]
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			b = b[reclen:]
			if len(name) == 1 && name[0] == '.' || len(name) == 2 && name[0] == '.' && name[1] == '.' {
				continue
			}
			out = append(out, dirent{name: string(name), typ: typ})
		}
	}
}
