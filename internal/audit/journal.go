package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/protocol"
)

// Defaults of Options, documented in docs/operations.md.
const (
	DefaultMaxSegmentBytes = 16 << 20               // rotate once a segment holds 16 MiB
	DefaultMaxSegmentAge   = 24 * time.Hour         // or once its header is a day old
	DefaultMaxSegments     = 64                     // keep the newest 64 segments: at most about 1 GiB
	DefaultMaxArgsBytes    = 4 << 10                // arguments kept (RecordArgs) only up to 4 KiB
	DefaultSyncEvery       = 100 * time.Millisecond // SyncInterval: a record is synced within about this
)

// SyncMode is when the journal makes what it wrote durable (fdatasync). Every mode writes a
// record (write(2)) before the append returns, so a record survives the daemon being killed;
// the modes differ in what survives a power loss or a kernel crash.
type SyncMode string

// Sync modes, airlockd --audit-sync.
const (
	// SyncAnswer (the default): Append returns once its record is on disk, an fdatasync shared
	// by every append waiting at the same time (group commit). A record that an answer waited
	// for survives a power loss.
	SyncAnswer SyncMode = "answer"
	// SyncInterval: Append returns once its record is written; the journal's own goroutine
	// syncs what was written within about Options.SyncEvery, one fdatasync for all of it. A
	// power loss or kernel crash loses at most the records of that window.
	SyncInterval SyncMode = "interval"
)

// String returns the mode's name, SyncAnswer for "".
func (m SyncMode) String() string {
	if m == "" {
		return string(SyncAnswer)
	}
	return string(m)
}

// UnmarshalText reads a mode's name (for flag.TextVar).
func (m *SyncMode) UnmarshalText(b []byte) error {
	switch v := SyncMode(b); v {
	case SyncAnswer, SyncInterval:
		*m = v
		return nil
	}
	return protocol.Errorf(protocol.CodeInvalidField, "the audit sync mode is answer or interval, not %q", b)
}

