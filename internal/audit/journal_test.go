package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/protocol"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait in these tests; it only runs out when something is broken.
const waitTimeout = 20 * time.Second

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if !errors.Is(err, &protocol.Error{Code: code}) {
		t.Fatalf("error = %v, want code %s", err, code)
	}
}

func newDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "audit")
}

func openJ(t *testing.T, dir string, opt Options) *Journal {
	t.Helper()
	j, _, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// write is one fs.write as the gate records it: started, then its outcome.
func write(t testing.TB, j *Journal, session, path string) (Ref, Ref) {
	t.Helper()
	e := Entry{Kind: KindStarted, Door: DoorOwner,
		Actor:  Actor{PID: 42, Exe: "/usr/bin/airlock", Session: session, Generation: 3},
		Target: Target{Op: "fs.write", Path: path}, Args: json.RawMessage(`{"path":"` + path + `","content":"x"}`), IdempotencyKey: "key-" + path}
	s, err := j.Append(e)
	if err != nil {
		t.Fatal(err)
	}
	o, err := j.Append(Entry{Kind: KindOutcome, Ref: s.Seq, Door: DoorOwner, Actor: e.Actor, Target: e.Target, Outcome: "ok", Duration: 1500 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	return s, o
}

func readAll(t *testing.T, dir string, q Query) []Record {
	t.Helper()
	var recs []Record
	if err := Read(context.Background(), dir, q, false, func(_ []byte, r *Record) error {
		recs = append(recs, *r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return recs
}

func mustVerify(t *testing.T, dir string) Report {
	t.Helper()
	rep, err := Verify(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify: %+v", rep.Break)
	}
	return rep
}

func TestAppendRecordsTheFields(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	s, o := write(t, j, "s-1", "notes/a.txt")
	if s.Seq != 2 || o.Seq != 3 {
		t.Fatalf("seqs %d %d, want 2 3 (1 is the header)", s.Seq, o.Seq)
	}
	if h := j.Head(); h.Seq != 3 || h.Digest != o.Digest {
		t.Fatalf("head %+v, want seq 3 digest %s", h, o.Digest)
	}
	recs := readAll(t, dir, Query{})
	if len(recs) != 2 {
		t.Fatalf("read %d records, want 2", len(recs))
	}
	st, out := recs[0], recs[1]
	wantArgs, _ := ArgsDigest(json.RawMessage(`{"content":"x",  "path":"notes/a.txt"}`))
	if st.Kind != KindStarted || st.Door != DoorOwner || st.Actor.Session != "s-1" || st.Actor.Generation != 3 ||
		st.Actor.PID != 42 || st.Actor.Exe != "/usr/bin/airlock" || st.Target.Op != "fs.write" || st.Target.Path != "notes/a.txt" ||
		st.ArgsSHA256 != wantArgs || st.Args != nil || st.IdempotencyKeySHA256 != Digest([]byte("key-notes/a.txt")) || st.Time.IsZero() {
		t.Fatalf("started record %+v", st)
	}
	if out.Kind != KindOutcome || out.Ref != s.Seq || out.Outcome != "ok" || out.DurationUS != 1500 || out.Prev != s.Digest {
		t.Fatalf("outcome record %+v", out)
	}
	rep := mustVerify(t, dir)
	if rep.Records != 3 || rep.Head.Seq != 3 || rep.Head.Digest != o.Digest || rep.Unanchored {
		t.Fatalf("report %+v", rep)
	}
	// Reopened, the journal goes on from its head.
	j.Close()
	j2, orep, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if orep.Head.Seq != 3 || orep.Head.Digest != o.Digest || orep.TornBytes != 0 || orep.NewSegment {
		t.Fatalf("open report %+v", orep)
	}
	if s2, _ := write(t, j2, "s-1", "b"); s2.Seq != 4 {
		t.Fatalf("seq after reopen %d, want 4", s2.Seq)
	}
	mustVerify(t, dir)
}

func TestRecordArgsOnlyWhenOnAndBounded(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{RecordArgs: true, MaxArgsBytes: 40})
	write(t, j, "s", "short")                           // {"content":"x","path":"short"} fits
	write(t, j, "s", strings.Repeat("long", 10)+".txt") // does not
	recs := readAll(t, dir, Query{})
	if string(recs[0].Args) != `{"content":"x","path":"short"}` {
		t.Fatalf("kept args %s", recs[0].Args)
	}
	if recs[2].Args != nil || recs[2].ArgsSHA256 == "" || recs[2].ArgsBytes <= 40 {
		t.Fatalf("args over the bound: %+v", recs[2])
	}
}

func TestOwnerOnlyFiles(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	write(t, j, "s", "a")
	for _, p := range []string{dir, segPath(dir, 1), filepath.Join(dir, "lock")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v", p, fi.Mode())
		}
	}
	loose := filepath.Join(t.TempDir(), "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(loose, Options{})
	wantCode(t, err, CodeInsecureDir)
	if _, err := Verify(loose, nil); err != nil {
		t.Fatal(err) // an empty directory verifies; its segments would be refused
	}
}

func TestOneWriterPerDirectory(t *testing.T) {
	dir := newDir(t)
	openJ(t, dir, Options{})
	_, _, err := Open(dir, Options{})
	wantCode(t, err, CodeWriteFailed)
}

func TestEntryRefused(t *testing.T) {
	ok := Entry{Kind: KindEvent, Door: DoorOwner, Target: Target{Op: "session.open"}}
	for name, mut := range map[string]func(e *Entry){
		"header kind":        func(e *Entry) { e.Kind = KindHeader },
		"unknown door":       func(e *Entry) { e.Door = "pipe" },
		"no op":              func(e *Entry) { e.Target.Op = "" },
		"op with space":      func(e *Entry) { e.Target.Op = "fs write" },
		"op upper case":      func(e *Entry) { e.Target.Op = "FS.write" },
		"outcome free text":  func(e *Entry) { e.Outcome = "failed: token abc" },
		"outcome no ref":     func(e *Entry) { e.Kind = KindOutcome; e.Outcome = "ok" },
		"event with ref":     func(e *Entry) { e.Ref = 1 },
		"decision no result": func(e *Entry) { e.Kind = KindDecision },
		"started outcome":    func(e *Entry) { e.Kind = KindStarted; e.Outcome = "ok" },
		"relative exe":       func(e *Entry) { e.Actor.Exe = "bin/x" },
		"newline in path":    func(e *Entry) { e.Target.Path = "a\nb" },
		"escape in session":  func(e *Entry) { e.Actor.Session = "s\x1b[2J" },
		"bidi in room":       func(e *Entry) { e.Actor.Room = "r\u202e" },
		"long session":       func(e *Entry) { e.Actor.Session = strings.Repeat("s", 257) },
		"not utf8 path":      func(e *Entry) { e.Target.Path = "\xff" },
		"args not json":      func(e *Entry) { e.Args = json.RawMessage(`{"a":`) },
		"args duplicate key": func(e *Entry) { e.Args = json.RawMessage(`{"a":1,"a":2}`) },
		"negative duration":  func(e *Entry) { e.Duration = -1 },
		"outcome in future":  func(e *Entry) { e.Kind = KindOutcome; e.Ref = 99; e.Outcome = "ok" },
		"outcome of event":   func(e *Entry) { e.Kind = KindOutcome; e.Ref = 2; e.Outcome = "ok" },
	} {
		t.Run(name, func(t *testing.T) {
			dir := newDir(t)
			j := openJ(t, dir, Options{})
			if _, err := j.Append(ok); err != nil {
				t.Fatal(err)
			}
			e := ok
			mut(&e)
			_, err := j.Append(e)
			wantCode(t, err, CodeInvalidEntry)
			if h := j.Head(); h.Seq != 2 {
				t.Fatalf("a refused entry moved the head to %d", h.Seq)
			}
		})
	}
}

func TestOneOutcomePerEffect(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	s, _ := write(t, j, "s", "a")
	_, err := j.Append(Entry{Kind: KindOutcome, Ref: s.Seq, Door: DoorOwner, Target: Target{Op: "fs.write"}, Outcome: "ok"})
	wantCode(t, err, CodeInvalidEntry)
	// After a restart, an outcome may refer to a record this process did not append.
	st, err := j.Append(Entry{Kind: KindStarted, Door: DoorOwner, Target: Target{Op: "fs.write"}})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	j2 := openJ(t, dir, Options{})
	if _, err := j2.Append(Entry{Kind: KindOutcome, Ref: st.Seq, Door: DoorOwner, Target: Target{Op: "fs.write"}, Outcome: "interrupted"}); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("verify %+v %v", rep.Break, err)
	}
}

func TestAppendAfterClose(t *testing.T) {
	j := openJ(t, newDir(t), Options{})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := j.Append(Entry{Kind: KindEvent, Door: DoorDaemon, Target: Target{Op: "x"}})
	wantCode(t, err, CodeClosed)
}

func TestRotationBySizeKeepsTheChain(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{MaxSegmentBytes: 2048})
	for i := range 40 {
		write(t, j, "s", fmt.Sprint("f", i))
	}
	nums, _ := listSegments(dir)
	if len(nums) < 4 {
		t.Fatalf("%d segments, want rotation", len(nums))
	}
	for _, n := range nums {
		fi, _ := os.Stat(segPath(dir, n))
		if fi.Size() > 2048 {
			t.Fatalf("segment %d is %d bytes", n, fi.Size())
		}
	}
	rep := mustVerify(t, dir)
	if rep.Segments != len(nums) || rep.Head != j.Head() && rep.Head.Digest != j.Head().Digest {
		t.Fatalf("report %+v head %+v", rep, j.Head())
	}
	if st := j.Stats(); st.Rotations != uint64(len(nums)-1) {
		t.Fatalf("stats %+v", st)
	}
	// Every effect reads back once, in order, across the segments.
	recs := readAll(t, dir, Query{})
	if len(recs) != 80 || recs[0].Target.Path != "f0" || recs[79].Target.Path != "f39" {
		t.Fatalf("read %d records", len(recs))
	}
	marks := readAll(t, dir, Query{Marks: true})
	if len(marks) != 80+2*len(nums)-1 {
		t.Fatalf("with marks: %d records, %d segments", len(marks), len(nums))
	}
}

func TestRotationByAge(t *testing.T) {
	dir := newDir(t)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	j := openJ(t, dir, Options{MaxSegmentAge: time.Hour, Now: func() time.Time { return now }})
	write(t, j, "s", "a")
	now = now.Add(59 * time.Minute)
	write(t, j, "s", "b")
	if nums, _ := listSegments(dir); len(nums) != 1 {
		t.Fatalf("rotated early: %v", nums)
	}
	now = now.Add(time.Minute)
	write(t, j, "s", "c")
	if nums, _ := listSegments(dir); len(nums) != 2 {
		t.Fatalf("segments %v, want a rotation at one hour", nums)
	}
	mustVerify(t, dir)
	// --since skips the first segment unread, and selects by record time.
	recs := readAll(t, dir, Query{Since: now})
	if len(recs) != 2 || recs[0].Target.Path != "c" {
		t.Fatalf("since: %+v", recs)
	}
}

func TestRetentionDropsTheOldestSegments(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{MaxSegmentBytes: 1024, MaxSegments: 3})
	for i := range 40 {
		write(t, j, "s", fmt.Sprint("f", i))
	}
	nums, _ := listSegments(dir)
	if len(nums) != 3 || nums[0] == 1 {
		t.Fatalf("segments %v, want the newest 3", nums)
	}
	rep := mustVerify(t, dir)
	if !rep.Unanchored || rep.FirstSeq == 1 {
		t.Fatalf("report %+v, want unanchored", rep)
	}
	if j.Stats().Removed == 0 {
		t.Fatal("no removal counted")
	}
}

func TestFiltersSelect(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	write(t, j, "s-1", "a")
	write(t, j, "s-2", "b")
	if _, err := j.Append(Entry{Kind: KindDecision, Door: DoorWeb, Actor: Actor{Room: "home", Host: "h-2"},
		Target: Target{Op: "approval.decided", Capability: "lamp", Action: "on"}, Outcome: "approved"}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		q    Query
		want int
	}{
		"all":     {Query{}, 5},
		"session": {Query{Session: "s-2"}, 2},
		"room":    {Query{Room: "home"}, 1},
		"door":    {Query{Door: DoorWeb}, 1},
		"none":    {Query{Session: "s-1", Door: DoorWeb}, 0},
	} {
		if got := len(readAll(t, dir, c.q)); got != c.want {
			t.Errorf("%s: %d records, want %d", name, got, c.want)
		}
	}
}

func TestFollowAcrossRotation(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{MaxSegmentBytes: 1024})
	write(t, j, "s", "before")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- Read(ctx, dir, Query{Session: "s"}, true, func(_ []byte, r *Record) error {
			got <- string(r.Kind) + " " + r.Target.Path
			return nil
		})
	}()
	next := func() string {
		select {
		case s := <-got:
			return s
		case <-time.After(waitTimeout):
			t.Fatal("follow saw nothing")
			return ""
		}
	}
	if s := next(); s != "started before" {
		t.Fatalf("first %q", s)
	}
	next()
	for i := range 20 { // several rotations
		write(t, j, "s", fmt.Sprint("f", i))
		if s := next(); s != "started "+fmt.Sprint("f", i) {
			t.Fatalf("followed %q", s)
		}
		next()
	}
	if nums, _ := listSegments(dir); len(nums) < 3 {
		t.Fatalf("segments %v: the test needs rotation", nums)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// followed starts Read following dir's session s records and returns what it sees, one
// "kind path" at a time.
func followed(t *testing.T, dir string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- Read(ctx, dir, Query{Session: "s"}, true, func(_ []byte, r *Record) error {
			got <- string(r.Kind) + " " + r.Target.Path
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return func() string {
		select {
		case s := <-got:
			return s
		case <-time.After(waitTimeout):
			t.Fatal("follow saw nothing")
			return ""
		}
	}
}

// TestFollowAJournalMovedAside: a journal moved aside (what the operator does with a broken
// one) and started again at its path is followed from the new one's start. The follower kept
// reading the moved file and printed nothing more.
func TestFollowAJournalMovedAside(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	write(t, j, "s", "old")
	next := followed(t, dir)
	if a, b := next(), next(); a != "started old" || b != "outcome old" {
		t.Fatalf("followed %q, %q", a, b)
	}
	j.Close()
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	j2 := openJ(t, dir, Options{})
	write(t, j2, "s", "new")
	if a, b := next(), next(); a != "started new" || b != "outcome new" {
		t.Fatalf("followed %q, %q, want the new journal's", a, b)
	}
}

// TestFollowASegmentStartedAgain: a follower that waits in a newest segment with no whole
// record (a crash interrupted its start) reads it anew once Open removed it and started it
// again. It kept waiting in the removed file.
func TestFollowASegmentStartedAgain(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	write(t, j, "s", "a")
	j.Close()
	// A closed segment 1 and a segment 2 whose header was cut: the state a crash leaves
	// between a rotation's footer and the next header (TestInterruptedSegmentStartIsRemoved).
	now := time.Now().Add(48 * time.Hour)
	j2 := openJ(t, dir, Options{Now: func() time.Time { return now }})
	write(t, j2, "s", "rotated")
	j2.Close()
	if nums := mustList(t, dir); len(nums) != 2 {
		t.Fatalf("segments %v", nums)
	}
	ls := lines(t, dir, 2)
	writeLines(t, dir, 2, [][]byte{ls[0][:20]})
	next := followed(t, dir)
	for _, want := range []string{"started a", "outcome a"} {
		if got := next(); got != want {
			t.Fatalf("followed %q, want %q", got, want)
		}
	}
	j3 := openJ(t, dir, Options{})
	write(t, j3, "s", "after")
	if a, b := next(), next(); a != "started after" || b != "outcome after" {
		t.Fatalf("followed %q, %q", a, b)
	}
}

func TestTornTailIsCutAndReported(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	_, o := write(t, j, "s", "a")
	j.Close()
	path := segPath(dir, 1)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// Longer than the record appended next, so that overwriting alone would leave some.
	torn := `{"seq":4,"time":"2026-12-06T00:00:00Z","kind":"started","prev":"` + strings.Repeat("a", 64) + `","door":"owner","target":{"op":"fs.write","path":"` + strings.Repeat("p", 600)
	f.WriteString(torn)
	f.Close()
	rep, _ := Verify(dir, nil)
	if rep.TornBytes != int64(len(torn)) || rep.Break != nil {
		t.Fatalf("verify of a torn tail: %+v", rep)
	}
	j2, orep, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if orep.TornBytes != int64(len(torn)) || orep.TornSegment != segmentName(1) || orep.Head.Digest != o.Digest {
		t.Fatalf("open report %+v", orep)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != whole.Size() {
		t.Fatalf("after open the segment is %d bytes, want %d (%v)", fi.Size(), whole.Size(), err)
	}
	write(t, j2, "s", "b")
	if rep := mustVerify(t, dir); rep.TornBytes != 0 || rep.LastSeq != 5 {
		t.Fatalf("after the cut %+v", rep)
	}
}

func TestInterruptedSegmentStartIsRemoved(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{MaxSegmentBytes: 1024})
	for i := 0; len(mustList(t, dir)) < 2; i++ {
		write(t, j, "s", fmt.Sprint("f", i))
	}
	j.Close()
	// The state a crash leaves between the footer of segment 'last' and the whole header of
	// the next: rotate (by age), then cut the new segment to half its header.
	nums := mustList(t, dir)
	last := nums[len(nums)-1]
	now := time.Now().Add(48 * time.Hour)
	j2, _, err := Open(dir, Options{MaxSegmentBytes: 1024, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	write(t, j2, "s", "rotated")
	j2.Close()
	newest := mustList(t, dir)[len(mustList(t, dir))-1]
	if newest != last+1 {
		t.Fatalf("segments %v", mustList(t, dir))
	}
	if err := os.Truncate(segPath(dir, newest), 20); err != nil {
		t.Fatal(err)
	}
	j3, orep, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j3.Close()
	if orep.RemovedEmpty != segmentName(newest) || !orep.NewSegment {
		t.Fatalf("open report %+v", orep)
	}
	write(t, j3, "s", "after")
	mustVerify(t, dir)
}

func mustList(t *testing.T, dir string) []uint64 {
	t.Helper()
	nums, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	return nums
}

func TestGroupCommitSharesOneFdatasync(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	const followers = 10
	entered := make(chan struct{})
	release := make(chan struct{})
	written := make(chan uint64, followers+1)
	var once sync.Once
	j.beforeSync = func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	}
	j.afterWrite = func(seq uint64) { written <- seq }
	before := j.Stats().Fsyncs
	var wg sync.WaitGroup
	errs := make(chan error, followers+1)
	appendOne := func(i int) {
		defer wg.Done()
		_, err := j.Append(Entry{Kind: KindEvent, Door: DoorDaemon, Target: Target{Op: "tick", Path: fmt.Sprint(i)}})
		errs <- err
	}
	await := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(waitTimeout):
			close(release)
			t.Fatalf("%s did not happen", what)
		}
	}
	wg.Add(1)
	go appendOne(0)
	<-written
	await(entered, "the first append leading a group") // it holds its fdatasync
	wg.Add(followers)
	for i := range followers {
		go appendOne(i + 1)
	}
	for range followers {
		<-written // every follower has written and waits for a sync
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The leader takes the newest written seq after its wait, so its one fdatasync covers
	// the ten that wrote meanwhile.
	if n := j.Stats().Fsyncs - before; n != 1 {
		t.Fatalf("%d fdatasyncs for 11 appends, want 1", n)
	}
	mustVerify(t, dir)
}

func TestConcurrentAppendsChainOnce(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{MaxSegmentBytes: 8 << 10})
	var wg sync.WaitGroup
	const workers, each = 16, 25
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				write(t, j, fmt.Sprint("s", w), fmt.Sprint(i))
			}
		})
	}
	wg.Wait()
	recs := readAll(t, dir, Query{})
	if len(recs) != workers*each*2 {
		t.Fatalf("%d records", len(recs))
	}
	seen := map[string]bool{}
	for _, r := range recs {
		k := string(r.Kind) + r.Actor.Session + "/" + r.Target.Path
		if seen[k] {
			t.Fatalf("%s recorded twice", k)
		}
		seen[k] = true
	}
	mustVerify(t, dir)
	if st := j.Stats(); st.Fsyncs > st.Records {
		t.Fatalf("stats %+v", st)
	}
}

