package roomhost

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lamp is a capability supervisor with one capability, lamp, outside what this package
// tests: the daemon's binary tests run the real supervisor and adapter.
type lamp struct {
	mu      sync.Mutex
	invokes int
	gone    bool
	// unavailable is why its capability is shown unavailable (UnavailableReason), "" when it
	// is not; Describe, Observe and Invoke still answer.
	unavailable string
}

var lampDescriptor = capadapter.Descriptor{CapabilityID: "lamp", Title: "Lamp", Version: "1", Observe: true,
	Actions: []capadapter.Action{
		{Name: "set_color", Title: "Set color", Input: capadapter.Input{Type: "object", Properties: map[string]string{"color": "string"}, Required: []string{"color"}}},
		{Name: "reboot", Title: "Reboot", Input: capadapter.Input{Type: "object", Properties: map[string]string{}}},
	}}

func (l *lamp) Describe(id string) (capadapter.Descriptor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id != "lamp" || l.gone {
		return capadapter.Descriptor{}, &capadapter.Error{Code: capadapter.CodeUnknownCapability}
	}
	return lampDescriptor, nil
}

func (l *lamp) UnavailableReason(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id != "lamp" || l.gone {
		return ReasonAdapterNotReady
	}
	return l.unavailable
}

func (l *lamp) Observe(context.Context, string) (json.RawMessage, error) {
	return json.RawMessage(`{"on":true}`), nil
}

func (l *lamp) Invoke(_ context.Context, _, action string, args json.RawMessage) (json.RawMessage, error) {
	l.mu.Lock()
	l.invokes++
	l.mu.Unlock()
	return json.RawMessage(`{"done":"` + action + `"}`), nil
}

func (l *lamp) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.invokes
}

type host struct {
	svc   *Service
	st    *store.Store
	dir   string
	caps  *lamp
	clock *atomic.Int64 // offset added to time.Now, ns

	mu     sync.Mutex
	closed []string // the rooms Config.RoomClosed was told
}

func (h *host) roomsClosed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.closed)
}

func startHost(t *testing.T, via Admission, dir string, wait time.Duration) *host {
	t.Helper()
	return startHostAt(t, via, dir, wait, "")
}