// MarshalText returns the mode's name.
func (m SyncMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// DirName is the journal's directory in the state directory.
const DirName = "audit"

// DirIn returns the journal directory of a state directory.
func DirIn(stateDir string) string { return filepath.Join(stateDir, DirName) }

// maxPending bounds the started records a Journal remembers awaiting their outcome.
const maxPending = 1 << 16

// Options configure a Journal. The zero value takes every default and keeps no arguments.
type Options struct {
	MaxSegmentBytes int64         // rotate before a record would take a segment past this
	MaxSegmentAge   time.Duration // rotate before appending to a segment whose header is older
	MaxSegments     int           // delete the oldest segments beyond this many, at rotation
	RecordArgs      bool          // keep the canonical arguments themselves, not only their digest
	MaxArgsBytes    int           // RecordArgs: arguments longer than this keep only their digest
	Sync            SyncMode      // when appends are made durable; "" is SyncAnswer
	SyncEvery       time.Duration // SyncInterval: how long a written record may wait for its sync
	Now             func() time.Time
	// OnSync, when set, is called after each successful fdatasync (a group commit, a
	// rotation's, Close's) with the records and bytes it made durable and how long it took: the
	// daemon passes metrics.ObserveAuditAppend. It runs on the appending goroutine; keep it short.
	OnSync func(records, bytes int, took time.Duration)
}

func (o Options) withDefaults() Options {
	if o.MaxSegmentBytes <= 0 {
		o.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
	if o.MaxSegmentAge <= 0 {
		o.MaxSegmentAge = DefaultMaxSegmentAge
	}
	if o.MaxSegments <= 0 {
		o.MaxSegments = DefaultMaxSegments
	}
	if o.MaxArgsBytes <= 0 {
		o.MaxArgsBytes = DefaultMaxArgsBytes
	}
	o.MaxArgsBytes = min(o.MaxArgsBytes, MaxArgsBytesLimit)
	if o.Sync == "" {
		o.Sync = SyncAnswer
	}
	if o.SyncEvery <= 0 {
		o.SyncEvery = DefaultSyncEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Head is the newest record of a journal: what an operator exports and later checks with
// Verify's anchor.
type Head struct {
	Seq     uint64    `json:"seq"`
	Digest  string    `json:"digest"`
	Segment uint64    `json:"segment"`
	Time    time.Time `json:"time"`
}

// String is the anchor form "SEQ:DIGEST" that ParseAnchor reads.
func (h Head) String() string { return strconv.FormatUint(h.Seq, 10) + ":" + h.Digest }

// Anchor is a record an operator exported earlier: Verify checks that the journal still holds
// it.
type Anchor struct {
	Seq    uint64
	Digest string
}

// ParseAnchor reads "SEQ:DIGEST".
func ParseAnchor(s string) (Anchor, error) {
	seq, dig, ok := strings.Cut(s, ":")
	n, err := strconv.ParseUint(seq, 10, 64)
	if !ok || err != nil || n == 0 || !isDigest(dig) {
		return Anchor{}, fmt.Errorf("an anchor is SEQ:DIGEST (a seq and a 64-digit lowercase hex SHA-256), not %q", s)
	}
	return Anchor{Seq: n, Digest: dig}, nil
}

// OpenReport says what Open found and repaired.
type OpenReport struct {
	Head Head
	// TornSegment and TornBytes name bytes after the last whole record that Open cut: a record
	// being written when the process died. Nothing acknowledged is in them: every append
	// returns only after its record's whole line was written, and with SyncAnswer Append only
	// after it is on disk.
	TornSegment string
	TornBytes   int64
	// RemovedEmpty names a newest segment with no whole record (its creation was interrupted)
	// that Open removed.
	RemovedEmpty string
	// NewSegment is true when Open started a segment: a new journal, or the newest was closed.
	NewSegment bool
}

// Stats are the journal's counters since Open, for metrics.
type Stats struct {
	Records    uint64        // records appended (headers and footers included)
	Bytes      uint64        // bytes appended
	Fsyncs     uint64        // fdatasync calls (group commits and rotations)
	FsyncTotal time.Duration // time spent in them
	Rotations  uint64
	Removed    uint64 // segments deleted by retention
}

// Ref names an appended record.
type Ref struct {
	Seq    uint64
	Digest string
}

// Journal appends records to an audit directory. Its methods are safe for concurrent use.
type Journal struct {
	dir  string
	opt  Options
	lock *os.File // flock: one writer per directory

	// mu guards the fields that follow, and every write to f. Lock order: mu, then sync.mu.
	mu         sync.Mutex
	f          *os.File
	segment    uint64
	segStart   time.Time
	segRecords uint64
	headerDig  string
	size       int64
	seq        uint64 // last record written
	// unsyncedRecords and unsyncedBytes were written since the last fdatasync, for OnSync.
	unsyncedRecords, unsyncedBytes int
	prev                           string // its digest
	headTime                       time.Time
	failed                         error // sticky: a write or fdatasync failed
	closed                         bool
	// pending holds the seqs of started records appended since Open that have no outcome
	// yet, so that a second outcome for one effect is refused. openSeq is the head at Open:
	// an outcome may refer to a record before it, which this process cannot know. When
	// pending reaches maxPending (a caller that never records outcomes), tracking stops.
	pending map[uint64]struct{}
	openSeq uint64

	// SyncInterval only: a write signals dirty (one buffered), which wakes the flusher;
	// closing stop ends it, and it closes flushed when it has returned.
	dirty    chan struct{}
	stop     chan struct{}
	flushed  chan struct{}
	stopOnce sync.Once

	sync struct {
		mu      sync.Mutex
		cond    sync.Cond
		synced  uint64 // every record up to this seq is durable
		syncing bool   // a leader is in fdatasync
		err     error  // sticky fdatasync failure
	}

	records, bytes, fsyncs, fsyncNanos, rotations, removed atomic.Uint64

	// Set by tests only, before the first Append: afterWrite runs (with j.mu held) after an
	// Append's record is written, beforeSync in a group's leader before its fdatasync.
	afterWrite func(seq uint64)
	beforeSync func()
}

// Open opens (creating when needed) the journal in dir. It checks the chain of the newest
// segment and its link to the one before (CodeChainBroken when broken: a journal that was
// tampered with is not appended to until the operator moves it aside), cuts a torn tail at the
// last whole record and says so in the report, and starts a new segment when the newest is
// closed.
func Open(dir string, opt Options) (*Journal, OpenReport, error) {
	var rep OpenReport
	opt = opt.withDefaults()
	if opt.Sync != SyncAnswer && opt.Sync != SyncInterval {
		return nil, rep, protocol.Errorf(protocol.CodeInvalidField, "the audit sync mode is answer or interval, not %q", string(opt.Sync))
	}
	if err := prepareDir(dir); err != nil {
		return nil, rep, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, fileMode)
	if err != nil {
		return nil, rep, protocol.Wrap(insecure("cannot open the audit lock file in %s", dir), err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, rep, protocol.Wrap(protocol.Errorf(CodeWriteFailed, "the audit journal in %s is open in another process", dir), err)
	}
	j := &Journal{dir: dir, opt: opt, lock: lock, pending: map[uint64]struct{}{}}
	j.sync.cond.L = &j.sync.mu
	if err := j.open(&rep); err != nil {
		j.closeFiles()
		return nil, rep, err
	}
	rep.Head = j.Head()
	j.openSeq = rep.Head.Seq
	if opt.Sync == SyncInterval {
		j.dirty, j.stop, j.flushed = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go j.flush()
	}
	return j, rep, nil
}

// flush is the SyncInterval journal's flusher, from Open until Close: once something was
// written, it waits SyncEvery and syncs everything written by then (one fdatasync, through the
// same group commit as Append's), so that no record waits longer than about SyncEvery and
// an idle journal is never synced. A failed fdatasync makes the journal fail, as Append's does.
func (j *Journal) flush() {
	defer close(j.flushed)
	var t *time.Timer
	for {
		select {
		case <-j.stop:
			return
		case <-j.dirty:
		}
		if t == nil {
			t = time.NewTimer(j.opt.SyncEvery)
		} else {
			t.Reset(j.opt.SyncEvery)
		}
		select {
		case <-j.stop:
			t.Stop()
			return // Close syncs what is pending
		case <-t.C:
		}
		j.mu.Lock()
		seq := j.seq
		j.mu.Unlock()
		_ = j.waitDurable(seq) // a failure is sticky: the next append returns it
	}
}

// stopFlush ends the flusher, if there is one, and waits for it.
func (j *Journal) stopFlush() {
	if j.stop == nil {
		return
	}
	j.stopOnce.Do(func() {
		close(j.stop)
		<-j.flushed
	})
}

func (j *Journal) closeFiles() {
	if j.f != nil {
		j.f.Close()
	}
	j.lock.Close()
}

func (j *Journal) open(rep *OpenReport) error {
	nums, err := listSegments(j.dir)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(CodeCorrupt, "cannot list %s", j.dir), err)
	}
	for len(nums) > 0 {
		last := nums[len(nums)-1]
		var prevSeq uint64
		var prevDig string
		if len(nums) > 1 {
			if prevSeq, prevDig, err = closedTail(j.dir, nums[len(nums)-2]); err != nil {
				return err
			}
		}
		path := segPath(j.dir, last)
		f, err := openSegment(path)
		if err != nil {
			return segmentError(path, err)
		}
		info, err := readSegment(f, last, prevSeq, prevDig, nil)
		f.Close()
		if err != nil {
			var le *linkError
			if errors.As(err, &le) {
				return protocol.Errorf(CodeChainBroken, "the audit journal is broken: %v; run 'airlock audit verify' and move %s aside", le, j.dir)
			}
			return protocol.Wrap(protocol.Errorf(CodeCorrupt, "cannot read %s", path), err)
		}
		if info.records == 0 {
			// Created, but its header never became whole: nothing was appended to it.
			if err := os.Remove(path); err != nil {
				return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot remove the empty segment %s", path), err)
			}
			if err := syncDir(j.dir); err != nil {
				return err
			}
			rep.RemovedEmpty = segmentName(last)
			nums = nums[:len(nums)-1]
			continue
		}
		if info.torn > 0 {
			if err := cutTail(path, info.size); err != nil {
				return err
			}
			rep.TornSegment, rep.TornBytes = segmentName(last), info.torn
		}
		j.seq, j.prev, j.segment = info.end, info.last, last
		j.sync.synced = info.end
		if info.footer != nil {
			rep.NewSegment = true
			j.headTime = info.footer.Time
			return j.startSegment(last + 1)
		}
		w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot open %s for appending", path), err)
		}
		if _, err := w.Seek(info.size, 0); err != nil {
			w.Close()
			return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot seek in %s", path), err)
		}
		j.f, j.size, j.segRecords = w, info.size, info.records
		j.segStart, j.headerDig = info.header.Time, info.headerDig
		j.headTime = info.header.Time // refined by the first append; good enough for Head
		return nil
	}
	rep.NewSegment = true
	return j.startSegment(1)
}

// segmentError is the error of a segment that cannot be opened: openSegment's own when it
// refused the file (insecure_state_path, naming the file and what is wrong with it, which a
// chmod fixes), else CodeCorrupt.
func segmentError(path string, err error) error {
	if errors.Is(err, &protocol.Error{Code: CodeInsecureDir}) {
		return err
	}
	return protocol.Wrap(protocol.Errorf(CodeCorrupt, "cannot open %s", path), err)
}

// closedTail returns the seq and digest of the last record of closed segment n, which must be
// its footer.
func closedTail(dir string, n uint64) (uint64, string, error) {
	line, err := lastLine(segPath(dir, n))
	var nc *notClosedError
	switch {
	case errors.As(err, &nc):
		return 0, "", protocol.Wrap(protocol.Errorf(CodeChainBroken, "the audit journal is broken: segment %s is not closed", segmentName(n)), err)
	case err != nil:
		// The file could not be read: nothing is known about its links.
		return 0, "", segmentError(segPath(dir, n), err)
	}
	rec, err := DecodeRecord(line)
	if err != nil || rec.Kind != KindFooter {
		return 0, "", protocol.Errorf(CodeChainBroken, "the audit journal is broken: segment %s does not end with a footer", segmentName(n))
	}
	return rec.Seq, Digest(line), nil
}

// cutTail truncates a segment to its whole records and makes that durable.
func cutTail(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err == nil {
		err = f.Truncate(size)
		if err == nil {
			err = unix.Fdatasync(int(f.Fd()))
		}
		f.Close()
	}
	if err != nil {
		return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot cut the torn tail of %s", path), err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot sync the audit directory %s", dir), err)
	}
	return nil
}

