package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/internal/protocol"
)

const (
	dirMode  = 0o700
	fileMode = 0o600

	segPrefix = "seg-"
	segSuffix = ".ndjson"
)

// segmentName is the file name of segment n: seg-0000000000000001.ndjson, so that names sort
// as numbers do.
func segmentName(n uint64) string { return fmt.Sprintf("%s%016d%s", segPrefix, n, segSuffix) }

// parseSegmentName returns the number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	if !strings.HasPrefix(name, segPrefix) || !strings.HasSuffix(name, segSuffix) {
		return 0, false
	}
	digits := name[len(segPrefix) : len(name)-len(segSuffix)]
	if len(digits) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	return n, true
}

// listSegments returns the numbers of dir's segments, ascending. Other files are ignored.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var nums []uint64
	for _, e := range ents {
		if n, ok := parseSegmentName(e.Name()); ok {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	return nums, nil
}

func insecure(format string, args ...any) *protocol.Error {
	return protocol.Errorf(CodeInsecureDir, format, args...)
}

// checkOwned refuses fi unless it is a directory or regular file (as dir says) owned by the
// effective uid with no group or other permission bits.
func checkOwned(fi fs.FileInfo, path string, dir bool) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return insecure("%s is a symbolic link", path)
	case dir && !fi.IsDir():
		return insecure("%s is not a directory", path)
	case !dir && !fi.Mode().IsRegular():
		return insecure("%s is not a regular file", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return insecure("cannot determine the owner of %s", path)
	}
	if euid := os.Geteuid(); st.Uid != uint32(euid) {
		return insecure("%s is owned by uid %d, not by this process's uid %d", path, st.Uid, euid)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return insecure("%s has mode %#o; it must grant nothing to group or others", path, perm)
	}
	return nil
}

