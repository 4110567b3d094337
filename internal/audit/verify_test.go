package audit

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/protocol"
)

// journalOf writes n fs.writes into a journal with small segments and returns its directory
// and head.
func journalOf(t *testing.T, n int, tag string) (string, Head) {
	t.Helper()
	dir := newDir(t)
	j, _, err := Open(dir, Options{MaxSegmentBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		write(t, j, "s", fmt.Sprint(tag, i))
	}
	h := j.Head()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if nums := mustList(t, dir); len(nums) < 4 {
		t.Fatalf("%d segments; the test needs at least 4", len(nums))
	}
	return dir, h
}

func lines(t *testing.T, dir string, n uint64) [][]byte {
	t.Helper()
	b, err := os.ReadFile(segPath(dir, n))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte("\n"))
}

func writeLines(t *testing.T, dir string, n uint64, ls [][]byte) {
	t.Helper()
	if err := os.WriteFile(segPath(dir, n), bytes.Join(ls, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

func seqOf(t *testing.T, line []byte) uint64 {
	t.Helper()
	r, err := DecodeRecord(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	return r.Seq
}

func TestVerifyFindsTheFirstBrokenLink(t *testing.T) {
	for _, c := range []struct {
		name    string
		tamper  func(t *testing.T, dir string) (seg uint64, seq uint64)
		reason  string
		anchor  bool // verify against the head exported before the tampering
		tailToo bool // the tampering is in the newest two segments
	}{
		{name: "untouched"},
		{name: "edited byte", reason: "prev does not match", tamper: func(t *testing.T, dir string) (uint64, uint64) {
			ls := lines(t, dir, 2)
			ls[2] = bytes.Replace(ls[2], []byte(`"path":"f`), []byte(`"path":"g`), 1)
			writeLines(t, dir, 2, ls)
			return 2, seqOf(t, ls[3])
		}},
		{name: "deleted record", reason: "follows seq", tamper: func(t *testing.T, dir string) (uint64, uint64) {
			ls := lines(t, dir, 2)
			want := seqOf(t, ls[3])
			writeLines(t, dir, 2, append(ls[:2:2], ls[3:]...))
			return 2, want
		}},
		{name: "swapped pair", reason: "follows seq", tamper: func(t *testing.T, dir string) (uint64, uint64) {
			ls := lines(t, dir, 2)
			ls[2], ls[3] = ls[3], ls[2]
			writeLines(t, dir, 2, ls)
			return 2, seqOf(t, ls[2])
		}},
		{name: "spliced segment", reason: "prev does not match", tamper: func(t *testing.T, dir string) (uint64, uint64) {
			other, _ := journalOf(t, 40, "x")
			b, err := os.ReadFile(segPath(other, 2))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(segPath(dir, 2), b, 0o600); err != nil {
				t.Fatal(err)
			}
			return 2, seqOf(t, lines(t, dir, 2)[0])
		}},
		{name: "truncated segment", reason: "without its footer", tamper: func(t *testing.T, dir string) (uint64, uint64) {
			ls := lines(t, dir, 2)
			writeLines(t, dir, 2, ls[:4])
			return 2, seqOf(t, ls[3]) + 1
		}},
		{name: "deleted segment", reason: "is missing", tamper: func(t *testing.T, dir string) (uint64, uint64) {
			last := lines(t, dir, 2)
			if err := os.Remove(segPath(dir, 3)); err != nil {
				t.Fatal(err)
			}
			return 4, seqOf(t, last[len(last)-2]) + 1
		}},
		{name: "newest records cut", reason: "before the exported head", anchor: true, tailToo: true, tamper: func(t *testing.T, dir string) (uint64, uint64) {
			nums := mustList(t, dir)
			n := nums[len(nums)-1]
			ls := lines(t, dir, n)
			keep := ls[:len(ls)-3] // the last element is the empty rest after the final newline
			writeLines(t, dir, n, keep)
			return n, seqOf(t, keep[len(keep)-1]) + 1
		}},
		{name: "newest record edited", anchor: true, tailToo: true, tamper: func(t *testing.T, dir string) (uint64, uint64) {
			nums := mustList(t, dir)
			n := nums[len(nums)-1]
			ls := lines(t, dir, n)
			ls[len(ls)-2] = bytes.Replace(ls[len(ls)-2], []byte(`"outcome":"ok"`), []byte(`"outcome":"no"`), 1)
			writeLines(t, dir, n, ls)
			return 0, 0 // no link breaks: only the anchor finds it
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, head := journalOf(t, 40, "f")
			var seg, seq uint64
			if c.tamper != nil {
				seg, seq = c.tamper(t, dir)
			}
			var anchor *Anchor
			if c.anchor {
				a, err := ParseAnchor(head.String())
				if err != nil {
					t.Fatal(err)
				}
				anchor = &a
			}
			rep, err := Verify(dir, anchor)
			if err != nil {
				t.Fatal(err)
			}
			if c.tamper == nil {
				if !rep.OK() || rep.Head.Seq != head.Seq || rep.Head.Digest != head.Digest || rep.FirstSeq != 1 || rep.Unanchored {
					t.Fatalf("untouched journal: %+v break %+v", rep, rep.Break)
				}
				return
			}
			if rep.OK() {
				t.Fatalf("verify passed a journal with a %s", c.name)
			}
			if c.reason == "" {
				if rep.Break != nil || !rep.Anchor.Checked || rep.Anchor.Holds {
					t.Fatalf("report %+v anchor %+v", rep, rep.Anchor)
				}
				return
			}
			b := rep.Break
			if b == nil || b.Segment != segmentName(seg) || b.Seq != seq || !strings.Contains(b.Reason, c.reason) {
				t.Fatalf("break %+v, want %s seq %d %q", b, segmentName(seg), seq, c.reason)
			}
			// Without the anchor, a cut at a record boundary of the newest segment is invisible.
			if c.anchor {
				if rep, _ := Verify(dir, nil); !rep.OK() {
					t.Fatalf("without the anchor: %+v", rep.Break)
				}
				return
			}
			tail, err := VerifyTail(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tail.OK() == c.tailToo {
				t.Fatalf("VerifyTail ok=%v for a %s in segment %d of %d", tail.OK(), c.name, seg, len(mustList(t, dir)))
			}
		})
	}
}

func TestOpenRefusesABrokenTail(t *testing.T) {
	dir, _ := journalOf(t, 40, "f")
	nums := mustList(t, dir)
	n := nums[len(nums)-1]
	ls := lines(t, dir, n)
	ls[1], ls[2] = ls[2], ls[1]
	writeLines(t, dir, n, ls)
	_, _, err := Open(dir, Options{})
	wantCode(t, err, CodeChainBroken)
	if tail, _ := VerifyTail(dir); tail.OK() {
		t.Fatal("VerifyTail passed a swapped pair in the newest segment")
	}
}

func TestOpenRefusesAnUnclosedOlderSegment(t *testing.T) {
	dir, _ := journalOf(t, 40, "f")
	nums := mustList(t, dir)
	n := nums[len(nums)-2]
	ls := lines(t, dir, n)
	writeLines(t, dir, n, ls[:len(ls)-2]) // drop its footer
	_, _, err := Open(dir, Options{})
	wantCode(t, err, CodeChainBroken)
}

// TestVerifyNamesWhereACutJournalEnds: a journal cut before an exported head breaks where
// its newest whole record ends, the offset at which the missing records were. The break
// named offset 0, the start of the segment's header.
func TestVerifyNamesWhereACutJournalEnds(t *testing.T) {
	dir, head := journalOf(t, 40, "f")
	nums := mustList(t, dir)
	n := nums[len(nums)-1]
	ls := lines(t, dir, n)
	keep := ls[:len(ls)-3] // the last element is the empty rest after the final newline
	writeLines(t, dir, n, keep)
	rep, err := Verify(dir, &Anchor{Seq: head.Seq, Digest: head.Digest})
	if err != nil {
		t.Fatal(err)
	}
	if b := rep.Break; b == nil || b.Segment != segmentName(n) || b.Offset != int64(len(bytes.Join(keep, nil))) {
		t.Fatalf("break %+v, want %s at offset %d", b, segmentName(n), len(bytes.Join(keep, nil)))
	}
}

// TestVerifyWhileRetentionRemovesTheOldest: a segment removed by retention after Verify listed
// the journal (the daemon rotated meanwhile) is not a failure: Verify checks what is left. It
// failed with the segment's "no such file or directory", so airlock audit verify of a live
// journal failed now and then. A segment deleted from the middle is still a break.
func TestVerifyWhileRetentionRemovesTheOldest(t *testing.T) {
	t.Cleanup(func() { verifyListed = nil })
	dir, _ := journalOf(t, 40, "f")
	nums := mustList(t, dir)
	removed := 0
	verifyListed = func() {
		if removed < 2 { // retention twice, the second during the check that starts again
			if err := os.Remove(segPath(dir, nums[removed])); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	rep, err := Verify(dir, nil)
	if err != nil || !rep.OK() || !rep.Unanchored || rep.Segments != len(nums)-2 {
		t.Fatalf("verify while retention removes the oldest: %v, %+v break %+v", err, rep, rep.Break)
	}

	middle := nums[len(nums)/2]
	verifyListed = func() {
		verifyListed = nil
		if err := os.Remove(segPath(dir, middle)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = Verify(dir, nil)
	if err != nil || rep.OK() || rep.Break.Segment != segmentName(middle) {
		t.Fatalf("verify while a middle segment is deleted: %v, break %+v", err, rep.Break)
	}
}

// TestLooseSegmentIsInsecureNotBroken: a segment with group or other permission is refused
// insecure_state_path, naming it (a chmod fixes it), by Open and Read alike. Open called the
// segment before the newest "not closed", audit_chain_broken, which tells the operator to move
// an intact journal aside.
func TestLooseSegmentIsInsecureNotBroken(t *testing.T) {
	dir, _ := journalOf(t, 40, "f")
	nums := mustList(t, dir)
	for _, n := range nums[len(nums)-2:] {
		path := segPath(dir, n)
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		// The code a caller reports is the first in the chain (protocol.AsError), not any
		// cause errors.Is would find.
		_, _, err := Open(dir, Options{})
		if pe := protocol.AsError(err); pe.Code != CodeInsecureDir || !strings.Contains(pe.Message, segmentName(n)) || !strings.Contains(pe.Message, "0644") {
			t.Errorf("Open with %s loose: %v", segmentName(n), err)
		}
		err = Read(t.Context(), dir, Query{}, false, func([]byte, *Record) error { return nil })
		if pe := protocol.AsError(err); pe.Code != CodeInsecureDir {
			t.Errorf("Read with %s loose: %v", segmentName(n), err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	j := openJ(t, dir, Options{})
	write(t, j, "s", "after")
}

func TestParseAnchor(t *testing.T) {
	good := "12:" + strings.Repeat("ab", 32)
	if a, err := ParseAnchor(good); err != nil || a.Seq != 12 {
		t.Fatalf("ParseAnchor(%q) = %+v, %v", good, a, err)
	}
	for _, bad := range []string{"", "12", "0:" + strings.Repeat("ab", 32), "x:" + strings.Repeat("ab", 32), "12:" + strings.Repeat("AB", 32), "12:abc"} {
		if _, err := ParseAnchor(bad); err == nil {
			t.Errorf("ParseAnchor(%q) accepted", bad)
		}
	}
}

// TestVerifyFindsAnEffectRecordedTwice: a chain that holds two outcomes for one started record
// (written here past Append's own guard) verifies only up to the second.
func TestVerifyFindsAnEffectRecordedTwice(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	s, _ := write(t, j, "s", "a")
	j.pending = nil // the guard's tracking off, as after maxPending
	dup, err := j.Append(Entry{Kind: KindOutcome, Ref: s.Seq, Door: DoorOwner, Target: Target{Op: "fs.write"}, Outcome: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Break.Seq != dup.Seq || !strings.Contains(rep.Break.Reason, "recorded twice") {
		t.Fatalf("report %+v break %+v", rep, rep.Break)
	}
}