// startSegment creates segment n, writes its header (linked to j.prev) and makes both durable.
// j.mu is held, or j is not shared yet.
func (j *Journal) startSegment(n uint64) error {
	path := segPath(j.dir, n)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot create %s", path), err)
	}
	now := j.opt.Now().UTC()
	rec := Record{Seq: j.seq + 1, Time: now, Kind: KindHeader, Prev: j.prev, Segment: &SegmentMark{Number: n}}
	line, err := encode(&rec)
	if err == nil {
		_, err = f.Write(line)
	}
	if err == nil {
		j.unsyncedRecords++
		j.unsyncedBytes += len(line)
		err = j.fdatasync(f, j.takeUnsynced())
	}
	if err == nil {
		err = syncDir(j.dir)
	}
	if err != nil {
		f.Close()
		return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot start %s", path), err)
	}
	j.f, j.segment, j.segStart, j.segRecords, j.size = f, n, now, 1, int64(len(line))
	j.seq, j.prev, j.headerDig, j.headTime = rec.Seq, Digest(line[:len(line)-1]), Digest(line[:len(line)-1]), now
	j.records.Add(1)
	j.bytes.Add(uint64(len(line)))
	j.markSynced(rec.Seq)
	return j.retain()
}

// retain deletes the oldest segments beyond MaxSegments.
func (j *Journal) retain() error {
	nums, err := listSegments(j.dir)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot list %s", j.dir), err)
	}
	if len(nums) <= j.opt.MaxSegments {
		return nil
	}
	for _, n := range nums[:len(nums)-j.opt.MaxSegments] {
		if err := os.Remove(segPath(j.dir, n)); err != nil {
			return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot remove the old segment %s", segmentName(n)), err)
		}
		j.removed.Add(1)
	}
	return syncDir(j.dir)
}