// startHostAt is startHost with the embedded server's listen address.
func startHostAt(t *testing.T, via Admission, dir string, wait time.Duration, listen string) *host {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &host{st: st, dir: dir, caps: &lamp{}, clock: new(atomic.Int64)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h.svc, err = Start(ctx, Config{StateDir: dir, Store: st, Capabilities: h.caps, Via: via, Listen: listen, ApprovalWait: wait, Logger: testLogger(t),
		PresenceTTL: 3 * time.Second, keepEvery: 200 * time.Millisecond, clock: func() time.Time { return time.Now().Add(time.Duration(h.clock.Load())) },
		RoomClosed: func(_ context.Context, id string) {
			h.mu.Lock()
			h.closed = append(h.closed, id)
			h.mu.Unlock()
		}})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(h.stop)
	return h
}

// testLogger logs to the test's output when AIRLOCK_TEST_LOG is set.
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("AIRLOCK_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

func (h *host) stop() {
	if h.svc != nil {
		h.svc.Close()
		h.st.Close()
		h.svc = nil
	}
}

func codeIs(t *testing.T, err error, want string) {
	t.Helper()
	var e interface{ Code() string }
	if !errors.As(err, &e) || e.Code() != want {
		t.Fatalf("error %v, want code %s", err, want)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// twoHosts starts A (embedded server) and B (joined to it), with A's room "home" joined by B.
func twoHosts(t *testing.T, wait time.Duration) (a, b *host) {
	a = startHost(t, nil, "", 0)
	st := a.svc.Status()
	if !st.Embedded || !strings.HasPrefix(st.NATSURL, "nats://127.0.0.1:") {
		t.Fatalf("status %+v", st)
	}
	b = startHost(t, a.svc, "", wait)
	if b.svc.Status().Embedded {
		t.Fatal("B embeds a server although it joined A's")
	}
	if _, err := a.svc.Create(ctx(t), "home", "Home"); err != nil {
		t.Fatal(err)
	}
	inv, err := a.svc.Invite(ctx(t), "home", "bob")
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.svc.Join(ctx(t), inv.Code)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "home" || r.Owner != a.svc.HostID() || r.Members != 2 {
		t.Fatalf("joined %+v", r)
	}
	return a, b
}

func TestTwoHostsPublishInvokeWithdraw(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "nope"}); err == nil {
		t.Fatal("published an unknown capability")
	} else {
		codeIs(t, err, CodeUnknownCapability)
	}
	_, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"shout"}})
	codeIs(t, err, room.CodeInvalidRequest)
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}, Observe: true}); err != nil {
		t.Fatal(err)
	}
	var caps []Capability
	waitFor(t, "B sees A's lamp", func() bool {
		caps, _ = b.svc.Capabilities(bg, "home")
		return len(caps) == 1 && caps[0].Title == "Lamp"
	})
	if c := caps[0]; c.Provider != a.svc.HostID() || c.ProviderSelf || !c.Observe || len(c.Actions) != 1 || c.Actions[0].Name != "set_color" ||
		!strings.Contains(string(c.Actions[0].Input), `"color":"string"`) {
		t.Fatalf("B sees %+v", c)
	}
	d, err := b.svc.Room(bg, "home")
	if err != nil || len(d.Members) != 2 || len(d.Capabilities) != 1 {
		t.Fatalf("Room = %+v, %v", d, err)
	}

	res, err := b.svc.Observe(bg, "home", string(a.svc.HostID()), "lamp")
	if err != nil || string(res) != `{"on":true}` {
		t.Fatalf("observe = %s, %v", res, err)
	}
	res, err = b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#123456"}`))
	if err != nil || string(res) != `{"done":"set_color"}` {
		t.Fatalf("invoke = %s, %v", res, err)
	}
	_, err = b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "reboot", nil)
	codeIs(t, err, room.CodeUnauthorized)
	_, err = b.svc.Invoke(bg, "home", string(a.svc.HostID()), "other", "set_color", nil)
	codeIs(t, err, room.CodeUnauthorized)
	_, err = b.svc.Invoke(bg, "elsewhere", string(a.svc.HostID()), "lamp", "set_color", nil)
	codeIs(t, err, CodeUnknownRoom)
	if n := a.caps.count(); n != 1 {
		t.Fatalf("A's lamp ran %d invokes, want 1", n)
	}

	if ok, err := a.svc.Unpublish(bg, "home", "lamp"); !ok || err != nil {
		t.Fatalf("Unpublish = %v, %v", ok, err)
	}
	_, err = b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#123456"}`))
	codeIs(t, err, room.CodeUnauthorized)
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "reboot", nil); err != nil {
		t.Fatalf("all actions published: %v", err)
	}
	a.caps.mu.Lock()
	a.caps.gone = true
	a.caps.mu.Unlock()
	a.svc.Withdraw([]string{"lamp"})
	_, err = b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "reboot", nil)
	codeIs(t, err, room.CodeUnauthorized)
	if pubs, _ := a.st.Publications(); len(pubs) != 0 {
		t.Fatalf("withdrawn publications still stored: %+v", pubs)
	}
	waitFor(t, "B sees the withdrawal", func() bool {
		caps, _ = b.svc.Capabilities(bg, "home")
		return len(caps) == 0
	})
	if n := a.caps.count(); n != 2 {
		t.Fatalf("A's lamp ran %d invokes, want 2", n)
	}

	// The call log of each side, without args or results.
	var provided, made int
	for _, e := range a.svc.Calls() {
		if e.Kind == EventCall && e.Caller == b.svc.HostID() {
			provided++
		}
	}
	for _, e := range b.svc.Calls() {
		if e.Kind == EventCall && e.Caller == b.svc.HostID() {
			made++
		}
	}
	// B's call into a room it is not in never left B.
	if provided != 7 || made != 7 {
		t.Fatalf("A logged %d calls of B, B logged %d of its own; want 7 and 7", provided, made)
	}
}

