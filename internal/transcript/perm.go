package transcript

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"github.com/airlockhq/airlock/internal/protocol"
)

const (
	dirMode  = 0o700
	fileMode = 0o600
)

// checkDir checks that dir is a real directory (not a symbolic link), owned by the effective
// uid, with no group or other permission bits. A looser directory is refused, not tightened:
// whoever loosened it may already have read or planted files in it. A missing directory is
// reported with an error satisfying errors.Is(err, fs.ErrNotExist).
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return protocol.Wrap(insecure("cannot stat transcript directory %s", dir), err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return insecure("transcript directory %s is a symbolic link; use the real directory", dir)
	case !fi.IsDir():
		return insecure("transcript directory %s is not a directory", dir)
	}
	return checkOwnerMode(fi, "transcript directory", dir)
}

// checkFileInfo checks that fi, the transcript at path, is a regular file owned by the
// effective uid with no group or other permission bits.
func checkFileInfo(fi fs.FileInfo, path string) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return insecure("transcript %s is a symbolic link", path)
	case !fi.Mode().IsRegular():
		return insecure("transcript %s is not a regular file (%s)", path, fi.Mode().Type())
	}
	return checkOwnerMode(fi, "transcript", path)
}

// checkOwnerMode refuses fi unless the effective uid owns it and it grants nothing to group or
// others.
func checkOwnerMode(fi fs.FileInfo, what, path string) error {
	uid, ok := ownerUID(fi)
	if !ok {
		return insecure("cannot determine the owner of %s %s on this platform", what, path)
	}
	if euid := os.Geteuid(); uid != uint32(euid) {
		return insecure("%s %s is owned by uid %d, not by this process's uid %d", what, path, uid, euid)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return insecure("%s %s has mode %#o; it must grant nothing to group or others (%#o)", what, path, perm, perm&^0o077)
	}
	return nil
}

// isLoop reports whether err is the ELOOP an O_NOFOLLOW open returns on a symbolic link.
func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }
