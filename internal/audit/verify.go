package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// Break is the first link of a journal that does not hold.
type Break struct {
	Segment string `json:"segment"` // file name
	Offset  int64  `json:"offset"`  // byte offset of the record in it
	Seq     uint64 `json:"seq"`     // seq of the record (or the one expected there)
	Reason  string `json:"reason"`
}

func (b *Break) String() string {
	return fmt.Sprintf("%s at offset %d (seq %d): %s", b.Segment, b.Offset, b.Seq, b.Reason)
}

// AnchorCheck is the outcome of checking an exported head against the journal.
type AnchorCheck struct {
	Seq     uint64 `json:"seq"`
	Digest  string `json:"digest"`
	Checked bool   `json:"checked"` // false: retention removed the segment that held it
	Holds   bool   `json:"holds"`
}

// Report is what Verify found. Break is nil when every link holds.
type Report struct {
	Dir      string `json:"dir"`
	Segments int    `json:"segments"`
	Records  uint64 `json:"records"`
	FirstSeq uint64 `json:"firstSeq"`
	LastSeq  uint64 `json:"lastSeq"`
	Head     Head   `json:"head"`
	// Unanchored is true when the oldest segment links to a segment that is gone (retention
	// deletes the oldest): the chain is checked from there on, not before.
	Unanchored bool `json:"unanchored"`
	// TornBytes are bytes after the newest segment's last whole record: a record being written,
	// or cut by a crash (Open cuts them), or the newest segment truncated mid-record.
	TornBytes int64        `json:"tornBytes,omitempty"`
	Anchor    *AnchorCheck `json:"anchor,omitempty"`
	Break     *Break       `json:"break,omitempty"`
}

// OK reports whether the journal verified: no broken link, and the anchor (if any) holds or
// could not be checked because retention removed it.
func (r *Report) OK() bool {
	return r.Break == nil && (r.Anchor == nil || !r.Anchor.Checked || r.Anchor.Holds)
}

// Verify checks every link of the journal in dir: each record's seq and prev against the one
// before, each segment's header (its number, its link to the previous segment's footer) and
// footer (its first digest and record count), that only the newest segment lacks a footer and
// that no segment number is missing. It stops at the first broken link, which Report.Break
// names. With an anchor (an exported head), it also checks that the journal still holds that
// record: a journal cut after it, or rewritten before it, fails. The error is for what stops
// the check itself (an unreadable directory), not for a broken link.
//
// Verify reads one line at a time: its memory does not grow with the journal.
func Verify(dir string, anchor *Anchor) (Report, error) {
	return verify(dir, anchor, 0)
}

// VerifyTail is Verify of the newest two segments only, what the daemon runs at start: it
// finds a tampered or cut tail (and the link into the newest segment) in time bounded by two
// segments, whatever the journal's length.
func VerifyTail(dir string) (Report, error) {
	return verify(dir, nil, 2)
}

// verifyAttempts bounds how often verify starts again because retention removed a segment it
// had listed: a daemon appending at its fastest fills a 16 MiB segment in far longer than
// verify takes to read one.
const verifyAttempts = 3

func verify(dir string, anchor *Anchor, tail int) (Report, error) {
	for attempt := 1; ; attempt++ {
		rep, err := verifyOnce(dir, anchor, tail)
		var r *removedError
		if !errors.As(err, &r) || attempt == verifyAttempts {
			return rep, err
		}
	}
}

// removedError is verifyOnce's error when a segment it listed is gone and no older one is
// left: retention removed it while the daemon rotated. The check starts again from the
// segments left.
type removedError struct{ segment uint64 }

func (e *removedError) Error() string {
	return fmt.Sprintf("segment %s was removed by retention while it was being checked", segmentName(e.segment))
}

// verifyListed, set by tests only, runs after verifyOnce listed the segments.
var verifyListed func()

func verifyOnce(dir string, anchor *Anchor, tail int) (Report, error) {
	rep := Report{Dir: dir}
	nums, err := listSegments(dir)
	if err != nil {
		return rep, err
	}
	if verifyListed != nil {
		verifyListed()
	}
	if tail > 0 && len(nums) > tail {
		nums = nums[len(nums)-tail:]
	}
	rep.Segments = len(nums)
	if anchor != nil {
		rep.Anchor = &AnchorCheck{Seq: anchor.Seq, Digest: anchor.Digest}
	}
	var prevSeq uint64
	var prevDig string
	var lastTime time.Time
	var end int64 // the offset after the newest whole record, in rep.Head.Segment
	// awaiting holds the started records checked so far that have no outcome yet: an outcome
	// must end one of them, unless it refers to a record before the checked range. Started
	// records a crash cut short stay in it; it holds no more than the effects in flight.
	awaiting := map[uint64]struct{}{}
	var firstChecked uint64
	for i, n := range nums {
		name := segmentName(n)
		if i > 0 && n != nums[i-1]+1 {
			rep.Break = &Break{Segment: name, Seq: prevSeq + 1, Reason: fmt.Sprintf("segment %s is missing", segmentName(nums[i-1]+1))}
			return rep, nil
		}
		f, err := openSegment(segPath(dir, n))
		if errors.Is(err, fs.ErrNotExist) {
			// Gone since the listing. Retention deletes the oldest segments only: with none
			// older left, this is retention; with one left, it was deleted from the middle.
			now, lerr := listSegments(dir)
			if lerr != nil {
				return rep, lerr
			}
			if len(now) == 0 || now[0] > n {
				return rep, &removedError{n}
			}
			rep.Break = &Break{Segment: name, Seq: prevSeq + 1, Reason: fmt.Sprintf("segment %s was deleted while it was being checked", name)}
			return rep, nil
		}
		if err != nil {
			return rep, err
		}
		info, err := readSegment(f, n, prevSeq, prevDig, func(rec *Record, dig string, _ int64) error {
			if firstChecked == 0 {
				firstChecked = rec.Seq
			}
			switch rec.Kind {
			case KindStarted:
				awaiting[rec.Seq] = struct{}{}
			case KindOutcome:
				if _, ok := awaiting[rec.Ref]; !ok && rec.Ref >= firstChecked {
					return fmt.Errorf("the outcome of seq %d ends no started record awaiting one (an effect recorded twice, or a record edited)", rec.Ref)
				}
				delete(awaiting, rec.Ref)
			}
			lastTime = rec.Time
			if rep.Anchor != nil && rec.Seq == rep.Anchor.Seq {
				rep.Anchor.Checked = true
				rep.Anchor.Holds = dig == rep.Anchor.Digest
			}
			return nil
		})
		f.Close()
		if info.records > 0 {
			if rep.FirstSeq == 0 {
				rep.FirstSeq = info.first
				rep.Unanchored = info.header.Prev != ""
			}
			rep.Records += info.records
			rep.LastSeq = info.end
			rep.Head = Head{Seq: info.end, Digest: info.last, Segment: n, Time: lastTime}
			end = info.size
		}
		if err != nil {
			var le *linkError
			if !errors.As(err, &le) {
				return rep, err
			}
			rep.Break = &Break{Segment: name, Offset: le.Offset, Seq: le.Seq, Reason: le.Reason}
			return rep, nil
		}
		last := i == len(nums)-1
		switch {
		case info.records == 0 && !last:
			rep.Break = &Break{Segment: name, Seq: prevSeq + 1, Reason: "the segment holds no whole record"}
			return rep, nil
		case info.footer == nil && !last:
			rep.Break = &Break{Segment: name, Offset: info.size, Seq: info.end + 1, Reason: "the segment ends without its footer (truncated, or a later segment was spliced in)"}
			return rep, nil
		case last:
			rep.TornBytes = info.torn
		}
		if info.records > 0 {
			prevSeq, prevDig = info.end, info.last
		}
	}
	if rep.Anchor != nil && !rep.Anchor.Checked && rep.Anchor.Seq > rep.LastSeq {
		rep.Anchor.Checked = true // it should be here and is not: the end was cut
		rep.Break = &Break{Segment: segmentName(rep.Head.Segment), Offset: end, Seq: rep.LastSeq + 1,
			Reason: fmt.Sprintf("the journal ends at seq %d, before the exported head at seq %d: its newest records were removed", rep.LastSeq, rep.Anchor.Seq)}
	}
	return rep, nil
}