// rotate closes the current segment with its footer and starts the next. j.mu is held.
func (j *Journal) rotate() error {
	now := j.opt.Now().UTC()
	rec := Record{Seq: j.seq + 1, Time: now, Kind: KindFooter, Prev: j.prev,
		Segment: &SegmentMark{Number: j.segment, First: j.headerDig, Records: j.segRecords + 1}}
	line, err := encode(&rec)
	if err != nil {
		return err
	}
	if err := j.writeLine(line); err != nil {
		return err
	}
	j.seq, j.prev = rec.Seq, Digest(line[:len(line)-1])
	if err := j.fdatasync(j.f, j.takeUnsynced()); err != nil {
		return j.fail(err)
	}
	j.markSynced(rec.Seq)
	j.f.Close()
	j.f = nil
	j.rotations.Add(1)
	if err := j.startSegment(j.segment + 1); err != nil {
		return j.fail(err)
	}
	return nil
}

// fail makes err sticky: after a failed fdatasync or rotation, what the disk holds is unknown,
// and an Append retried on it could record one effect twice.
func (j *Journal) fail(err error) error {
	if !errors.Is(err, &protocol.Error{Code: CodeWriteFailed}) {
		err = protocol.Wrap(protocol.Errorf(CodeWriteFailed, "the audit journal in %s cannot be written", j.dir), err)
	}
	j.failed = err
	j.sync.mu.Lock()
	if j.sync.err == nil {
		j.sync.err = err
	}
	j.sync.cond.Broadcast()
	j.sync.mu.Unlock()
	return err
}