func TestInviteOneTimeAndExpiry(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	c := startHost(t, a.svc, "", 0)

	// A used code is refused, as is one for a room B is already in.
	inv, err := a.svc.Invite(bg, "home", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.svc.Join(bg, inv.Code); err != nil {
		t.Fatal(err)
	}
	if err := c.svc.CloseRoom(bg, "home"); err != nil {
		t.Fatal(err)
	}
	_, err = c.svc.Join(bg, inv.Code)
	codeIs(t, err, CodeInvalidJoinCode)

	// A joining host whose clock is off the owner's by more than the clock window is told
	// so, and its code is not used up: it joins once its clock is right.
	inv, err = a.svc.Invite(bg, "home", "")
	if err != nil {
		t.Fatal(err)
	}
	c.clock.Store(int64(room.ClockWindow + time.Second))
	_, err = c.svc.Join(bg, inv.Code)
	codeIs(t, err, room.CodeUnauthorized)
	if !strings.Contains(err.Error(), "clock") {
		t.Fatalf("a join refused for its time says: %v", err)
	}
	c.clock.Store(0)
	if _, err := c.svc.Join(bg, inv.Code); err != nil {
		t.Fatalf("the code after the clock was set right: %v", err)
	}
	if err := c.svc.CloseRoom(bg, "home"); err != nil {
		t.Fatal(err)
	}

	// An expired code.
	inv, err = a.svc.Invite(bg, "home", "")
	if err != nil {
		t.Fatal(err)
	}
	a.clock.Store(int64(DefaultInviteTTL + time.Second))
	c.clock.Store(int64(DefaultInviteTTL + time.Second))
	_, err = c.svc.Join(bg, inv.Code)
	codeIs(t, err, CodeInvalidJoinCode)

	// Malformed codes, and a code with a changed secret.
	for _, code := range []string{"", "ajc1.home", strings.Replace(inv.Code, "ajc1", "ajc2", 1), inv.Code[:len(inv.Code)-2] + "AA"} {
		_, err = c.svc.Join(bg, code)
		codeIs(t, err, CodeInvalidJoinCode)
	}
	// Only the owner invites.
	_, err = b.svc.Invite(bg, "home", "")
	codeIs(t, err, CodeNotOwner)
	_, err = a.svc.Create(bg, "home", "")
	codeIs(t, err, CodeRoomExists)
	_, err = c.svc.Create(bg, "home", "")
	codeIs(t, err, CodeRoomExists)
}

func TestApprovals(t *testing.T) {
	a, b := twoHosts(t, 500*time.Millisecond)
	bg := ctx(t)
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}, ApproveEach: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B sees the lamp", func() bool { caps, _ := b.svc.Capabilities(bg, "home"); return len(caps) == 1 })
	events, err := a.svc.Subscribe(bg)
	if err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"color":"#000000"}`)
	decide := func(approve bool) error {
		done := make(chan error, 1)
		go func() {
			_, err := b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", args)
			done <- err
		}()
		var pending []Approval
		waitFor(t, "the approval", func() bool { pending, _ = a.svc.Approvals(bg); return len(pending) == 1 })
		if p := pending[0]; p.Caller != b.svc.HostID() || p.Action != "set_color" || string(p.Args) != string(args) || len(p.ArgsDigest) != 64 {
			t.Fatalf("pending %+v", p)
		}
		if err := a.svc.Decide(bg, pending[0].ID, approve); err != nil {
			t.Fatal(err)
		}
		codeIs(t, a.svc.Decide(bg, pending[0].ID, approve), room.CodeUnknownApproval)
		return <-done
	}
	if err := decide(true); err != nil {
		t.Fatalf("approved call: %v", err)
	}
	codeIs(t, decide(false), room.CodeApprovalDenied)
	_, err = b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", args)
	codeIs(t, err, room.CodeApprovalTimeout)
	if n := a.caps.count(); n != 1 {
		t.Fatalf("the lamp ran %d invokes, want 1", n)
	}
	// A's own call skips approval.
	if _, err := a.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", args); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for len(outcomes) < 8 {
		e := <-events
		outcomes = append(outcomes, e.Kind+":"+e.Outcome)
	}
	// The decision and the call it lets run are logged in either order.
	slices.Sort(outcomes)
	want := "approval:approved approval:denied approval:pending approval:pending approval:pending call:approval_denied call:approval_timeout call:ok"
	if got := strings.Join(outcomes, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
}

func TestRestartKeepsRoomsAndPublications(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}}); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(b.dir, room.HostKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	bID := b.svc.HostID()
	b.stop()
	b = startHost(t, a.svc, b.dir, 0)
	if b.svc.HostID() != bID {
		t.Fatal("B's host id changed over a restart")
	}
	if again, _ := os.ReadFile(filepath.Join(b.dir, room.HostKeyFile)); string(again) != string(key) {
		t.Fatal("the host key file changed")
	}
	rooms, err := b.svc.Rooms(bg)
	if err != nil || len(rooms) != 1 || rooms[0].ID != "home" {
		t.Fatalf("rooms after restart: %+v, %v", rooms, err)
	}
	waitFor(t, "B sees the lamp again", func() bool { caps, _ := b.svc.Capabilities(bg, "home"); return len(caps) == 1 })
	if _, err := b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#111111"}`)); err != nil {
		t.Fatal(err)
	}
	// A closes the room: B's calls are refused.
	if err := a.svc.CloseRoom(bg, "home"); err != nil {
		t.Fatal(err)
	}
	_, err = b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#111111"}`))
	if err == nil {
		t.Fatal("invoke after the room closed")
	}
	if rooms, _ := a.st.Rooms(); len(rooms) != 0 {
		t.Fatalf("closed room still stored: %+v", rooms)
	}
}

