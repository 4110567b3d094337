package fsops

import (
	"context"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/airlockhq/airlock/internal/protocol"
	"golang.org/x/sys/unix"
)

// Stat implements fs.stat: the type, size (0 for a directory) and modification time of a
// regular file or directory. Symbolic links fail path_symlink, other objects
// unsupported_file_type; none is opened.
func (r *Root) Stat(ctx context.Context, p StatPayload) (*StatResult, *protocol.Error) {
	if perr := ValidatePath(p.Path); perr != nil {
		return nil, perr
	}
	if perr := r.enter(ctx); perr != nil {
		return nil, perr
	}
	defer r.life.RUnlock()
	fd, st, perr := r.lookup(p.Path)
	if perr != nil {
		return nil, perr
	}
	unix.Close(fd)
	kind, perr := fileKind(st.Mode, "path")
	if perr != nil {
		return nil, perr
	}
	res := &StatResult{Type: kind, ModifiedAt: formatTime(st.Mtim.Sec, st.Mtim.Nsec)}
	if kind == TypeFile {
		res.Size = st.Size
	}
	return res, nil
}

// List implements fs.list: the regular files and directories of a directory, sorted by name in
// byte order, at most maxEntries (default 1000, at most 10000) and within the response budget;
// truncated says whether any were left out. Symbolic links, devices, FIFOs, sockets and names
// no valid path can address (invalid UTF-8, control characters, backslash) are omitted: they
// are never reported as files.
func (r *Root) List(ctx context.Context, p ListPayload) (*ListResult, *protocol.Error) {
	if perr := ValidatePath(p.Path); perr != nil {
		return nil, perr
	}
	max := DefaultListEntries
	if p.MaxEntries != nil {
		if *p.MaxEntries < 1 || *p.MaxEntries > MaxListEntries {
			return nil, argError("maxEntries", "maxEntries must be 1 to %d", MaxListEntries)
		}
		max = *p.MaxEntries
	}
	if perr := r.enter(ctx); perr != nil {
		return nil, perr
	}
	defer r.life.RUnlock()
	fd, perr := r.openDir(p.Path)
	if perr != nil {
		return nil, perr
	}
	defer unix.Close(fd)
	ents, err := readDirents(fd, make([]byte, direntBufSize), nil)
	if err != nil {
		return nil, errnoError(err, "directory")
	}
	slices.SortFunc(ents, func(a, b dirent) int { return strings.Compare(a.name, b.name) })

	res := &ListResult{Entries: []ListEntry{}}
	budget := r.opts.MaxResponseBytes - len(`{"entries":[],"truncated":false}`)
	for i, e := range ents {
		if i%256 == 0 && ctx.Err() != nil {
			return nil, errCanceled()
		}
		if !validName(e.name) {
			continue
		}
		switch e.typ {
		case unix.DT_REG, unix.DT_DIR, unix.DT_UNKNOWN:
		default:
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since getdents
			}
			return nil, errnoError(err, "directory entry")
		}
		kind, perr := fileKind(st.Mode, "entry")
		if perr != nil {
			continue
		}
		le := ListEntry{Name: e.name, Type: kind, ModifiedAt: formatTime(st.Mtim.Sec, st.Mtim.Nsec)}
		if kind == TypeFile {
			le.Size = st.Size
		}
		if len(res.Entries) == max {
			res.Truncated = true
			break
		}
		cost := entryCost(&le)
		if len(res.Entries) > 0 {
			cost++ // comma
		}
		if cost > budget {
			res.Truncated = true
			break
		}
		budget -= cost
		res.Entries = append(res.Entries, le)
	}
	return res, nil
}

// entryCost is the encoded size of a ListEntry.
func entryCost(e *ListEntry) int {
	n := len(`{"name":,"type":"","size":}`) + jsonStringCost(e.Name) + len(e.Type) + intCost(e.Size)
	if e.ModifiedAt != "" {
		n += len(`,"modifiedAt":""`) + len(e.ModifiedAt)
	}
	return n
}