// writeLine appends line to the current segment. A failed write is cut back, so that the segment
// still ends with a whole record; when even that fails, the journal fails.
func (j *Journal) writeLine(line []byte) error {
	n, err := j.f.Write(line)
	if err == nil {
		j.size += int64(n)
		j.segRecords++
		j.unsyncedRecords++
		j.unsyncedBytes += n
		j.records.Add(1)
		j.bytes.Add(uint64(n))
		return nil
	}
	werr := protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot write to %s", segmentName(j.segment)), err)
	if terr := j.f.Truncate(j.size); terr != nil {
		return j.fail(werr)
	}
	if _, serr := j.f.Seek(j.size, 0); serr != nil {
		return j.fail(werr)
	}
	return werr
}

// syncCounts are the records and bytes one fdatasync makes durable.
type syncCounts struct{ records, bytes int }

// takeUnsynced returns and resets the records and bytes written since the last fdatasync.
// j.mu is held.
func (j *Journal) takeUnsynced() syncCounts {
	c := syncCounts{j.unsyncedRecords, j.unsyncedBytes}
	j.unsyncedRecords, j.unsyncedBytes = 0, 0
	return c
}

// fdatasync syncs f's data and size, counting it, and reports c to OnSync when it succeeds.
func (j *Journal) fdatasync(f *os.File, c syncCounts) error {
	start := time.Now()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	took := time.Since(start)
	j.fsyncs.Add(1)
	j.fsyncNanos.Add(uint64(took))
	if serr == nil && j.opt.OnSync != nil {
		j.opt.OnSync(c.records, c.bytes, took)
	}
	return serr
}

func (j *Journal) markSynced(seq uint64) {
	j.sync.mu.Lock()
	if seq > j.sync.synced {
		j.sync.synced = seq
	}
	j.sync.cond.Broadcast()
	j.sync.mu.Unlock()
}

