package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/airlockhq/airlock/internal/protocol"
)

const (
	dirMode  = 0o700
	fileMode = 0o600
)

func insecure(format string, args ...any) *protocol.Error {
	return protocol.Errorf(protocol.CodeInsecureStatePath, format, args...)
}

// prepareStateDir creates dir (0700, with any missing parents) and checks that it is a real
// directory, owned by the effective uid, with no group or other permission bits. An existing
// directory with a looser mode is refused, not tightened: whoever loosened it may have read or
// planted files in it already.
func prepareStateDir(dir string) error {
	if dir == "" {
		return insecure("state directory path is empty")
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return protocol.Wrap(insecure("cannot create state directory %s", dir), err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return protocol.Wrap(insecure("cannot stat state directory %s", dir), err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return insecure("state directory %s is a symbolic link; use the real directory", dir)
	case !fi.IsDir():
		return insecure("state directory %s is not a directory", dir)
	}
	return checkOwnerMode(fi, "state directory", dir)
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

// checkDBFile checks an existing database file without opening it, so that a device or FIFO
// planted at the path is never opened. A missing file passes: openDBFile creates it.
func checkDBFile(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return protocol.Wrap(insecure("cannot stat state database %s", path), err)
	}
	return checkDBFileInfo(fi, path)
}

func checkDBFileInfo(fi fs.FileInfo, path string) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return insecure("state database %s is a symbolic link", path)
	case !fi.Mode().IsRegular():
		return insecure("state database %s is not a regular file (%s)", path, fi.Mode().Type())
	}
	return checkOwnerMode(fi, "state database", path)
}

// checkEmptyDB refuses a database file of zero bytes in a state directory that holds anything
// else. A first start that crashed before bbolt wrote its first pages leaves such a file in a
// directory with nothing beside it, and starting over on it loses nothing; everything else a
// daemon keeps there (sessions, the audit journal, keys, the bus's store) is written only
// after the database was opened, so beside any of it an empty database was truncated, and
// starting over would forget every session, adapter and room while the rest stays.
func checkEmptyDB(dir, path string) error {
	fi, err := os.Lstat(path)
	if err != nil || fi.Size() != 0 {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read state directory %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.Name() != DBName {
			return corrupt("%s is empty, but %s holds a daemon's earlier state (%s): it was truncated; airlockd will not start over on it: restore it from a backup, or move it aside to start with empty state", path, dir, e.Name())
		}
	}
	return nil
}

// openDBFile is bbolt's Options.OpenFile. It refuses to follow a symbolic link in the last
// component, creates the file 0600 whatever mode bbolt asks for, and checks the open file
// itself, closing the race between checkDBFile and the open.
func openDBFile(path string, flag int, _ os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|openNoFollow, fileMode)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, insecure("state database %s is a symbolic link", path)
		}
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil {
		err = checkDBFileInfo(fi, path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