// TestNoSecretInTheJournal feeds a secret through every field of an Entry that takes a caller's
// text: each either refuses it or keeps only its digest. The scan is shown to find a secret
// when arguments are kept, so that it can fail.
func TestNoSecretInTheJournal(t *testing.T) {
	const secret = "cap-handle-7f3a9c1e55d04b2a"
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	if _, err := j.Append(Entry{Kind: KindStarted, Door: DoorMCP, Target: Target{Op: "fs.read", Path: "a"},
		Args: json.RawMessage(`{"handle":"` + secret + `"}`), IdempotencyKey: secret}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Entry{
		{Kind: KindEvent, Door: DoorDaemon, Target: Target{Op: "x"}, Outcome: "denied: " + secret},
		{Kind: KindEvent, Door: DoorDaemon, Target: Target{Op: secret + " leaked"}},
		{Kind: KindEvent, Door: DoorDaemon, Target: Target{Op: "x", Action: "Bearer " + secret}},
	} {
		if _, err := j.Append(bad); err == nil {
			t.Fatalf("accepted %+v", bad)
		}
	}
	scan := func(dir string) bool {
		found := false
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, _ := os.ReadFile(p)
				found = found || bytes.Contains(b, []byte(secret))
			}
			return nil
		})
		return found
	}
	if scan(dir) {
		t.Fatal("the secret is in the journal")
	}
	kept := newDir(t)
	jk := openJ(t, kept, Options{RecordArgs: true})
	if _, err := jk.Append(Entry{Kind: KindStarted, Door: DoorMCP, Target: Target{Op: "fs.read"}, Args: json.RawMessage(`{"handle":"` + secret + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if !scan(kept) {
		t.Fatal("the scan does not find arguments the operator chose to keep")
	}
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		`{"b":1, "a":[true,null,{"d":"x","c":1.50}]}`: `{"a":[true,null,{"c":1.50,"d":"x"}],"b":1}`,
		`"<&>"`:                  `"<&>"`,
		` 12345678901234567890 `: `12345678901234567890`,
		`"\u00e9"`:               `"é"`,
	} {
		got, err := Canonical(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

// TestOnSyncCountsEveryByte: what OnSync reports adds up to every record and byte written,
// headers and footers included, across rotations and Close.
func TestOnSyncCountsEveryByte(t *testing.T) {
	dir := newDir(t)
	var mu sync.Mutex
	var records, nbytes, syncs int
	j, _, err := Open(dir, Options{MaxSegmentBytes: 2048, OnSync: func(r, b int, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if took <= 0 {
			t.Errorf("a sync took %v", took)
		}
		records += r
		nbytes += b
		syncs++
	}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				write(t, j, fmt.Sprint("s", w), fmt.Sprint(i))
			}
		})
	}
	wg.Wait()
	st := j.Stats()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if uint64(records) != st.Records || uint64(nbytes) != st.Bytes || st.Rotations == 0 {
		t.Fatalf("OnSync saw %d records, %d bytes in %d syncs; the journal wrote %+v", records, nbytes, syncs, st)
	}
	var onDisk int64
	for _, n := range mustList(t, dir) {
		fi, _ := os.Stat(segPath(dir, n))
		onDisk += fi.Size()
	}
	if int64(nbytes) != onDisk {
		t.Fatalf("OnSync saw %d bytes, the segments hold %d", nbytes, onDisk)
	}
}

// TestLinesAreEncodingJSONs: every line the journal writes (header, started, outcome, event,
// footer; names that need escaping or are not ASCII, and names that are plain) is byte for
// byte what encoding/json writes of its record, as the journal wrote before appendRecord: a
// journal written by either verifies, and its digests are the same. (Records that keep their
// arguments are encoding/json's; FuzzAppendRecord covers the rest.)
func TestLinesAreEncodingJSONs(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{MaxSegmentBytes: 2048})
	for i := range 6 {
		write(t, j, "s", fmt.Sprintf("dir/é-%d.txt", i))
		write(t, j, "s", fmt.Sprintf("plain-%d.txt", i))
	}
	quoted := `a "q" \ b.txt`
	args, _ := json.Marshal(map[string]string{"path": quoted})
	if _, err := j.Append(Entry{Kind: KindStarted, Door: DoorOwner, Target: Target{Op: "fs.read", Path: quoted}, Args: args}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(Entry{Kind: KindEvent, Door: DoorWeb, Actor: Actor{Room: "home", Host: "hostB"}, Target: Target{Op: "room.join"}, Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	kinds := map[Kind]int{}
	for _, n := range mustList(t, dir) {
		b, err := os.ReadFile(segPath(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			line = bytes.TrimSuffix(line, []byte("\n"))
			rec, err := DecodeRecord(line)
			if err != nil {
				t.Fatal(err)
			}
			kinds[rec.Kind]++
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(&rec); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(line, bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
				t.Fatalf("the journal wrote\n%s\nencoding/json writes\n%s", line, want.Bytes())
			}
		}
	}
	if kinds[KindFooter] == 0 || kinds[KindHeader] < 2 || kinds[KindStarted] != 13 || kinds[KindOutcome] != 12 || kinds[KindEvent] != 1 {
		t.Fatalf("records by kind: %v", kinds)
	}
	mustVerify(t, dir)
}