// openDir opens a validated path as a directory for reading entries. A path that exists but is
// not a directory is classified without being opened.
func (r *Root) openDir(p string) (int, *protocol.Error) {
	fd, err := openAt(r.fd, p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOTDIR {
		return -1, errnoError(err, "path")
	}
	return -1, r.notDirectory(p, "path")
}

// notDirectory explains an ENOTDIR from opening p with O_DIRECTORY, which the kernel also
// returns for a trailing symbolic link under O_NOFOLLOW: an O_PATH lookup classifies p.
func (r *Root) notDirectory(p, what string) *protocol.Error {
	pfd, st, perr := r.lookup(p)
	if perr != nil {
		if perr.Code == CodeNotADirectory {
			return protocol.Errorf(CodeNotADirectory, "a component of the %s is not a directory", what)
		}
		return perr
	}
	unix.Close(pfd)
	// The path itself is classified as fs.stat would; a parent that is anything but a
	// directory or a link is simply not a directory.
	if _, perr := fileKind(st.Mode, what); perr != nil && (perr.Code == CodePathSymlink || what == "path") {
		return perr
	}
	return protocol.Errorf(CodeNotADirectory, "%s is not a directory", what)
}

// Read implements fs.read: up to maxBytes (default 64 KiB, at most 4 MiB) of a regular file
// from offset (default 0), as UTF-8 text.
//
// The window's end is cut back to a rune boundary, and further so that the result fits the
// response budget; bytesRead is the number of bytes returned, so offset+bytesRead is the next
// offset. eof is true when the window reaches the end of the file. An offset inside a UTF-8
// sequence fails invalid_argument; a window that is not valid UTF-8 fails not_utf8 (only the
// window is checked, not the rest of the file). An offset at or past the end returns no
// content with eof true. A maxBytes smaller than the character at offset fails
// invalid_argument, so that a client never loops on empty windows.
func (r *Root) Read(ctx context.Context, p ReadPayload) (*ReadResult, *protocol.Error) {
	if perr := ValidatePath(p.Path); perr != nil {
		return nil, perr
	}
	var off, want int64 = 0, DefaultReadBytes
	if p.Offset != nil {
		if *p.Offset < 0 {
			return nil, argError("offset", "offset must not be negative")
		}
		off = *p.Offset
	}
	if p.MaxBytes != nil {
		if *p.MaxBytes < 1 || *p.MaxBytes > MaxContentBytes {
			return nil, argError("maxBytes", "maxBytes must be 1 to %d", MaxContentBytes)
		}
		want = *p.MaxBytes
	}
	if perr := r.enter(ctx); perr != nil {
		return nil, perr
	}
	defer r.life.RUnlock()
	fd, _, perr := openRegular(r.fd, p.Path)
	if perr != nil {
		return nil, perr
	}
	defer unix.Close(fd)

	// Read three bytes before the window, to tell an offset inside a character from invalid
	// content, and one after it, to tell the end of the file without trusting fstat's size.
	lead := min(off, 3)
	var pooled *[]byte
	var buf []byte
	if size := lead + want + 1; size >= minPooledRead {
		pooled = readBuffers.Get().(*[]byte)
		buf = (*pooled)[:size]
	} else {
		buf = make([]byte, size)
	}
	res, perr := r.readWindow(fd, buf, off, lead, want)
	if pooled != nil {
		if res == nil || res.Content == "" {
			readBuffers.Put(pooled)
		} else {
			res.buf = pooled
		}
	}
	return res, perr
}

// readWindow is Read's body from the pread on: buf holds lead bytes before offset off, the
// window of want bytes and one more.
func (r *Root) readWindow(fd int, buf []byte, off, lead, want int64) (*ReadResult, *protocol.Error) {
	n, err := preadFull(fd, buf, off-lead)
	if err != nil {
		return nil, errnoError(err, "file")
	}
	if int64(n) < lead { // offset past the end
		return &ReadResult{EOF: true}, nil
	}
	before, win := buf[:lead], buf[lead:n]
	eof := int64(len(win)) <= want
	if !eof {
		win = win[:want]
	}
	if len(win) > 0 && !utf8.RuneStart(win[0]) {
		// A continuation byte: inside a character if a lead byte before it starts one that
		// spans the offset, else invalid content.
		for i := len(before) - 1; i >= 0; i-- {
			if utf8.RuneStart(before[i]) {
				if r, size := utf8.DecodeRune(buf[i:n]); r != utf8.RuneError && size > len(before)-i {
					return nil, argError("offset", "offset is inside a UTF-8 character")
				}
				break
			}
		}
		return nil, protocol.Errorf(CodeNotUTF8, "file content is not valid UTF-8")
	}
	if !eof {
		// Cut back an incomplete final character.
		for i := len(win) - 1; i >= 0 && i >= len(win)-utf8.UTFMax; i-- {
			if utf8.RuneStart(win[i]) {
				if !utf8.FullRune(win[i:]) {
					win = win[:i]
				}
				break
			}
		}
	}
	cut := len(win) // the window cut to whole characters, before the budget
	// Fit the budget: the fixed members cost at most this much.
	fixed := len(`{"content":,"bytesRead":,"eof":false}`) + intCost(int64(len(win)))
	// Every byte costs at most six (\u00XX), so most windows need no counting, only the
	// UTF-8 check; the others are checked and counted in one pass.
	if budget := r.opts.MaxResponseBytes - fixed; 2+6*len(win) <= budget {
		if !utf8.Valid(win) {
			return nil, protocol.Errorf(CodeNotUTF8, "file content is not valid UTF-8")
		}
	} else {
		k, valid := validJSONPrefix(win, budget)
		if !valid || !utf8.Valid(win[k:]) {
			return nil, protocol.Errorf(CodeNotUTF8, "file content is not valid UTF-8")
		}
		if k < len(win) {
			win, eof = win[:k], false
		}
	}
	// buf is this call's own and is not written again: the content shares it rather than
	// copying up to 4 MiB into a string.
	content := unsafe.String(unsafe.SliceData(win), len(win))
	if content == "" && !eof {
		if cut == 0 {
			return nil, argError("maxBytes", "maxBytes is smaller than the character at offset")
		}
		return nil, protocol.Errorf(CodeTooLarge, "the response budget cannot hold one character").
			With(DetailField, "maxBytes")
	}
	return &ReadResult{Content: content, BytesRead: int64(len(content)), EOF: eof}, nil
}
