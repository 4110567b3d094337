package audit

import (
	"errors"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
)

// synced returns the seq up to which the journal knows its records are on disk.
func synced(j *Journal) uint64 {
	j.sync.mu.Lock()
	defer j.sync.mu.Unlock()
	return j.sync.synced
}

func startedEntry(path string) Entry {
	return Entry{Kind: KindStarted, Door: DoorOwner, Actor: Actor{Session: "s"}, Target: Target{Op: "fs.write", Path: path}}
}

func outcomeEntry(ref uint64, path string) Entry {
	return Entry{Kind: KindOutcome, Ref: ref, Door: DoorOwner, Actor: Actor{Session: "s"}, Target: Target{Op: "fs.write", Path: path}, Outcome: "ok"}
}

// TestAppendNoWaitIsSyncedWithTheOutcome: with SyncAnswer, a started record written with
// AppendNoWait costs no fdatasync and is in the file at once (a kill cannot take it); the
// outcome's Append makes both durable with one.
func TestAppendNoWaitIsSyncedWithTheOutcome(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	before := j.Stats().Fsyncs
	s, err := j.AppendNoWait(startedEntry("a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := j.Stats().Fsyncs - before; n != 0 || synced(j) >= s.Seq {
		t.Fatalf("AppendNoWait made %d fdatasyncs, synced to %d (its seq %d): want none", n, synced(j), s.Seq)
	}
	if recs := readAll(t, dir, Query{}); len(recs) != 1 || recs[0].Seq != s.Seq {
		t.Fatalf("the written record is not in the file: %+v", recs)
	}
	o, err := j.Append(outcomeEntry(s.Seq, "a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := j.Stats().Fsyncs - before; n != 1 || synced(j) < o.Seq {
		t.Fatalf("the outcome made %d fdatasyncs, synced to %d (its seq %d): want 1 covering both", n, synced(j), o.Seq)
	}
	mustVerify(t, dir)
}

// TestIntervalSyncsWithinSyncEvery: with SyncInterval, Append returns once written; the
// flusher syncs SyncEvery after the first unsynced write, once for everything written in the
// window, and never while nothing was written.
func TestIntervalSyncsWithinSyncEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := newDir(t)
		const every = 100 * time.Millisecond
		j, _, err := Open(dir, Options{Sync: SyncInterval, SyncEvery: every})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		base := j.Stats().Fsyncs // the new segment's header
		fsyncs := func() uint64 { return j.Stats().Fsyncs - base }

		time.Sleep(time.Second) // idle: nothing to sync
		synctest.Wait()
		if n := fsyncs(); n != 0 {
			t.Fatalf("an idle journal made %d fdatasyncs", n)
		}
		s, err := j.Append(startedEntry("a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := fsyncs(); n != 0 || synced(j) >= s.Seq {
			t.Fatalf("Append waited for a sync: %d fdatasyncs, synced to %d", n, synced(j))
		}
		time.Sleep(every / 2)
		for range 10 { // more records in the same window
			if _, err := j.Append(outcomeEntry(s.Seq, "a.txt")); err != nil {
				t.Fatal(err)
			}
			if s, err = j.Append(startedEntry("a.txt")); err != nil {
				t.Fatal(err)
			}
		}
		last := s
		time.Sleep(every/2 - time.Nanosecond)
		synctest.Wait()
		if n := fsyncs(); n != 0 {
			t.Fatalf("%d fdatasyncs before SyncEvery passed", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := fsyncs(); n != 1 || synced(j) < last.Seq {
			t.Fatalf("after SyncEvery: %d fdatasyncs, synced to %d; want 1, to %d", n, synced(j), last.Seq)
		}
		time.Sleep(10 * every) // synced: nothing more to do
		synctest.Wait()
		if n := fsyncs(); n != 1 {
			t.Fatalf("%d fdatasyncs with nothing written since the last", n)
		}
		s, err = j.AppendNoWait(startedEntry("c.txt"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(every)
		synctest.Wait()
		if n := fsyncs(); n != 2 || synced(j) < s.Seq {
			t.Fatalf("AppendNoWait's record: %d fdatasyncs, synced to %d, want 2, to %d", n, synced(j), s.Seq)
		}
	})
}

// TestIntervalCloseSyncsPending: Close stops the flusher and syncs what it had not yet; a
// record written just before Close is on disk after it, and the flusher is gone (synctest
// fails a test whose goroutines outlive it).
func TestIntervalCloseSyncsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := newDir(t)
		j, _, err := Open(dir, Options{Sync: SyncInterval, SyncEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		base := j.Stats().Fsyncs
		s, err := j.Append(startedEntry("a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		if n := j.Stats().Fsyncs - base; n != 1 || synced(j) < s.Seq {
			t.Fatalf("Close made %d fdatasyncs, synced to %d; want 1, to %d", n, synced(j), s.Seq)
		}
		if err := j.Close(); err != nil {
			t.Fatalf("a second Close: %v", err)
		}
		if _, err := j.Append(startedEntry("b.txt")); !errors.Is(err, &protocol.Error{Code: CodeClosed}) {
			t.Fatalf("Append after Close: %v", err)
		}
	})
}

// TestIntervalSyncFailureIsSticky: when the flusher's fdatasync fails, the journal fails as
// it does when an Append's does: every later append is refused audit_write_failed, so that
// nothing is appended on top of records whose fate on disk is unknown.
func TestIntervalSyncFailureIsSticky(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := newDir(t)
		j, _, err := Open(dir, Options{Sync: SyncInterval})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		j.beforeSync = func() { // the segment's descriptor goes bad under the flusher
			j.mu.Lock()
			j.f.Close()
			j.mu.Unlock()
		}
		if _, err := j.Append(startedEntry("a.txt")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultSyncEvery)
		synctest.Wait()
		_, err = j.Append(startedEntry("b.txt"))
		wantCode(t, err, CodeWriteFailed)
		_, err = j.AppendNoWait(startedEntry("c.txt"))
		wantCode(t, err, CodeWriteFailed)
	})
}

// TestSyncModes: the modes' names, and Open refusing one it does not know (invalid_field).
func TestSyncModes(t *testing.T) {
	var m SyncMode
	for _, name := range []string{"answer", "interval"} {
		if err := m.UnmarshalText([]byte(name)); err != nil || m.String() != name {
			t.Fatalf("%s: %v, %s", name, err, m)
		}
	}
	wantCode(t, m.UnmarshalText([]byte("always")), protocol.CodeInvalidField)
	if SyncMode("").String() != "answer" {
		t.Fatal(`"" is not answer`)
	}
	dir := newDir(t)
	_, _, err := Open(dir, Options{Sync: "always"})
	wantCode(t, err, protocol.CodeInvalidField)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused Open made %s: %v", dir, err)
	}
}
