package store

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

func callFloorsT(t *testing.T, s *Store, since time.Time) map[string]time.Time {
	t.Helper()
	got, err := s.CallFloors(since)
	if err != nil {
		t.Fatalf("CallFloors: %v", err)
	}
	return got
}

// A raise is kept across a reopen, never lowers a lease, and forgets the other callers' leases
// that are not after since; CallFloors leaves out those not after its since.
func TestCallFloorsRoundTripAndRestart(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	if got := callFloorsT(t, s, time.Time{}); len(got) != 0 {
		t.Fatalf("a new store's floors: %v", got)
	}
	a, b, c := "aa", "bb", "cc"
	l := t0.Add(1500 * time.Microsecond) // rounded up to the millisecond
	for _, r := range []struct {
		caller string
		lease  time.Time
	}{{a, l}, {a, t0}, {b, t0.Add(time.Second)}, {c, t0.Add(-time.Hour)}} {
		if err := s.RaiseCallFloor(r.caller, r.lease, time.Time{}); err != nil {
			t.Fatalf("RaiseCallFloor(%s, %v): %v", r.caller, r.lease, err)
		}
	}
	s.Close()
	s = openT(t, dir)
	got := callFloorsT(t, s, t0.Add(-time.Minute))
	if len(got) != 2 || !got[a].Equal(t0.Add(2*time.Millisecond)) || !got[b].Equal(t0.Add(time.Second)) {
		t.Fatalf("after a reopen: %v", got)
	}
	if got := callFloorsT(t, s, time.Time{}); len(got) != 3 {
		t.Fatalf("every lease: %v", got)
	}
	// B's raise forgets C's lease, which is not after since, and keeps its own older one's
	// successor.
	if err := s.RaiseCallFloor(b, t0.Add(2*time.Second), t0.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := callFloorsT(t, s, time.Time{}); len(got) != 2 || got[c] != (time.Time{}) || !got[b].Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after a raise that forgets: %v", got)
	}
}

// Invalid raises are refused with nothing written, and a lease that does not parse fails
// CallFloors with corrupt_state.
func TestCallFloorsRefusedAndCorrupt(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	for _, r := range []struct {
		caller string
		lease  time.Time
	}{{"", t0}, {"a b", t0}, {string(make([]byte, 129)), t0}, {"aa", time.Time{}}, {"aa", time.UnixMilli(1 << 60)}} {
		if err := s.RaiseCallFloor(r.caller, r.lease, time.Time{}); !errors.Is(err, &protocol.Error{Code: protocol.CodeCatalogUpdate}) {
			t.Errorf("RaiseCallFloor(%q, %v) = %v", r.caller, r.lease, err)
		}
	}
	if n := s.group.commits.Load(); n != 0 {
		t.Errorf("refused raises ran %d commits", n)
	}
	s.Close()
	for _, v := range []string{"", "012", "-5", "1.5", "99999999999999999", "0"} {
		rawUpdate(t, s.Path(), func(tx *bolt.Tx) error { return tx.Bucket(bucketCallFloors).Put([]byte("aa"), []byte(v)) })
		s = openT(t, dir)
		if _, err := s.CallFloors(time.Time{}); !errors.Is(err, &protocol.Error{Code: protocol.CodeCorruptState}) {
			t.Errorf("CallFloors with lease %q = %v", v, err)
		}
		s.Close()
	}
}

// Concurrent raises share one commit, and so one fsync.
func TestCallFloorRaisesShareACommit(t *testing.T) {
	s := openT(t, newDir(t))
	const n = 16
	holdFirstGroup(t, s, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.RaiseCallFloor(fmt.Sprintf("c%02d", i), t0.Add(time.Duration(i)*time.Second), time.Time{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if c := s.group.commits.Load(); c != 1 {
		t.Errorf("%d concurrent raises ran %d commits, want 1", n, c)
	}
	if got := callFloorsT(t, s, time.Time{}); len(got) != n || !got["c07"].Equal(t0.Add(7*time.Second)) {
		t.Errorf("after concurrent raises: %v", got)
	}
}

// A full bucket refuses a new caller's lease, unless the raise forgets enough stale ones.
func TestCallFloorsBound(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	s.Close()
	rawUpdate(t, s.Path(), func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCallFloors)
		for i := range MaxCallFloors {
			if err := b.Put([]byte("c"+strconv.Itoa(i)), formatLease(t0)); err != nil {
				return err
			}
		}
		return nil
	})
	s = openT(t, dir)
	if err := s.RaiseCallFloor("new", t0.Add(time.Second), time.Time{}); !errors.Is(err, &protocol.Error{Code: protocol.CodeCatalogUpdate}) {
		t.Fatalf("a raise into a full bucket = %v", err)
	}
	if err := s.RaiseCallFloor("c1", t0.Add(time.Second), time.Time{}); err != nil {
		t.Fatalf("a known caller's raise in a full bucket: %v", err)
	}
	if err := s.RaiseCallFloor("new", t0.Add(time.Second), t0); err != nil {
		t.Fatalf("a raise that forgets the stale leases: %v", err)
	}
	if got := callFloorsT(t, s, time.Time{}); len(got) != 2 {
		t.Fatalf("%d leases left, want c1 and new", len(got))
	}
}

// BenchmarkRaiseCallFloor measures one durable raise of a call floor lease, alone (a commit
// and its fsync): what a room provider pays about once per room.FloorStep per caller.
//
//	go test -run '^$' -bench RaiseCallFloor -benchtime 200x ./internal/store/
func BenchmarkRaiseCallFloor(b *testing.B) {
	s := openT(b, newDir(b))
	b.ResetTimer()
	for i := range b.N {
		if err := s.RaiseCallFloor("caller", t0.Add(time.Duration(i+1)*time.Second), t0); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseLease: a stored lease parses only in its canonical form (what formatLease writes),
// so a lease read back and written again is the same bytes, and never to a time at or before
// 1970.
func FuzzParseLease(f *testing.F) {
	f.Fuzz(func(t *testing.T, v []byte) {
		lease, ok := parseLease(v)
		if !ok {
			return
		}
		if lease.UnixMilli() <= 0 || string(formatLease(lease)) != string(v) {
			t.Fatalf("parseLease(%q) = %v, written back as %q", v, lease, formatLease(lease))
		}
	})
}
