package fsops

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/protocol"
	"golang.org/x/sys/unix"
)

// tempPrefix names the temporary files of atomic replacement. A crash between creating one and
// renaming it over the target leaves it behind, in the target's directory.
const tempPrefix = ".airlock-tmp-"

// newFileMode is the mode of a file fs.write creates, before the process umask.
const newFileMode = 0o644

// Write implements fs.write. create defaults to true and overwrite to false: writing an
// existing file without overwrite fails file_exists, a missing file with create false fails
// not_found, and a missing parent directory fails parent_missing (directories are never
// created). With expectedDigest, the SHA-256 of the current bytes must match or nothing is
// written (digest_mismatch; a missing file never matches).
//
// The file is replaced atomically: the content goes to a new temporary file in the same
// directory (O_CREAT|O_EXCL beneath the root), which is fsynced and renamed over the target,
// and then the directory is fsynced. A concurrent reader, or a crash, sees the old content or
// the new, never a mix. An existing file's permission bits (0777; set-id and sticky bits are
// dropped) and, where the process may, its owner are kept; a new file gets 0644 less the umask.
// Replacing a hard-linked file breaks the link: other names keep the old content.
func (r *Root) Write(ctx context.Context, p WritePayload) (*WriteResult, *protocol.Error) {
	if perr := ValidatePath(p.Path); perr != nil {
		return nil, perr
	}
	if len(p.Content) > MaxContentBytes {
		return nil, protocol.Errorf(CodeTooLarge, "content exceeds %d bytes", MaxContentBytes).With(DetailField, "content")
	}
	if !utf8.ValidString(p.Content) {
		return nil, protocol.Errorf(CodeNotUTF8, "content is not valid UTF-8").With(DetailField, "content")
	}
	if perr := checkDigestArg(p.ExpectedDigest); perr != nil {
		return nil, perr
	}
	create := p.Create == nil || *p.Create
	overwrite := p.Overwrite != nil && *p.Overwrite
	if p.Path == "." {
		return nil, protocol.Errorf(CodeNotAFile, "path is a directory")
	}
	if perr := r.enter(ctx); perr != nil {
		return nil, perr
	}
	defer r.life.RUnlock()
	unlock := r.lockPath(p.Path)
	defer unlock()

	dir, leaf := splitPath(p.Path)
	dfd, perr := r.openParent(dir)
	if perr != nil {
		return nil, perr
	}
	defer unix.Close(dfd)

	cur, perr := openExisting(dfd, leaf)
	if perr != nil {
		return nil, perr
	}
	if cur != nil {
		defer unix.Close(cur.fd)
		if !overwrite {
			return nil, protocol.Errorf(CodeFileExists, "file exists and overwrite is false")
		}
	} else if !create {
		return nil, protocol.Errorf(CodeNotFound, "file does not exist and create is false")
	}
	if p.ExpectedDigest != nil {
		if cur == nil {
			return nil, protocol.Errorf(CodeDigestMismatch, "expectedDigest given but the file does not exist")
		}
		d, perr := digestFile(cur.fd)
		if perr != nil {
			return nil, perr
		}
		if d != *p.ExpectedDigest {
			return nil, protocol.Errorf(CodeDigestMismatch, "the file's digest differs from expectedDigest")
		}
	}
	if ctx.Err() != nil {
		return nil, errCanceled()
	}
	content := []byte(p.Content)
	if perr := replace(dfd, leaf, content, cur, !r.noSync); perr != nil {
		return nil, perr
	}
	return &WriteResult{Created: cur == nil, BytesWritten: int64(len(content)), Digest: digest(content)}, nil
}

// Edit implements fs.edit: exact replacements applied in order to a UTF-8 file, each oldText
// occurring exactly once (overlapping occurrences count) in the text as the previous edits left
// it, else edit_not_found or edit_ambiguous with details.edit naming the edit. All or nothing:
// on any failure the file is untouched. The guard and the atomic replacement are fs.write's.
func (r *Root) Edit(ctx context.Context, p EditPayload) (*EditResult, *protocol.Error) {
	if perr := ValidatePath(p.Path); perr != nil {
		return nil, perr
	}
	if perr := CheckEdits(p.Edits); perr != nil {
		return nil, perr
	}
	if perr := checkDigestArg(p.ExpectedDigest); perr != nil {
		return nil, perr
	}
	if p.Path == "." {
		return nil, protocol.Errorf(CodeNotAFile, "path is a directory")
	}
	if perr := r.enter(ctx); perr != nil {
		return nil, perr
	}
	defer r.life.RUnlock()
	unlock := r.lockPath(p.Path)
	defer unlock()

	dir, leaf := splitPath(p.Path)
	dfd, perr := r.openParent(dir)
	if perr != nil {
		return nil, perr
	}
	defer unix.Close(dfd)
	cur, perr := openExisting(dfd, leaf)
	if perr != nil {
		return nil, perr
	}
	if cur == nil {
		return nil, protocol.Errorf(CodeNotFound, "file does not exist")
	}
	defer unix.Close(cur.fd)
	limit := r.opts.MaxEditFileBytes
	data, perr := readAll(cur.fd, cur.st.Size, limit)
	if perr != nil {
		return nil, perr
	}
	if p.ExpectedDigest != nil && digest(data) != *p.ExpectedDigest {
		return nil, protocol.Errorf(CodeDigestMismatch, "the file's digest differs from expectedDigest")
	}
	if !utf8.Valid(data) {
		return nil, protocol.Errorf(CodeNotUTF8, "file content is not valid UTF-8")
	}
	text, perr := ApplyEdits(string(data), p.Edits, limit)
	if perr != nil {
		return nil, perr
	}
	if ctx.Err() != nil {
		return nil, errCanceled()
	}
	out := []byte(text)
	if perr := replace(dfd, leaf, out, cur, !r.noSync); perr != nil {
		return nil, perr
	}
	return &EditResult{Replacements: len(p.Edits), Digest: digest(out)}, nil
}

