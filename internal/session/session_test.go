package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
)

func newManager(t *testing.T, maxSessions int) (*Manager, *store.Store) {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := New(Config{HostInstanceID: "host-test", Store: st, MaxSessions: maxSessions})
	if err := m.Recover(); err != nil {
		t.Fatal(err)
	}
	return m, st
}

func testPolicy(t *testing.T, name string) *protocol.Policy {
	return &protocol.Policy{Cwd: t.TempDir(), Name: name, Mode: protocol.ModeNew, Tools: protocol.ResourceNone}
}

func v1() protocol.Version { v, _ := protocol.ParseVersion("1.0"); return v }

func code(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// recorder is a Subscriber of process peer that keeps the lines it gets; evicted is set once
// it was evicted (its last line is then the eviction's).
type recorder struct {
	peer    int
	mu      sync.Mutex
	lines   []string
	evicted bool
}

func (r *recorder) Deliver(line []byte) {
	r.mu.Lock()
	r.lines = append(r.lines, string(line))
	r.mu.Unlock()
}

func (r *recorder) Evict(line []byte) {
	r.mu.Lock()
	r.lines = append(r.lines, string(line))
	r.evicted = true
	r.mu.Unlock()
}

func (r *recorder) Peer() int { return r.peer }

func TestOpenBeforeRecoveryIsNotReady(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := New(Config{Store: st})
	_, err = m.Open(context.Background(), OpenRequest{SessionID: "s", Generation: 1, Version: v1(), Policy: testPolicy(t, "")})
	if code(err) != protocol.CodeHostNotReady {
		t.Fatalf("open before recovery: %v", err)
	}
	if m.Ready() {
		t.Fatal("ready before recovery")
	}
}

func TestConcurrentOpensOfOneSessionAgree(t *testing.T) {
	m, st := newManager(t, 0)
	p := testPolicy(t, "")
	var wg sync.WaitGroup
	created := make(chan bool, 16)
	for range 16 {
		wg.Go(func() {
			res, err := m.Open(context.Background(), OpenRequest{SessionID: "same", Generation: 3, Version: v1(), Policy: p})
			if err != nil {
				t.Error(err)
				return
			}
			created <- res.Created
		})
	}
	wg.Wait()
	close(created)
	n := 0
	for c := range created {
		if c {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d opens reported created; exactly one must", n)
	}
	rec, err := st.Record("same")
	if err != nil || rec.Revision != 1 {
		t.Fatalf("record after 16 identical opens: %+v %v", rec, err)
	}
}

func TestCapacityCountsOpensInProgress(t *testing.T) {
	m, _ := newManager(t, 4)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Go(func() {
			_, err := m.Open(context.Background(), OpenRequest{SessionID: fmt.Sprintf("s%d", i), Generation: 0, Version: v1(), Policy: testPolicy(t, "")})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	ok, full := 0, 0
	for err := range errs {
		switch code(err) {
		case "":
			ok++
		case protocol.CodeSessionCapacity:
			full++
		default:
			t.Fatal(err)
		}
	}
	if ok != 4 || full != 8 || len(m.Host().Sessions) != 4 {
		t.Fatalf("ok=%d full=%d resident=%d; want 4/8/4", ok, full, len(m.Host().Sessions))
	}
}

func TestEventsAreOrderedAndGenerationFenced(t *testing.T) {
	m, _ := newManager(t, 0)
	if _, err := m.Open(context.Background(), OpenRequest{SessionID: "s", Generation: 1, Version: v1(), Policy: testPolicy(t, "")}); err != nil {
		t.Fatal(err)
	}
	old, next := &recorder{}, &recorder{}
	if _, err := m.Attach("s", 1, old); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Open(context.Background(), OpenRequest{SessionID: "s", Generation: 2, Version: v1(), Policy: testPolicy(t, "")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Attach("s", 1, next); code(err) != protocol.CodeStaleGeneration {
		t.Fatalf("attach to replaced generation: %v", err)
	}
	if _, err := m.Attach("s", 2, next); err != nil {
		t.Fatal(err)
	}
	m.Drain(0)
	if _, err := m.Close("s", 2, true); err != nil {
		t.Fatal(err)
	}
	if len(old.lines) != 1 || !contains(old.lines[0], `"event":"sessionClosed"`) || !contains(old.lines[0], `"reason":"replaced"`) {
		t.Fatalf("old generation's subscriber: %q", old.lines)
	}
	// The sequence is per session: generation 2 continues after generation 1's last event.
	if len(next.lines) != 2 || !contains(next.lines[0], `"event":"hostDraining"`) || !contains(next.lines[0], `"sequence":2`) ||
		!contains(next.lines[1], `"sequence":3`) {
		t.Fatalf("new generation's subscriber: %q", next.lines)
	}
}

func TestCloseWithoutRetainDeletes(t *testing.T) {
	m, st := newManager(t, 0)
	if _, err := m.Open(context.Background(), OpenRequest{SessionID: "gone", Generation: 1, Version: v1(), Policy: testPolicy(t, "")}); err != nil {
		t.Fatal(err)
	}
	res, err := m.Close("gone", 1, false)
	if err != nil || !res.Closed || !res.Deleted {
		t.Fatalf("close: %+v %v", res, err)
	}
	if rec, _ := st.Record("gone"); rec != nil {
		t.Fatal("record survived a close without retain")
	}
	if man, _ := st.Manifest("gone"); man != nil {
		t.Fatal("manifest survived a close without retain")
	}
	if _, err := m.Close("gone", 1, false); code(err) != protocol.CodeSessionNotFound {
		t.Fatalf("second close: %v", err)
	}
	// A new generation 0 is a fresh session now.
	if _, err := m.Open(context.Background(), OpenRequest{SessionID: "gone", Generation: 0, Version: v1(), Policy: testPolicy(t, "")}); err != nil {
		t.Fatal(err)
	}
}

func TestRetainedCloseKeepsRecordAndDropsManifest(t *testing.T) {
	m, st := newManager(t, 0)
	p := testPolicy(t, "kept")
	if _, err := m.Open(context.Background(), OpenRequest{SessionID: "k", Generation: 5, Version: v1(), Policy: p}); err != nil {
		t.Fatal(err)
	}
	if man, _ := st.Manifest("k"); man == nil || man.Generation != 5 {
		t.Fatal("no manifest for a resident session")
	}
	if _, err := m.Close("k", 5, true); err != nil {
		t.Fatal(err)
	}
	rec, _ := st.Record("k")
	if rec == nil || rec.Residency != protocol.Dormant || rec.Generation != 5 || rec.Name != "kept" {
		t.Fatalf("record after retained close: %+v", rec)
	}
	if man, _ := st.Manifest("k"); man != nil {
		t.Fatal("a dormant session kept its manifest")
	}
	if _, err := m.Open(context.Background(), OpenRequest{SessionID: "k", Generation: 5, Version: v1(), Policy: testPolicy(t, "other")}); code(err) != protocol.CodeSessionPolicyConflict {
		t.Fatalf("dormant session, same generation, other policy: %v", err)
	}
	if h := m.Host(); h.Dormant != 1 || len(h.Sessions) != 0 {
		t.Fatalf("host view: %+v", h)
	}
}

func TestMemorySessionsHaveNoManifest(t *testing.T) {
	m, st := newManager(t, 0)
	p := testPolicy(t, "")
	p.Mode = protocol.ModeMemory
	if _, err := m.Open(context.Background(), OpenRequest{SessionID: "mem", Generation: 0, Version: v1(), Policy: p}); err != nil {
		t.Fatal(err)
	}
	if man, _ := st.Manifest("mem"); man != nil {
		t.Fatal("memory session has a manifest")
	}
	if rec, _ := st.Record("mem"); rec == nil {
		t.Fatal("memory session has no catalog record")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