// The owner's close reaches a member: its room service forgets the room (its list, its
// publications there, stored and projected) and tells RoomClosed, as its own leave would. A
// member that was down when the room closed forgets it at its next start, without
// RoomClosed (the daemon removes what was tied to the room once the service runs).
func TestOwnerCloseDropsMember(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	if _, err := b.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A sees B's lamp", func() bool { caps, _ := a.svc.Capabilities(bg, "home"); return len(caps) == 1 })
	if err := a.svc.CloseRoom(bg, "home"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B to forget the room", func() bool { rooms, _ := b.svc.Rooms(bg); return len(rooms) == 0 })
	waitFor(t, "B's RoomClosed", func() bool { return slices.Equal(b.roomsClosed(), []string{"home"}) })
	if pubs, err := b.st.Publications(); err != nil || len(pubs) != 0 {
		t.Fatalf("B's stored publications after the close: %+v, %v", pubs, err)
	}
	if recs, err := b.st.Rooms(); err != nil || len(recs) != 0 {
		t.Fatalf("B's stored rooms after the close: %+v, %v", recs, err)
	}
	_, err := b.svc.Capabilities(bg, "home")
	codeIs(t, err, CodeUnknownRoom)
	if got := a.roomsClosed(); !slices.Equal(got, []string{"home"}) {
		t.Fatalf("A's RoomClosed told %v", got)
	}

	// Closed while the member was down.
	if _, err := a.svc.Create(bg, "hall", ""); err != nil {
		t.Fatal(err)
	}
	inv, err := a.svc.Invite(bg, "hall", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Join(bg, inv.Code); err != nil {
		t.Fatal(err)
	}
	b.stop()
	if err := a.svc.CloseRoom(bg, "hall"); err != nil {
		t.Fatal(err)
	}
	b = startHost(t, a.svc, b.dir, 0)
	if rooms, err := b.svc.Rooms(bg); err != nil || len(rooms) != 0 {
		t.Fatalf("B's rooms after restarting into a closed room: %+v, %v", rooms, err)
	}
	if recs, err := b.st.Rooms(); err != nil || len(recs) != 0 {
		t.Fatalf("B's stored rooms after restarting into a closed room: %+v, %v", recs, err)
	}
	if got := b.roomsClosed(); len(got) != 0 {
		t.Fatalf("B's RoomClosed told %v at start", got)
	}
}

// A join sent while the bus knows nobody serving the owner's join subject (a host on a leaf
// node that has just connected, before its hub's subscriptions arrive) is sent again until
// the owner answers; an owner that stays away is reported unavailable when the join's
// context ends.
func TestJoinAsksAgainUntilTheOwnerIsServed(t *testing.T) {
	a := startHost(t, nil, "", 0)
	b := startHost(t, a.svc, "", 0)
	bg := ctx(t)
	if _, err := a.svc.Create(bg, "home", ""); err != nil {
		t.Fatal(err)
	}
	inv, err := a.svc.Invite(bg, "home", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.svc.joinSub.Stop(); err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 1)
	b.svc.cfg.noResponders = func() {
		select {
		case asked <- struct{}{}:
		default:
		}
	}

	// Away for the join's whole context.
	short, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	_, err = b.svc.Join(short, inv.Code)
	cancel()
	codeIs(t, err, room.CodeUnavailable)
	<-asked

	joined := make(chan error, 1)
	go func() {
		_, err := b.svc.Join(bg, inv.Code)
		joined <- err
	}()
	select {
	case <-asked: // refused at least once more
	case err := <-joined:
		t.Fatalf("join while nobody serves the owner's subject: %v", err)
	}
	if a.svc.joinSub, err = a.svc.conn.Serve(joinSubject("*", a.svc.HostID()), 4, (*joinHandler)(a.svc)); err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatalf("join once the owner serves its subject: %v", err)
	}
	if r, err := b.svc.Room(bg, "home"); err != nil || len(r.Members) != 2 {
		t.Fatalf("B's room after the join: %+v, %v", r, err)
	}
}

// TestOwnerRemovesMember: the owner takes one member out of a room; the member forgets the
// room as it would a closed one (its publications withdrawn), the room goes on for the rest,
// and a new join code can invite the member again.
func TestOwnerRemovesMember(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	if _, err := b.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A sees B's lamp", func() bool { caps, _ := a.svc.Capabilities(bg, "home"); return len(caps) == 2 })

	_, err := b.svc.RemoveMember(bg, "home", a.svc.HostID())
	codeIs(t, err, CodeNotOwner)
	_, err = a.svc.RemoveMember(bg, "home", a.svc.HostID())
	codeIs(t, err, room.CodeInvalidRequest)
	_, err = a.svc.RemoveMember(bg, "attic", b.svc.HostID())
	codeIs(t, err, CodeUnknownRoom)

	if removed, err := a.svc.RemoveMember(bg, "home", b.svc.HostID()); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	waitFor(t, "B to forget the room", func() bool { rooms, _ := b.svc.Rooms(bg); return len(rooms) == 0 })
	waitFor(t, "B's RoomClosed", func() bool { return slices.Equal(b.roomsClosed(), []string{"home"}) })
	if pubs, err := b.st.Publications(); err != nil || len(pubs) != 0 {
		t.Fatalf("B's stored publications after its removal: %+v, %v", pubs, err)
	}
	d, err := a.svc.Room(bg, "home")
	if err != nil || len(d.Members) != 1 || !d.Members[0].Self {
		t.Fatalf("A's room after the removal: %+v, %v", d, err)
	}
	waitFor(t, "A to stop seeing B's lamp", func() bool {
		caps, _ := a.svc.Capabilities(bg, "home")
		return len(caps) == 1 && caps[0].ProviderSelf
	})
	if recs, err := a.st.Rooms(); err != nil || len(recs) != 1 || len(recs[0].Members) != 1 {
		t.Fatalf("A's stored room after the removal: %+v, %v", recs, err)
	}
	if got := a.roomsClosed(); len(got) != 0 {
		t.Fatalf("A's RoomClosed told %v: the room goes on", got)
	}
	if removed, err := a.svc.RemoveMember(bg, "home", b.svc.HostID()); err != nil || removed {
		t.Fatalf("a second remove: %v %v", removed, err)
	}

	inv, err := a.svc.Invite(bg, "home", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.svc.Join(bg, inv.Code); err != nil || r.Members != 2 {
		t.Fatalf("join again: %+v %v", r, err)
	}
	if _, err := b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "reboot", json.RawMessage(`{}`)); err != nil {
		t.Fatalf("B's call after it joined again: %v", err)
	}
}

// TestMemberLeaveTellsTheOwner: a member that leaves a room (its close) tells the owner, who
// takes it out of the roster; a leave request signed by another host, or replayed outside the
// clock window, is refused.
func TestMemberLeaveTellsTheOwner(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	now := time.Now()
	forged := joinRequest{Room: "home", Host: b.svc.HostID(), Leave: true, Time: now.UnixMilli()}
	forged.Sig = base64.StdEncoding.EncodeToString(a.svc.key.Sign(joinMessage(&forged)))
	if rep := a.svc.admit(bg, joinSubject("home", a.svc.HostID()), marshal(forged), now); rep.Code != room.CodeUnauthorized {
		t.Fatalf("a leave signed by another key: %+v", rep)
	}
	stale := joinRequest{Room: "home", Host: b.svc.HostID(), Leave: true, Time: now.Add(-2 * room.ClockWindow).UnixMilli()}
	stale.Sig = base64.StdEncoding.EncodeToString(b.svc.key.Sign(joinMessage(&stale)))
	if rep := a.svc.admit(bg, joinSubject("home", a.svc.HostID()), marshal(stale), now); rep.Code != room.CodeUnauthorized {
		t.Fatalf("a leave outside the clock window: %+v", rep)
	}
	if d, _ := a.svc.Room(bg, "home"); len(d.Members) != 2 {
		t.Fatalf("a refused leave changed the roster: %+v", d.Members)
	}
	if err := b.svc.CloseRoom(bg, "home"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A to take B out of the roster", func() bool {
		d, err := a.svc.Room(bg, "home")
		return err == nil && len(d.Members) == 1 && d.Members[0].Self
	})
	if recs, err := a.st.Rooms(); err != nil || len(recs) != 1 || len(recs[0].Members) != 1 {
		t.Fatalf("A's stored room after B left: %+v, %v", recs, err)
	}
}

