package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
)

// noSessions is a session manager with no resident generation.
type noSessions struct{}

func (noSessions) Session(id string, _ int64, _ bool) (*protocol.SessionSnapshot, error) {
	return nil, protocol.Errorf(protocol.CodeSessionNotFound, "no such session").With("sessionId", id)
}

func testAdapterHost(t *testing.T) *adapterHost {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := capclient.New(capclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sup.Close(context.Background())
		st.Close()
	})
	return newAdapterHost(sup, st, noSessions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// A registration tied to a room is refused unless this host is in the room (unknown_room,
// or unavailable without the room service). RemoveForRoom, the room service's hook for a
// closed room, removes exactly the registrations tied to that room, durable records included, and every removal reaches the
// OnAdapterRemoved hooks with its capability ids and reason.
func TestRemoveForRoom(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	a := testAdapterHost(t)
	var mu sync.Mutex
	var told []capclient.Removal
	a.OnAdapterRemoved(func(r capclient.Removal) {
		mu.Lock()
		told = append(told, r)
		mu.Unlock()
	})
	ctx := context.Background()
	// Without the room service a room tie is refused, and nothing starts.
	_, err := a.register(ctx, &protocol.RegisterAdapterPayload{Name: "lamp", Command: lamp, Room: "kitchen"})
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != "unavailable" || !pe.Retryable || len(a.sup.Status()) != 0 {
		t.Fatalf("register tied to a room without the room service: %v", err)
	}
	// The room service's answer decides (the daemon's is Server.checkOpenRoom).
	a.checkRoom = func(id string) *protocol.Error {
		if id != "kitchen" {
			return protocol.Errorf("unknown_room", "this host is not in that room")
		}
		return nil
	}
	_, err = a.register(ctx, &protocol.RegisterAdapterPayload{Name: "lamp", Command: lamp, Room: "hall"})
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != "unknown_room" || len(a.sup.Status()) != 0 {
		t.Fatalf("register tied to a room this host is not in: %v", err)
	}
	if regs, err := a.store.Registrations(); err != nil || len(regs) != 0 {
		t.Fatalf("stored after refused registrations: %v, %v", regs, err)
	}
	if _, err := a.register(ctx, &protocol.RegisterAdapterPayload{Name: "lamp", Command: lamp, Room: "kitchen", LeaseSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	// The record keeps the capability ids, for a removal after a restart without the child.
	if regs, err := a.store.Registrations(); err != nil || len(regs) != 1 || !slices.Equal(regs[0].Capabilities, []string{"desk_lamp"}) {
		t.Fatalf("stored %+v, %v", regs, err)
	}
	names, err := a.RemoveForRoom(ctx, "hall")
	if err != nil || len(names) != 0 {
		t.Fatalf("RemoveForRoom(hall) = %v, %v", names, err)
	}
	if len(a.sup.Status()) != 1 {
		t.Fatal("another room's close removed the adapter")
	}
	pid := a.sup.Status()[0].PID
	names, err = a.RemoveForRoom(ctx, "kitchen")
	if err != nil || !slices.Equal(names, []string{"lamp"}) {
		t.Fatalf("RemoveForRoom(kitchen) = %v, %v", names, err)
	}
	if len(a.sup.Status()) != 0 {
		t.Fatal("the room's adapter still runs")
	}
	if !daemontest.WaitFor(5*time.Second, func() bool { return processGone(pid) }) {
		t.Fatal("the room's adapter child still runs")
	}
	if regs, err := a.store.Registrations(); err != nil || len(regs) != 0 {
		t.Fatalf("stored after RemoveForRoom: %v, %v", regs, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0].Reason != capclient.ReasonRoomClosed || !slices.Equal(told[0].Capabilities, []string{"desk_lamp"}) ||
		told[0].Registration.Room != "kitchen" {
		t.Fatalf("hooks told %+v", told)
	}

	// A session tie to a generation that is not resident is refused before anything starts.
	_, err = a.register(ctx, &protocol.RegisterAdapterPayload{Name: "lamp", Command: lamp, SessionID: "s", Generation: 1})
	if pe, ok := err.(*protocol.Error); !ok || pe.Code != protocol.CodeSessionNotFound || len(a.sup.Status()) != 0 {
		t.Fatalf("register tied to no session: %v", err)
	}
}

func processGone(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	for i := len(st) - 1; i > 0; i-- { // the state follows the last ')'
		if st[i] == ')' {
			return i+2 < len(st) && st[i+2] == 'Z'
		}
	}
	return false
}

// A registration whose child never ran still tells the OnAdapterRemoved hooks the capability
// ids its record holds, so its publications are withdrawn: one removed at start because its
// lease ended, and one restored without starting (its command is gone) and then removed.
func TestRemovalOfUnrunAdapterTellsRecordedCapabilities(t *testing.T) {
	a := testAdapterHost(t)
	var mu sync.Mutex
	var told []capclient.Removal
	a.OnAdapterRemoved(func(r capclient.Removal) {
		mu.Lock()
		told = append(told, r)
		mu.Unlock()
	})
	missing := filepath.Join(t.TempDir(), "lamp")
	for _, r := range []store.Registration{
		{Name: "expired", Command: missing, Args: []string{}, LeaseExpires: time.Now().Add(-time.Minute), Capabilities: []string{"old_lamp"}},
		{Name: "gone", Command: missing, Args: []string{}, Capabilities: []string{"ghost"}},
	} {
		if err := a.store.PutRegistration(r); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if _, err := a.restore(ctx, a.log); err != nil {
		t.Fatal(err)
	}
	if _, err := a.remove(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if regs, err := a.store.Registrations(); err != nil || len(regs) != 0 {
		t.Fatalf("stored after the removals: %v, %v", regs, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 || told[0].Reason != capclient.ReasonLeaseExpired || !slices.Equal(told[0].Capabilities, []string{"old_lamp"}) ||
		told[1].Reason != capclient.ReasonRemoved || !slices.Equal(told[1].Capabilities, []string{"ghost"}) {
		t.Fatalf("hooks told %+v", told)
	}
}