// encode returns rec's line with its newline: appendRecord's where it can, else
// encoding/json's, which is the format.
func encode(rec *Record) ([]byte, error) {
	if line, ok := appendRecord(make([]byte, 0, 512), rec); ok {
		if len(line) > maxRecord {
			return nil, protocol.Errorf(CodeInvalidEntry, "the record is %d bytes, more than %d", len(line), maxRecord)
		}
		return append(line, '\n'), nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, protocol.Wrap(protocol.Errorf(CodeInvalidEntry, "cannot encode the record"), err)
	}
	if b.Len() > maxRecord+1 {
		return nil, protocol.Errorf(CodeInvalidEntry, "the record is %d bytes, more than %d", b.Len()-1, maxRecord)
	}
	return b.Bytes(), nil
}

// Append writes a record built from e and returns once it is as durable as Options.Sync
// says. With SyncAnswer, once its bytes and the segment's size are on disk (fdatasync),
// shared with every Append waiting at the same time, which also makes every record written
// before it durable. With SyncInterval, once its line is written (in the page cache: it
// survives the process being killed); the flusher syncs it within about SyncEvery.
// A refused entry (CodeInvalidEntry) writes nothing. Once a write could not be undone or an
// fdatasync failed, every append fails with CodeWriteFailed: the caller must not retry on
// this journal, which could record one effect twice.
func (j *Journal) Append(e Entry) (Ref, error) {
	ref, err := j.append(e)
	if err != nil || j.opt.Sync == SyncInterval {
		return ref, err
	}
	return ref, j.waitDurable(ref.Seq)
}

// AppendNoWait writes a record built from e and returns once its line is written, in either
// mode, without waiting for an fdatasync: the record survives the process being killed, and
// becomes durable with the next sync (a later Append's with SyncAnswer, the flusher's with
// SyncInterval, a rotation's, Close's). The gate writes a call's started record so: the
// outcome's Append, before the answer leaves, syncs both with one fdatasync. Until then a
// power loss can lose the started record, but no client had an answer. Its errors are
// Append's.
func (j *Journal) AppendNoWait(e Entry) (Ref, error) { return j.append(e) }

// append builds, checks and writes the record of e.
func (j *Journal) append(e Entry) (Ref, error) {
	if err := e.check(); err != nil {
		return Ref{}, err
	}
	rec := Record{Kind: e.Kind, Ref: e.Ref, Door: e.Door, Outcome: e.Outcome, DurationUS: e.Duration.Microseconds()}
	if e.Actor != (Actor{}) {
		a := e.Actor
		rec.Actor = &a
	}
	t := e.Target
	rec.Target = &t
	if e.Args != nil {
		c, err := Canonical(e.Args)
		if err != nil {
			return Ref{}, err
		}
		rec.ArgsSHA256, rec.ArgsBytes = Digest(c), len(c)
		if j.opt.RecordArgs && len(c) <= j.opt.MaxArgsBytes {
			rec.Args = c
		}
	}
	if e.IdempotencyKey != "" {
		rec.IdempotencyKeySHA256 = Digest([]byte(e.IdempotencyKey))
	}

	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return Ref{}, protocol.Errorf(CodeClosed, "the audit journal is closed")
	}
	if j.failed != nil {
		j.mu.Unlock()
		return Ref{}, j.failed
	}
	if e.Kind == KindOutcome {
		_, open := j.pending[e.Ref]
		switch {
		case e.Ref > j.seq:
			j.mu.Unlock()
			return Ref{}, invalid("an outcome refers to seq %d, which is not written yet", e.Ref)
		case e.Ref > j.openSeq && j.pending != nil && !open:
			j.mu.Unlock()
			return Ref{}, invalid("seq %d is not a started record awaiting its outcome (an effect has one outcome)", e.Ref)
		}
	}
	now := j.opt.Now().UTC()
	rec.Time = now
	rec.Seq, rec.Prev = j.seq+1, j.prev
	line, err := encode(&rec)
	if err != nil {
		j.mu.Unlock()
		return Ref{}, err
	}
	if j.segRecords > 1 && (j.size+int64(len(line)) > j.opt.MaxSegmentBytes || now.Sub(j.segStart) >= j.opt.MaxSegmentAge) {
		if err := j.rotate(); err != nil {
			j.mu.Unlock()
			return Ref{}, err
		}
		rec.Seq, rec.Prev = j.seq+1, j.prev
		if line, err = encode(&rec); err != nil {
			j.mu.Unlock()
			return Ref{}, err
		}
	}
	if err := j.writeLine(line); err != nil {
		j.mu.Unlock()
		return Ref{}, err
	}
	ref := Ref{Seq: rec.Seq, Digest: Digest(line[:len(line)-1])}
	j.seq, j.prev, j.headTime = ref.Seq, ref.Digest, now
	switch {
	case j.pending == nil:
	case e.Kind == KindStarted && len(j.pending) >= maxPending:
		j.pending = nil
	case e.Kind == KindStarted:
		j.pending[ref.Seq] = struct{}{}
	case e.Kind == KindOutcome:
		delete(j.pending, e.Ref)
	}
	if j.afterWrite != nil {
		j.afterWrite(ref.Seq)
	}
	j.mu.Unlock()
	if j.dirty != nil {
		select {
		case j.dirty <- struct{}{}:
		default: // the flusher is already woken
		}
	}
	return ref, nil
}