// prepareDir creates dir (0700, with missing parents) and checks that it is the owner's alone.
// A looser existing directory is refused, not tightened.
func prepareDir(dir string) error {
	if dir == "" {
		return insecure("audit directory path is empty")
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return protocol.Wrap(insecure("cannot create audit directory %s", dir), err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return protocol.Wrap(insecure("cannot stat audit directory %s", dir), err)
	}
	return checkOwned(fi, dir, true)
}

// openSegment opens a segment for reading without following a symbolic link, and checks it.
func openSegment(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, insecure("%s is a symbolic link", path)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = checkOwned(fi, path, false)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// scanner reads a segment's lines, each bounded by maxRecord. It is not safe for concurrent use.
type scanner struct {
	r    *bufio.Reader
	off  int64  // offset of the next line
	line []byte // the current line, without its newline; valid until the next call
	buf  []byte
}

func newScanner(r io.Reader, off int64) *scanner {
	return &scanner{r: bufio.NewReaderSize(r, 64<<10), off: off}
}

// errTorn reports bytes after the last newline: a line being written, or a torn tail.
var errTorn = errors.New("audit: incomplete last line")

// next reads the next whole line. At the end it returns io.EOF, or errTorn (with s.off still
// at the start of the incomplete line) when bytes without a newline remain. A line longer than
// maxRecord is refused without reading it all into memory.
func (s *scanner) next() error {
	s.buf = s.buf[:0]
	for {
		chunk, err := s.r.ReadSlice('\n')
		s.buf = append(s.buf, chunk...)
		if len(s.buf) > maxRecord+1 {
			return fmt.Errorf("a line at offset %d is longer than %d bytes", s.off, maxRecord)
		}
		switch {
		case err == nil:
			s.line = s.buf[:len(s.buf)-1]
			s.off += int64(len(s.buf))
			return nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(s.buf) == 0 {
				return io.EOF
			}
			return errTorn
		default:
			return err
		}
	}
}

// segmentInfo is what reading one segment found.
type segmentInfo struct {
	number     uint64
	header     *Record // nil when the segment holds no whole record
	headerDig  string
	footer     *Record
	first, end uint64 // seqs of its first and last whole records
	last       string // digest of its last whole record
	records    uint64
	size       int64 // bytes of whole records
	torn       int64 // bytes after them
}

// linkError is a broken link found while reading a segment.
type linkError struct {
	Segment uint64
	Offset  int64
	Seq     uint64
	Reason  string
}

func (e *linkError) Error() string {
	return fmt.Sprintf("%s at offset %d (seq %d): %s", segmentName(e.Segment), e.Offset, e.Seq, e.Reason)
}

// readSegment reads segment n from r, checking every link inside it and that its first record
// links to prevDigest at seq prevSeq+1 (unchecked when prevDigest is "" and prevSeq is 0,
// because the segment before is unknown). It stops at the first broken link, returning a
// *linkError; a torn tail is not an error, it is reported in torn. visit, when not nil, sees
// every record whose links hold, with its digest and offset; an error it returns is a broken
// link at that record.
func readSegment(r io.Reader, n uint64, prevSeq uint64, prevDigest string, visit func(rec *Record, digest string, off int64) error) (*segmentInfo, error) {
	info := &segmentInfo{number: n}
	sc := newScanner(r, 0)
	anchored := prevDigest != "" || prevSeq != 0
	for {
		off := sc.off
		err := sc.next()
		if errors.Is(err, io.EOF) {
			return info, nil
		}
		if errors.Is(err, errTorn) {
			info.torn = int64(len(sc.buf))
			return info, nil
		}
		if err != nil {
			return info, &linkError{Segment: n, Offset: off, Seq: prevSeq + 1, Reason: err.Error()}
		}
		brk := func(seq uint64, format string, args ...any) error {
			return &linkError{Segment: n, Offset: off, Seq: seq, Reason: fmt.Sprintf(format, args...)}
		}
		rec, err := DecodeRecord(sc.line)
		if err != nil {
			return info, brk(prevSeq+1, "not a whole record: %v", err)
		}
		if info.footer != nil {
			return info, brk(rec.Seq, "a record follows the segment's footer")
		}
		if info.records == 0 {
			if rec.Kind != KindHeader {
				return info, brk(rec.Seq, "the segment does not start with a header")
			}
			if rec.Segment.Number != n {
				return info, brk(rec.Seq, "the header names segment %d, the file is segment %d", rec.Segment.Number, n)
			}
		} else if rec.Kind == KindHeader {
			return info, brk(rec.Seq, "a second header inside the segment")
		}
		if anchored || info.records > 0 {
			if rec.Seq != prevSeq+1 {
				return info, brk(rec.Seq, "seq %d follows seq %d", rec.Seq, prevSeq)
			}
			if rec.Prev != prevDigest {
				return info, brk(rec.Seq, "prev does not match the digest of the record before (seq %d)", prevSeq)
			}
		} else if rec.Prev == "" && rec.Seq != 1 {
			return info, brk(rec.Seq, "only the journal's first record may have no prev")
		}
		dig := Digest(sc.line)
		if rec.Kind == KindFooter {
			if rec.Segment.Number != n {
				return info, brk(rec.Seq, "the footer names segment %d, the file is segment %d", rec.Segment.Number, n)
			}
			if rec.Segment.First != info.headerDig {
				return info, brk(rec.Seq, "the footer's first is not the digest of the segment's header")
			}
			if rec.Segment.Records != info.records+1 {
				return info, brk(rec.Seq, "the footer counts %d records, the segment holds %d", rec.Segment.Records, info.records+1)
			}
			info.footer = &rec
		}
		if info.records == 0 {
			info.header = &rec
			info.headerDig = dig
			info.first = rec.Seq
		}
		info.records++
		info.end = rec.Seq
		info.last = dig
		info.size = sc.off
		prevSeq, prevDigest = rec.Seq, dig
		if visit != nil {
			if err := visit(&rec, dig, off); err != nil {
				return info, brk(rec.Seq, "%v", err)
			}
		}
	}
}

// lastLine returns the last whole line of a segment's bytes (for the link into the next
// segment), reading at most the file's final maxRecord+1 bytes.
func lastLine(path string) ([]byte, error) {
	f, err := openSegment(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	start := max(fi.Size()-int64(maxRecord+2), 0)
	b := make([]byte, fi.Size()-start)
	if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, &notClosedError{fmt.Sprintf("%s does not end with a whole line", path)}
	}
	b = b[:len(b)-1]
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:], nil
	}
	if start > 0 {
		return nil, &notClosedError{fmt.Sprintf("%s ends with a line longer than %d bytes", path, maxRecord)}
	}
	return b, nil
}

// notClosedError is lastLine's error for a segment that was read and does not end with a
// whole record, as opposed to one that could not be read.
type notClosedError struct{ msg string }

func (e *notClosedError) Error() string { return e.msg }

// segPath joins dir and segment n's name.
func segPath(dir string, n uint64) string { return filepath.Join(dir, segmentName(n)) }
