package transcript

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/protocol"
)

// Open opens the transcript at path for appending and returns its message entries in order,
// the header excluded.
//
// It refuses, with the code in parentheses: a missing file or directory
// (conversation_identity_missing); a file that is a symbolic link, not a regular file, not
// owned by the effective uid or open to group or others, or a directory that fails the same
// checks Create makes (insecure_state_path); a file over MaxFileBytes, a line over
// MaxLineBytes, an empty line, a line that is not UTF-8 or not strict JSON, a first line that is
// not a header of FormatVersion, a later line that is not a valid message, or more than
// MaxEntries entries (corrupt_transcript, naming the path and line number, never the line).
//
// A last line without its LF is a write torn by a crash: Open drops it, truncates the file
// back to the last complete line, fsyncs, and reports repaired so that the caller can log it.
// Nothing is truncated when the file is refused for any other reason.
//
// ctx is checked between lines, so a caller's deadline bounds the time spent on a huge file;
// the error is then ctx's.
func Open(ctx context.Context, path string) (f *File, entries []Entry, repaired bool, err error) {
	if path == "" {
		return nil, nil, false, missing("no transcript path")
	}
	path, err = filepath.Abs(path)
	if err != nil {
		return nil, nil, false, protocol.Wrap(insecure("cannot resolve transcript path %s", path), err)
	}
	if err := checkDir(filepath.Dir(path)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, false, protocol.Wrap(missing("transcript directory %s does not exist", filepath.Dir(path)), err)
		}
		return nil, nil, false, err
	}
	// Check before opening, so that a FIFO or device planted at the path is never opened, then
	// check the open file again, closing the race between the two.
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, false, protocol.Wrap(missing("transcript %s does not exist", path), err)
		}
		return nil, nil, false, protocol.Wrap(insecure("cannot stat transcript %s", path), err)
	}
	if err := checkFileInfo(fi, path); err != nil {
		return nil, nil, false, err
	}
	osf, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|openNoFollow, 0)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, false, protocol.Wrap(missing("transcript %s does not exist", path), err)
	case isLoop(err):
		return nil, nil, false, insecure("transcript %s is a symbolic link", path)
	default:
		return nil, nil, false, fmt.Errorf("open transcript %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			osf.Close()
		}
	}()
	if fi, err = osf.Stat(); err != nil {
		return nil, nil, false, fmt.Errorf("stat transcript %s: %w", path, err)
	}
	if err := checkFileInfo(fi, path); err != nil {
		return nil, nil, false, err
	}
	if fi.Size() > maxFileBytes {
		return nil, nil, false, corrupt("transcript %s is %d bytes; the limit is %d", path, fi.Size(), maxFileBytes)
	}

	r, err := read(ctx, io.NewSectionReader(osf, 0, fi.Size()), fi.Size(), path)
	if err != nil {
		return nil, nil, false, err
	}
	if r.torn {
		if err := ctx.Err(); err != nil {
			return nil, nil, false, fmt.Errorf("open transcript %s: %w", path, err)
		}
		if err := osf.Truncate(r.size); err != nil {
			return nil, nil, false, fmt.Errorf("repair transcript %s: truncate to %d bytes: %w", path, r.size, err)
		}
		if err := fsync(osf); err != nil {
			return nil, nil, false, fmt.Errorf("repair transcript %s: fsync: %w", path, err)
		}
	}
	f = &File{id: Identity{ID: r.id, File: path}, f: osf, size: r.size, entries: len(r.entries)}
	return f, r.entries, r.torn, nil
}

// OpenIdentity opens the transcript id names, as Open does, and also checks that its header
// names conversation id.ID: a file replaced by another conversation's is refused with
// conversation_identity_missing.
func OpenIdentity(ctx context.Context, id Identity) (*File, []Entry, bool, error) {
	f, entries, repaired, err := Open(ctx, id.File)
	if err != nil {
		return nil, nil, false, err
	}
	if f.id.ID != id.ID {
		f.Close()
		return nil, nil, false, missing("transcript %s holds conversation %s, not %s", f.id.File, f.id.ID, id.ID)
	}
	return f, entries, repaired, nil
}