// waitDurable returns once seq is durable. One waiter at a time leads: it takes the newest
// written seq, fdatasyncs the segment, and wakes every waiter that covers; the others wait.
// Writes go on during the fdatasync, so the next group is whatever arrived meanwhile.
func (j *Journal) waitDurable(seq uint64) error {
	s := &j.sync
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.synced >= seq {
			return nil
		}
		if s.err != nil {
			return s.err
		}
		if s.syncing {
			s.cond.Wait()
			continue
		}
		s.syncing = true
		s.mu.Unlock()
		if j.beforeSync != nil {
			j.beforeSync()
		}
		j.mu.Lock()
		f, target, counts := j.f, j.seq, j.takeUnsynced()
		j.mu.Unlock()
		var err error
		if f != nil {
			err = j.fdatasync(f, counts)
		}
		s.mu.Lock()
		s.syncing = false
		switch {
		case err == nil && f != nil:
			s.synced = max(s.synced, target)
		case s.synced >= target:
			// Rotation or Close synced and closed the file before this leader reached it.
			// Its records are durable; the next sync reports them to OnSync.
			s.mu.Unlock()
			j.mu.Lock()
			j.unsyncedRecords += counts.records
			j.unsyncedBytes += counts.bytes
			j.mu.Unlock()
			s.mu.Lock()
		default:
			if err == nil {
				err = errors.New("the segment was closed before it was synced")
			}
			s.mu.Unlock()
			j.mu.Lock()
			j.fail(err) // sets s.err, which the loop returns
			j.mu.Unlock()
			s.mu.Lock()
		}
		s.cond.Broadcast()
	}
}

// Head returns the newest record's seq and digest.
func (j *Journal) Head() Head {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Head{Seq: j.seq, Digest: j.prev, Segment: j.segment, Time: j.headTime}
}

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Stats returns the counters since Open.
func (j *Journal) Stats() Stats {
	return Stats{Records: j.records.Load(), Bytes: j.bytes.Load(), Fsyncs: j.fsyncs.Load(),
		FsyncTotal: time.Duration(j.fsyncNanos.Load()), Rotations: j.rotations.Load(), Removed: j.removed.Load()}
}

// Close makes everything written durable (with SyncInterval, after stopping the flusher) and
// closes the journal. The newest segment stays open (no footer): the next Open appends to it.
// An append after Close fails with CodeClosed.
func (j *Journal) Close() error {
	j.stopFlush()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	var err error
	if j.f != nil && j.failed == nil {
		if err = j.fdatasync(j.f, j.takeUnsynced()); err != nil {
			err = j.fail(err)
		} else {
			j.markSynced(j.seq)
		}
	}
	j.closeFiles()
	j.f = nil
	return err
}