// admissionOf admits through whichever host it is given last: the daemon a host joined by
// --nats-via, across that daemon's restarts.
type admissionOf struct {
	mu sync.Mutex
	h  *host
}

func (v *admissionOf) set(h *host) {
	v.mu.Lock()
	v.h = h
	v.mu.Unlock()
}

func (v *admissionOf) AdmitBusHost(ctx context.Context, req AdmitRequest) (string, error) {
	v.mu.Lock()
	h := v.h
	v.mu.Unlock()
	return h.svc.AdmitBusHost(ctx, req)
}

// TestJoinedHostReconnectsAfterTheBusRestarts: the embedded bus listens, at a restart, on the
// port of its last start, so that a host joined to it (--nats-via), whose connection
// reconnects to the address it was given, is connected again without a restart of its own.
func TestJoinedHostReconnectsAfterTheBusRestarts(t *testing.T) {
	a := startHost(t, nil, "", 0)
	via := &admissionOf{h: a}
	b := startHost(t, via, "", 0)
	url := a.svc.Status().NATSURL
	if data, err := os.ReadFile(filepath.Join(a.dir, BusPortFile)); err != nil || !strings.HasSuffix(url, ":"+strings.TrimSpace(string(data))) {
		t.Fatalf("%s holds %q for %s: %v", BusPortFile, data, url, err)
	}
	a.stop()
	waitFor(t, "B to lose the bus", func() bool { return !b.svc.BusConnected() })
	a = startHost(t, nil, a.dir, 0)
	via.set(a)
	if got := a.svc.Status().NATSURL; got != url {
		t.Fatalf("the bus came back at %s, not %s", got, url)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !b.svc.BusConnected() {
		if time.Now().After(deadline) {
			t.Fatal("B did not connect again to the restarted bus")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A port another process took meanwhile: the bus starts on another one, and says so.
	a.stop()
	l, err := net.Listen("tcp", strings.TrimPrefix(url, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a = startHost(t, nil, a.dir, 0)
	if got := a.svc.Status().NATSURL; got == url {
		t.Fatalf("the bus started on a port another process holds: %s", got)
	}
}