// readResult is what read finds in a transcript.
type readResult struct {
	id      string
	entries []Entry
	size    int64 // the length of the complete lines: the file's length after repair
	torn    bool  // the file ends with a line without its LF
}

// read parses a whole transcript of size bytes. It holds at most one line (MaxLineBytes) in
// memory besides the entries: an oversized line is counted, not buffered. The read buffer is no
// larger than the file: a restart reopens thousands of mostly small transcripts.
func read(ctx context.Context, src io.Reader, size int64, path string) (readResult, error) {
	var res readResult
	lr := lineReader{br: bufio.NewReaderSize(src, int(min(max(size, 512), 64<<10))), max: maxLineBytes}
	for lineNo := 1; ; lineNo++ {
		if err := ctx.Err(); err != nil {
			return readResult{}, fmt.Errorf("open transcript %s: %w", path, err)
		}
		line, n, err := lr.next()
		switch {
		case errors.Is(err, io.EOF):
			if lineNo == 1 {
				return readResult{}, corrupt("transcript %s is empty; it has no header", path)
			}
			return res, nil
		case errors.Is(err, io.ErrUnexpectedEOF):
			if lineNo == 1 {
				// A crash inside Create: there is nothing to keep, and no header to say
				// what the file is. Leave it for an operator.
				return readResult{}, corrupt("transcript %s ends inside its header line", path)
			}
			res.torn = true
			return res, nil
		case errors.Is(err, errLineTooLong):
			return readResult{}, corrupt("transcript %s line %d is %d bytes; the limit is %d", path, lineNo, n-1, lr.max)
		case err != nil:
			return readResult{}, fmt.Errorf("read transcript %s: %w", path, err)
		}
		switch {
		case len(line) == 0:
			return readResult{}, corrupt("transcript %s line %d is empty", path, lineNo)
		case !utf8.Valid(line):
			return readResult{}, corrupt("transcript %s line %d is not valid UTF-8", path, lineNo)
		}
		if lineNo == 1 {
			h, err := decodeHeader(line)
			if err != nil {
				return readResult{}, protocol.Wrap(corrupt("transcript %s line 1 is not a transcript header of format version %d", path, FormatVersion), err)
			}
			res.id = h.ConversationID
		} else {
			if len(res.entries) == maxEntries {
				return readResult{}, corrupt("transcript %s has more than %d entries (line %d)", path, maxEntries, lineNo)
			}
			e, err := decodeEntry(line)
			if err != nil {
				return readResult{}, protocol.Wrap(corrupt("transcript %s line %d is not a valid message entry", path, lineNo), err)
			}
			res.entries = append(res.entries, e)
		}
		res.size += n
	}
}

var errLineTooLong = errors.New("line too long")

// lineReader splits a stream into LF-terminated lines of at most max bytes (the LF not
// counted). Unlike ndjson.Reader it keeps empty lines and CRs, so that nothing in the file goes
// unchecked, and reports each line's exact length on disk, which repair needs.
type lineReader struct {
	br   *bufio.Reader
	max  int
	line []byte
}

// next returns the next line without its LF, and n, the bytes it took in the stream, LF
// included. At the end of the stream it returns io.EOF, or io.ErrUnexpectedEOF when the stream
// ends inside a line (of any length). A complete line over max is counted, not kept, and
// reported as errLineTooLong.
func (r *lineReader) next() (line []byte, n int64, err error) {
	r.line = r.line[:0]
	tooLong := false
	for {
		chunk, err := r.br.ReadSlice('\n')
		n += int64(len(chunk))
		if !tooLong {
			if len(r.line)+len(chunk) > r.max+1 { // +1: the LF
				tooLong = true
				r.line = r.line[:0]
			} else {
				r.line = append(r.line, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, n, errLineTooLong
			}
			return r.line[:len(r.line)-1], n, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if n == 0 {
				return nil, 0, io.EOF
			}
			return nil, n, io.ErrUnexpectedEOF
		default:
			return nil, n, err
		}
	}
}
