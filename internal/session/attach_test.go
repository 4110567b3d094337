package session

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
)

// newBoundedManager is newManager with attachment bounds, and sessions s1…sN resident.
func newBoundedManager(t *testing.T, total, perSession int, sessions ...string) *Manager {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := New(Config{HostInstanceID: "host-test", Store: st, MaxAttachments: total, MaxAttachmentsPerSession: perSession})
	if err := m.Recover(); err != nil {
		t.Fatal(err)
	}
	for _, id := range sessions {
		if _, err := m.Open(context.Background(), OpenRequest{SessionID: id, Generation: 1, Version: v1(), Policy: testPolicy(t, "")}); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// evictedWith returns the attachmentEvicted data r got as its last line, failing if it was
// not evicted.
func evictedWith(t *testing.T, name string, r *recorder) protocol.AttachmentEvictedData {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.evicted || len(r.lines) == 0 {
		t.Fatalf("%s was not evicted: %q", name, r.lines)
	}
	var ev struct {
		Event     string                         `json:"event"`
		SessionID string                         `json:"sessionId"`
		Data      protocol.AttachmentEvictedData `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.lines[len(r.lines)-1]), &ev); err != nil || ev.Event != protocol.EventAttachmentEvicted {
		t.Fatalf("%s's last line: %q %v", name, r.lines[len(r.lines)-1], err)
	}
	return ev.Data
}

func notEvicted(t *testing.T, subs map[string]*recorder, names ...string) {
	t.Helper()
	for _, n := range names {
		if subs[n].evicted {
			t.Errorf("%s was evicted", n)
		}
	}
}

// TestAttachmentBoundsEvictTheLargestHolder pins who makes room at each bound (issue 24.3): the
// process holding the most attachments there, its least recently attached; the requester's own
// on a tie; never the requester's own connection, never another process's single attachment.
func TestAttachmentBoundsEvictTheLargestHolder(t *testing.T) {
	m := newBoundedManager(t, 5, 3, "s1", "s2", "s3")
	subs := map[string]*recorder{}
	sub := func(name string, peer int) *recorder {
		if subs[name] == nil {
			subs[name] = &recorder{peer: peer}
		}
		return subs[name]
	}
	attach := func(session, name string, peer int) error {
		_, err := m.Attach(session, 1, sub(name, peer))
		return err
	}
	must := func(session, name string, peer int) {
		t.Helper()
		if err := attach(session, name, peer); err != nil {
			t.Fatalf("attach %s to %s: %v", name, session, err)
		}
	}

	// Per session (3): the operator's process 1 and flooder 2 hold s1 when flooder 2 comes
	// again: its own oldest goes, not the operator's older single attachment.
	must("s1", "op", 1)
	must("s1", "f2a", 2)
	must("s1", "f2b", 2)
	must("s1", "f2c", 2)
	if d := evictedWith(t, "f2a", subs["f2a"]); d.Limit != protocol.AttachmentLimitPerSession || d.MaxAttachmentsPerSession != 3 || d.MaxAttachments != 5 {
		t.Errorf("f2a evicted with %+v", d)
	}
	notEvicted(t, subs, "op", "f2b")
	// A third process: flooder 2 holds the most (2), so its least recently attached goes.
	must("s1", "p3", 3)
	evictedWith(t, "f2b", subs["f2b"])
	notEvicted(t, subs, "op", "f2c")
	// s1 is op, f2c, p3: three processes with one each. A fourth is refused; nobody goes.
	if err := attach("s1", "p4", 4); code(err) != protocol.CodeAttachmentCapacity {
		t.Fatalf("attach at a bound of single attachments: %v", err)
	}
	notEvicted(t, subs, "op", "f2c", "p3")
	// An attach again is idempotent and makes no room.
	must("s1", "op", 1)
	notEvicted(t, subs, "op", "f2c", "p3")

	// In total (5): s1 holds 3; p3 attaches s2 on the same connection and flooder 2 attaches
	// s2 and s3 anew. Flooder 2 then holds 3 of the 5, and its next attachment displaces its
	// own least recently attached (f2c on s1), not p3's two on one connection.
	must("s2", "p3", 3)
	must("s2", "f2d", 2)
	if m.attachments != 5 {
		t.Fatalf("%d attachments counted, want 5", m.attachments)
	}
	must("s3", "f2e", 2)
	if d := evictedWith(t, "f2c", subs["f2c"]); d.Limit != protocol.AttachmentLimitTotal {
		t.Errorf("f2c evicted with %+v", d)
	}
	notEvicted(t, subs, "op", "p3", "f2d")
	// A connection's own attachment never makes room for it: p3's connection holds s1 and
	// s2, and is now the largest holder (3 with s3), yet f2's own go first.
	must("s3", "p3", 3)
	evictedWith(t, "f2d", subs["f2d"])
	notEvicted(t, subs, "op", "p3", "f2e")

	// An evicted subscriber gets no more events; a retired session gives its attachments back.
	before := len(subs["f2a"].lines)
	if _, err := m.Close("s1", 1, true); err != nil {
		t.Fatal(err)
	}
	if len(subs["f2a"].lines) != before {
		t.Errorf("an evicted subscriber got an event: %q", subs["f2a"].lines)
	}
	if m.attachments != 3 {
		t.Errorf("%d attachments counted after close, want 3 (p3 on s2 and s3, f2e on s3)", m.attachments)
	}
	m.DetachAll(subs["p3"])
	if m.attachments != 1 {
		t.Errorf("%d attachments counted after DetachAll, want 1", m.attachments)
	}
	if got := m.Host().Metrics; got["attachmentsEvicted"] != 4 || got["attachmentsRefused"] != 1 {
		t.Errorf("metrics %v, want attachmentsEvicted 4 and attachmentsRefused 1", got)
	}
}
