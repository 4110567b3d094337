package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
)

// Query selects records. The zero value selects every effect and decision record.
type Query struct {
	Since   time.Time // records at or after this time
	Session string    // records whose actor is this session
	Room    string    // records whose actor is in this room
	Door    Door      // records that entered at this door
	Marks   bool      // also segment headers and footers (which no other filter selects)
}

// Match reports whether rec is selected.
func (q *Query) Match(rec *Record) bool {
	if rec.Kind == KindHeader || rec.Kind == KindFooter {
		return q.Marks && q.Session == "" && q.Room == "" && q.Door == "" && !rec.Time.Before(q.Since)
	}
	var a Actor
	if rec.Actor != nil {
		a = *rec.Actor
	}
	return !rec.Time.Before(q.Since) &&
		(q.Session == "" || a.Session == q.Session) &&
		(q.Room == "" || a.Room == q.Room) &&
		(q.Door == "" || rec.Door == q.Door)
}

// FollowPoll is how often Read looks for new records and segments while following.
const FollowPoll = 200 * time.Millisecond

// Read calls fn with every record in dir that q selects, oldest first, and the line it was
// decoded from (valid only during the call). Without follow it returns after the newest whole
// record; with follow it then waits for new records, across rotation, until ctx is done (and
// returns nil then). It holds one line at a time, and never writes to dir: it runs as the
// operator beside a daemon that appends. Segments that end before q.Since are skipped unread.
// A line that is not a record fails with CodeCorrupt; links are Verify's concern.
func Read(ctx context.Context, dir string, q Query, follow bool, fn func(line []byte, rec *Record) error) error {
	nums, err := listSegments(dir)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(CodeCorrupt, "cannot list the audit directory %s", dir), err)
	}
	start := 0
	if !q.Since.IsZero() {
		// Segment i ends before segment i+1's header; skip it when that header is before Since.
		for start+1 < len(nums) {
			t, ok := headerTime(dir, nums[start+1])
			if !ok || !t.Before(q.Since) {
				break
			}
			start++
		}
	}
	if len(nums) == 0 && !follow {
		return NoJournal(dir)
	}
	var n uint64
	if start < len(nums) {
		n = nums[start]
	}
	dirInfo, _ := os.Stat(dir) // nil when it went meanwhile: readOne then fails
	for {
		if n == 0 {
			if !follow {
				return nil
			}
			if n, err = waitSegment(ctx, dir, 0); n == 0 || err != nil {
				return err
			}
		}
		closed, err := readOne(ctx, dir, n, q, follow, fn)
		if errors.Is(err, errReplaced) {
			if fi, serr := os.Stat(dir); serr == nil && dirInfo != nil && !os.SameFile(fi, dirInfo) {
				// The journal was moved aside and a new one started at its path: follow
				// the new one from its start.
				dirInfo, n = fi, 0
				continue
			}
			// Opening the journal removed a newest segment that held no whole record
			// (its creation was interrupted) and started it again: read it anew.
			if n, err = waitSegment(ctx, dir, n-1); n == 0 || err != nil {
				return err
			}
			continue
		}
		if err != nil || ctx.Err() != nil {
			return err
		}
		if !closed && !follow {
			return nil
		}
		next, err := nextSegment(dir, n)
		if err != nil {
			return err
		}
		if next == 0 {
			if !follow {
				return nil
			}
			if next, err = waitSegment(ctx, dir, n); next == 0 || err != nil {
				return err
			}
		}
		n = next
	}
}

// readOne reads segment n from its start. It returns closed once it read the footer; without
// it, it returns at the end (not following) or keeps reading as the segment grows until a
// footer comes, the segment is gone and a later one exists, or ctx is done.
func readOne(ctx context.Context, dir string, n uint64, q Query, follow bool, fn func([]byte, *Record) error) (closed bool, err error) {
	path := segPath(dir, n)
	f, err := openSegment(path)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil // retention removed it: go on with the next
	}
	if err != nil {
		return false, segmentError(path, err)
	}
	defer f.Close()
	sc := newScanner(f, 0)
	sawNext := false
	for {
		err := sc.next()
		if err == nil {
			rec, derr := DecodeRecord(sc.line)
			if derr != nil {
				return false, protocol.Wrap(protocol.Errorf(CodeCorrupt, "%s at offset %d is not a record", segmentName(n), sc.off-int64(len(sc.line))-1), derr)
			}
			if q.Match(&rec) {
				if err := fn(sc.line, &rec); err != nil {
					return false, err
				}
			}
			if rec.Kind == KindFooter {
				return true, nil
			}
			continue
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, errTorn) {
			return false, protocol.Wrap(protocol.Errorf(CodeCorrupt, "cannot read %s", path), err)
		}
		if !follow {
			return false, nil
		}
		// A later segment exists: the footer is written before it is created, so one more
		// read finds the footer; if it still does not, this segment was cut, and the next
		// goes on (Verify reports the cut).
		if next, _ := nextSegment(dir, n); next != 0 {
			if sawNext {
				return true, nil
			}
			sawNext = true
		} else if !sameFile(f, path) {
			return false, errReplaced
		} else if !sleep(ctx, FollowPoll) {
			return false, nil
		}
		if _, err := f.Seek(sc.off, io.SeekStart); err != nil {
			return false, protocol.Wrap(protocol.Errorf(CodeCorrupt, "cannot read %s", path), err)
		}
		sc = newScanner(f, sc.off)
	}
}

// NoJournal is the error of reading or verifying a directory that holds no segment: a
// journal always holds one from its Open on, so this is the wrong directory (a state
// directory, whose journal is in its audit/, is named with a hint) or one whose segments were
// all deleted.
func NoJournal(dir string) error {
	hint := ""
	if fi, err := os.Stat(DirIn(dir)); err == nil && fi.IsDir() {
		hint = fmt.Sprintf(" (a state directory? its journal is %s)", DirIn(dir))
	}
	return protocol.Errorf(CodeCorrupt, "%s holds no audit journal: no segment file%s", dir, hint)
}

// errReplaced is readOne's error, following, when the newest segment's path no longer names
// the file it reads: the segment was removed, or the directory moved aside.
var errReplaced = errors.New("audit: the segment followed was replaced")

// sameFile reports whether path still names the file f reads.
func sameFile(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	pi, err := os.Lstat(path)
	return err == nil && os.SameFile(fi, pi)
}

// nextSegment returns the first segment after n in dir, or 0.
func nextSegment(dir string, n uint64) (uint64, error) {
	nums, err := listSegments(dir)
	if err != nil {
		return 0, protocol.Wrap(protocol.Errorf(CodeCorrupt, "cannot list the audit directory %s", dir), err)
	}
	for _, m := range nums {
		if m > n {
			return m, nil
		}
	}
	return 0, nil
}

// waitSegment waits for a segment after n; it returns 0 when ctx is done first.
func waitSegment(ctx context.Context, dir string, n uint64) (uint64, error) {
	for {
		next, err := nextSegment(dir, n)
		if next != 0 || err != nil {
			return next, err
		}
		if !sleep(ctx, FollowPoll) {
			return 0, nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// headerTime returns the time of segment n's header.
func headerTime(dir string, n uint64) (time.Time, bool) {
	f, err := openSegment(segPath(dir, n))
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := newScanner(f, 0)
	if sc.next() != nil {
		return time.Time{}, false
	}
	rec, err := DecodeRecord(sc.line)
	if err != nil || rec.Kind != KindHeader {
		return time.Time{}, false
	}
	return rec.Time, true
}