func checkDigestArg(d *string) *protocol.Error {
	if d == nil {
		return nil
	}
	if len(*d) != 64 || strings.Trim(*d, "0123456789abcdef") != "" {
		return argError("expectedDigest", "expectedDigest must be 64 lowercase hex digits")
	}
	return nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// openParent opens the parent directory of a mutation's leaf.
func (r *Root) openParent(dir string) (int, *protocol.Error) {
	fd, err := openAt(r.fd, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == nil {
		return fd, nil
	}
	if err == unix.ENOTDIR {
		return -1, r.notDirectory(dir, "parent directory")
	}
	perr := errnoError(err, "parent directory")
	if perr.Code == CodeNotFound {
		return -1, protocol.Errorf(CodeParentMissing, "parent directory does not exist")
	}
	return -1, perr
}

// existing is an open regular file that a mutation replaces.
type existing struct {
	fd int
	st unix.Stat_t
}

// openExisting opens leaf in dfd for reading when it exists, and returns nil when it does not.
// Anything but a regular file fails.
func openExisting(dfd int, leaf string) (*existing, *protocol.Error) {
	fd, st, perr := openRegular(dfd, leaf)
	if perr != nil {
		if perr.Code == CodeNotFound {
			return nil, nil
		}
		return nil, perr
	}
	return &existing{fd: fd, st: st}, nil
}

// digestFile hashes the whole file open on fd without holding it in memory.
func digestFile(fd int) (string, *protocol.Error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	var off int64
	for {
		n, err := unix.Pread(fd, buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", errnoError(err, "file")
		}
		if n == 0 {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		h.Write(buf[:n])
		off += int64(n)
	}
}

// readAll reads a whole file of the given size (a hint) into memory, failing too_large past
// limit.
func readAll(fd int, size int64, limit int) ([]byte, *protocol.Error) {
	if size > int64(limit) {
		return nil, protocol.Errorf(CodeTooLarge, "file exceeds %d bytes", limit)
	}
	buf := make([]byte, 0, size+1)
	var off int64
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Pread(fd, buf[len(buf):cap(buf)], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, errnoError(err, "file")
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		off += int64(n)
		if len(buf) > limit {
			return nil, protocol.Errorf(CodeTooLarge, "file exceeds %d bytes", limit)
		}
	}
}

// replace atomically gives leaf in dfd the content data: a temporary file created
// O_CREAT|O_EXCL beneath dfd, written, given the old file's mode and owner, fsynced and renamed
// over leaf; then dfd is fsynced. With cur nil the rename refuses to replace a file that
// appeared meanwhile (file_exists).
func replace(dfd int, leaf string, data []byte, cur *existing, sync bool) *protocol.Error {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	tmp := tempPrefix + hex.EncodeToString(rnd[:])
	// An existing file's replacement starts owner-only, so that content meant for a file of
	// mode 0600 is never readable by others under the temporary name; a new file gets its final
	// mode from the kernel (newFileMode less the umask) at creation.
	var mode uint64 = 0o600
	if cur == nil {
		mode = newFileMode
	}
	tfd, err := openAt(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, mode)
	if err != nil {
		return errnoError(err, "temporary file")
	}
	committed := false
	defer func() {
		if !committed {
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	perr := fill(tfd, data, cur, sync)
	if cerr := unix.Close(tfd); cerr != nil && perr == nil {
		perr = errnoError(cerr, "temporary file")
	}
	if perr != nil {
		return perr
	}
	if cur != nil {
		err = unix.Renameat(dfd, tmp, dfd, leaf)
	} else {
		err = unix.Renameat2(dfd, tmp, dfd, leaf, unix.RENAME_NOREPLACE)
		if err == unix.EINVAL { // filesystem without RENAME_NOREPLACE: link is as exclusive
			if err = unix.Linkat(dfd, tmp, dfd, leaf, 0); err == nil {
				unix.Unlinkat(dfd, tmp, 0)
			}
		}
	}
	if err != nil {
		if err == unix.EEXIST {
			return protocol.Errorf(CodeFileExists, "file was created concurrently")
		}
		return errnoError(err, "file")
	}
	committed = true
	if !sync {
		return nil
	}
	if err := unix.Fsync(dfd); err != nil {
		return errnoError(err, "directory")
	}
	return nil
}

func fill(fd int, data []byte, cur *existing, sync bool) *protocol.Error {
	if cur != nil {
		// Keep the owner where the process may (as root); otherwise the writer owns the file.
		if err := unix.Fchown(fd, int(cur.st.Uid), int(cur.st.Gid)); err != nil && err != unix.EPERM {
			return errnoError(err, "temporary file")
		}
	}
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return errnoError(err, "temporary file")
		}
		data = data[n:]
	}
	if cur != nil {
		if err := unix.Fchmod(fd, cur.st.Mode&0o777); err != nil {
			return errnoError(err, "temporary file")
		}
	}
	if !sync {
		return nil
	}
	if err := unix.Fsync(fd); err != nil {
		return errnoError(err, "temporary file")
	}
	return nil
}
