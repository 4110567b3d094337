package bus_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/room"
)

// lightInvoker is a scripted capability: it counts invokes and answers at once.
type lightInvoker struct {
	mu    sync.Mutex
	calls int
}

func (l *lightInvoker) Observe(context.Context, string) (json.RawMessage, error) {
	return json.RawMessage(`{"on":false,"brightness":42}`), nil
}

func (l *lightInvoker) Invoke(_ context.Context, _, action string, args json.RawMessage) (json.RawMessage, error) {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
	return json.RawMessage(`{"ok":true,"action":"` + action + `"}`), nil
}

func (l *lightInvoker) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// roomHost is one airlockd's room side: an identity, a bus connection, a directory and a sync.
type roomHost struct {
	key  *room.HostKey
	conn *bus.Conn
	dir  *room.Directory
	sync *room.Sync
}

const roomID = "living"

func newRoomHost(t testing.TB, s *bus.Server, owner *room.HostKey, key *room.HostKey) *roomHost {
	t.Helper()
	conn, err := bus.Dial(bus.DialConfig{Server: s, Name: string(key.ID()), InboxPrefix: "_INBOX_" + string(key.ID())[:16]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	dir := room.NewDirectory()
	if err := dir.Trust(roomID, owner.ID()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sy, err := room.OpenSync(ctx, room.SyncConfig{Key: key, Conn: conn, Directory: dir, PresenceTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sy.Close() })
	return &roomHost{key: key, conn: conn, dir: dir, sync: sy}
}

// twoHosts sets up room "living" owned by A with member B, A's light published with
// set_color only, and A's provider serving.
func twoHosts(t testing.TB, s *bus.Server) (a, b *roomHost, inv *lightInvoker, pubs *room.Publications, prov *room.Provider) {
	t.Helper()
	ka, _ := room.GenerateHostKey()
	kb, _ := room.GenerateHostKey()
	a, b = newRoomHost(t, s, ka, ka), newRoomHost(t, s, ka, kb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.sync.PublishRoster(ctx, room.Roster{Room: roomID, Title: "Living room", Owner: ka.ID(), Version: 1,
		Members: []room.Member{{Host: ka.ID(), Name: "A"}, {Host: kb.ID(), Name: "B"}}}); err != nil {
		t.Fatal(err)
	}
	pubs = room.NewPublications()
	pub := room.Publication{Room: roomID, Capability: "living_room_light", Actions: []string{"set_color"}, Observe: true}
	if err := pubs.Publish(pub); err != nil {
		t.Fatal(err)
	}
	if err := a.sync.PublishProjection(ctx, roomID, 1, pubs.InRoom(roomID)); err != nil {
		t.Fatal(err)
	}
	if err := a.sync.Join(ctx, roomID); err != nil {
		t.Fatal(err)
	}
	if err := b.sync.Join(ctx, roomID); err != nil {
		t.Fatal(err)
	}
	inv = &lightInvoker{}
	prov, err := room.NewProvider(room.ProviderConfig{Key: ka, Conn: a.conn, Directory: a.dir, Publications: pubs, Invoker: inv})
	if err != nil {
		t.Fatal(err)
	}
	if err := prov.ServeRoom(roomID); err != nil {
		t.Fatal(err)
	}
	if err := prov.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close() })
	return a, b, inv, pubs, prov
}

func TestRoomCallsBetweenTwoHostsOnOneServer(t *testing.T) {
	s, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	a, b, inv, pubs, prov := twoHosts(t, s)

	// A third connection sees every message on the server, to check where results go.
	snoop, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer snoop.Close()
	var seenMu sync.Mutex
	var seen []string
	snoopSub, err := snoop.Subscribe(">", func(m *nats.Msg) {
		// A result is a reply (no operation field) that carries data.
		if m.Header != nil && m.Header["provider"] != nil && m.Header["operation"] == nil && len(m.Data) > 0 {
			seenMu.Lock()
			seen = append(seen, m.Subject)
			seenMu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := snoop.Flush(); err != nil {
		t.Fatal(err)
	}

	// B learnt the roster and A's projection from the bus, verified.
	if r, ok := b.dir.Roster(roomID); !ok || !r.Has(a.key.ID()) || !r.Has(b.key.ID()) {
		t.Fatalf("B's roster: %+v %v", r, ok)
	}
	projs := b.sync.Projections(roomID)
	if len(projs) != 1 || projs[0].Provider != a.key.ID() || projs[0].Publications[0].Capability != "living_room_light" {
		t.Fatalf("B's projections: %+v", projs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caller := room.NewCaller(b.key, b.conn, b.dir)
	req := room.Request{Room: roomID, Provider: a.key.ID(), Capability: "living_room_light", Operation: room.Invoke,
		Action: "set_color", Args: json.RawMessage(`{"color":"#123456"}`)}
	got, err := caller.Call(ctx, req)
	if err != nil || string(got) != `{"ok":true,"action":"set_color"}` {
		t.Fatalf("invoke: %s %v", got, err)
	}
	obs, err := caller.Call(ctx, room.Request{Room: roomID, Provider: a.key.ID(), Capability: "living_room_light", Operation: room.Observe})
	if err != nil || string(obs) != `{"on":false,"brightness":42}` {
		t.Fatalf("observe: %s %v", obs, err)
	}

	// A retry after a lost reply: the same prepared call, answered from the window.
	prep, err := caller.Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := caller.Send(ctx, prep); err != nil {
			t.Fatal(err)
		}
	}
	if n := inv.count(); n != 2 {
		t.Fatalf("the invoker ran %d times for two calls", n)
	}

	bad := req
	bad.Action = "explode"
	if _, err := caller.Call(ctx, bad); room.CodeOf(err) != room.CodeUnauthorized {
		t.Fatalf("unpublished action: %v", err)
	}
	pubs.Unpublish(roomID, "living_room_light")
	if _, err := caller.Call(ctx, req); room.CodeOf(err) != room.CodeUnauthorized {
		t.Fatalf("after unpublish: %v", err)
	}
	if err := pubs.Publish(room.Publication{Room: roomID, Capability: "living_room_light", Actions: []string{"set_color"}}); err != nil {
		t.Fatal(err)
	}

	// Results travelled only to B's inbox.
	if !waitFor(func() bool { seenMu.Lock(); defer seenMu.Unlock(); return len(seen) >= 5 }) {
		t.Error("the snooper saw fewer results than were sent")
	}
	if err := snoopSub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := snoop.Flush(); err != nil {
		t.Fatal(err)
	}
	seenMu.Lock()
	for _, subj := range seen {
		if !strings.HasPrefix(subj, "_INBOX_"+string(b.key.ID())[:16]) {
			t.Errorf("a result travelled on %s, not B's inbox", subj)
		}
	}
	if len(seen) != 5 {
		t.Errorf("saw %d results, want 5", len(seen))
	}
	seenMu.Unlock()

	// B's departure is seen by A; after B is removed from the roster its calls are refused.
	if !waitFor(func() bool { return a.dir.Present(roomID, b.key.ID()) }) {
		t.Fatal("A never saw B present")
	}
	if err := b.sync.Leave(ctx, roomID); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { return !a.dir.Present(roomID, b.key.ID()) }) {
		t.Fatal("A never saw B leave")
	}
	if err := a.sync.PublishRoster(ctx, room.Roster{Room: roomID, Title: "Living room", Owner: a.key.ID(), Version: 2,
		Members: []room.Member{{Host: a.key.ID()}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := caller.Call(ctx, req); room.CodeOf(err) != room.CodeUnauthorized {
		t.Fatalf("after removal: %v", err)
	}

	// A stopped provider is unavailable at once (no responders), not a timeout.
	if err := prov.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := caller.Call(ctx, req); room.CodeOf(err) != room.CodeUnavailable {
		t.Fatalf("provider stopped: %v", err)
	}
}

// TestRoomKeysTravelAsSignedRecords follows the key records over the bus: a member that
// joins and calls at once is authenticated (its record fetched if the watch is late), a
// record forged for another host is ignored, and a call whose MAC was altered on the wire is
// refused with an unauthorized the caller can verify.
func TestRoomKeysTravelAsSignedRecords(t *testing.T) {
	s, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	a, b, inv, _, _ := twoHosts(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := room.Request{Room: roomID, Provider: a.key.ID(), Capability: "living_room_light", Operation: room.Invoke,
		Action: "set_color", Args: json.RawMessage(`{"color":"#123456"}`)}

	// C is added to the roster, joins and calls at once.
	kc, _ := room.GenerateHostKey()
	if err := a.sync.PublishRoster(ctx, room.Roster{Room: roomID, Title: "Living room", Owner: a.key.ID(), Version: 2,
		Members: []room.Member{{Host: a.key.ID()}, {Host: b.key.ID()}, {Host: kc.ID()}}}); err != nil {
		t.Fatal(err)
	}
	c := newRoomHost(t, s, a.key, kc)
	if err := c.sync.Join(ctx, roomID); err != nil {
		t.Fatal(err)
	}
	if _, err := room.NewCaller(kc, c.conn, c.dir).Call(ctx, req); err != nil {
		t.Fatalf("a member's first call after joining: %v", err)
	}

	// Once A knows B's key (B's call went through), a raw connection overwrites B's record
	// with one signed by C's key: every reader ignores it.
	caller := room.NewCaller(b.key, b.conn, b.dir)
	if _, err := caller.Call(ctx, req); err != nil {
		t.Fatal(err)
	}
	raw, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	js, err := raw.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(room.RoomsBucket)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := room.SignKeyRecord(kc, roomID, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(roomID+".key."+string(b.key.ID()), forged); err != nil {
		t.Fatal(err)
	}
	if _, err := caller.Call(ctx, req); err != nil {
		t.Fatalf("B after a forged key record: %v", err)
	}

	// B's call, captured on the wire and sent again with one bit of its MAC flipped.
	calls := make(chan *nats.Msg, 4)
	sub, err := raw.Subscribe(room.CallSubject(roomID, a.key.ID()), func(m *nats.Msg) {
		select {
		case calls <- m:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := caller.Call(ctx, req); err != nil {
		t.Fatal(err)
	}
	// The copy may still be on its way to the raw connection when B has its reply.
	var captured *nats.Msg
	select {
	case captured = <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the raw connection never saw B's call")
	}
	_ = sub.Unsubscribe()
	mac, err := base64.StdEncoding.DecodeString(captured.Header.Get("mac"))
	if err != nil {
		t.Fatal(err)
	}
	mac[0] ^= 1
	tampered := nats.NewMsg(room.CallSubject(roomID, a.key.ID()))
	tampered.Data = captured.Data
	for k, vs := range captured.Header {
		tampered.Header[k] = vs
	}
	tampered.Header["mac"], tampered.Header["requestId"] = []string{base64.StdEncoding.EncodeToString(mac)}, []string{"forged-1"}
	runs := inv.count()
	reply, err := raw.RequestMsg(tampered, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Header.Get("code") != room.CodeUnauthorized || reply.Header.Get("sig") == "" || reply.Header.Get("mac") != "" || len(reply.Data) != 0 {
		t.Fatalf("reply to a tampered call: %v %q", reply.Header, reply.Data)
	}
	if inv.count() != runs {
		t.Fatal("a tampered call ran")
	}
}

func TestPresenceExpiresWhenAHostStopsRefreshing(t *testing.T) {
	s, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	a, b, _, _, _ := twoHosts(t, s)
	if !waitFor(func() bool { return a.dir.Present(roomID, b.key.ID()) }) {
		t.Fatal("A never saw B present")
	}
	// B's refresher keeps it present past several TTLs…
	time.Sleep(3 * time.Second)
	if !a.dir.Present(roomID, b.key.ID()) {
		t.Fatal("B's presence lapsed while it refreshed")
	}
	// …and when B's connection goes away without leaving, its record expires after the TTL.
	_ = b.conn.Close()
	gone := time.Now()
	if !waitFor(func() bool { return !a.dir.Present(roomID, b.key.ID()) }) {
		t.Fatal("B's presence never ended")
	}
	if time.Since(gone) < time.Second {
		t.Fatalf("B's presence ended %v after its connection, before any TTL could pass", time.Since(gone))
	}
}

// waitFor polls cond for up to 10 s; bus state arrives asynchronously.
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// BenchmarkRoomInvokeVsBareRequest measures, in one run on one embedded server, a room invoke
// from B through the bus to A's provider and a scripted capability and back (authenticated by
// its link MAC, verified, authorized twice, reply authenticated by MAC), against a bare NATS
// request/reply of a payload of the same size to an echo handler. It reports p50 and p99 of each and the ratio of the p50s.
func BenchmarkRoomInvokeVsBareRequest(b *testing.B) {
	s, err := bus.StartServer(bus.ServerConfig{StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	a, hb, _, _, _ := twoHosts(b, s)
	echo, err := a.conn.Serve("bench.echo", 64, echoOK{})
	if err != nil {
		b.Fatal(err)
	}
	defer echo.Stop()
	caller := room.NewCaller(hb.key, hb.conn, hb.dir)
	req := room.Request{Room: roomID, Provider: a.key.ID(), Capability: "living_room_light", Operation: room.Invoke,
		Action: "set_color", Args: json.RawMessage(`{"color":"#123456"}`)}
	// A bare request of about an authenticated call's size: header fields and args.
	payload := make([]byte, 390)

	var bare, rooms []time.Duration
	ctx := context.Background()
	for b.Loop() {
		t0 := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := hb.conn.Request(rctx, "bench.echo", payload); err != nil {
			b.Fatal(err)
		}
		cancel()
		t1 := time.Now()
		if _, err := caller.Call(ctx, req); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		bare, rooms = append(bare, t1.Sub(t0)), append(rooms, t2.Sub(t1))
	}
	bp50, bp99 := percentiles(bare)
	rp50, rp99 := percentiles(rooms)
	b.ReportMetric(float64(bp50.Microseconds()), "bare-p50-µs")
	b.ReportMetric(float64(bp99.Microseconds()), "bare-p99-µs")
	b.ReportMetric(float64(rp50.Microseconds()), "room-p50-µs")
	b.ReportMetric(float64(rp99.Microseconds()), "room-p99-µs")
	b.ReportMetric(float64(rp50)/float64(bp50), "p50-ratio")
}

type echoOK struct{}

func (echoOK) Serve(_ context.Context, _ string, p []byte) []byte { return p[:1] }
func (echoOK) Overloaded(string, []byte) []byte                   { return []byte("busy") }

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

// TestRoomCallStartsWithoutWaiting drives Caller.Start, the path of the owner socket's room
// calls: the call goes out at once and its result (or typed failure) comes to done on the
// bus's reply goroutine; a call that would have to read the bus first is left to Call.
func TestRoomCallStartsWithoutWaiting(t *testing.T) {
	s, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	a, b, _, _, prov := twoHosts(t, s)
	caller := room.NewCaller(b.key, b.conn, b.dir)
	req := room.Request{Room: roomID, Provider: a.key.ID(), Capability: "living_room_light", Operation: room.Invoke,
		Action: "set_color", Args: json.RawMessage(`{"color":"#123456"}`)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Call reads A's key record from the bus if B's watch has not brought it yet.
	if _, err := caller.Call(ctx, req); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		raw json.RawMessage
		err error
	}
	start := func(c *room.Caller, req room.Request) (answer, bool) {
		ch := make(chan answer, 2)
		if !c.Start(ctx, req, time.Now(), func(raw json.RawMessage, err error) { ch <- answer{raw, err} }) {
			return answer{}, false
		}
		got := <-ch
		time.Sleep(10 * time.Millisecond)
		if len(ch) != 0 {
			t.Fatal("done was called twice")
		}
		return got, true
	}
	if got, ok := start(caller, req); !ok || got.err != nil || string(got.raw) != `{"ok":true,"action":"set_color"}` {
		t.Fatalf("Start = %s %v %v", got.raw, got.err, ok)
	}
	bad := req
	bad.Action = "explode"
	if got, ok := start(caller, bad); !ok || room.CodeOf(got.err) != room.CodeUnauthorized {
		t.Fatalf("unpublished action: %v %v", got.err, ok)
	}
	bad = req
	bad.Room = "Bad.Room"
	if got, ok := start(caller, bad); !ok || room.CodeOf(got.err) != room.CodeInvalidRequest {
		t.Fatalf("bad room: %v %v", got.err, ok)
	}
	// A directory that does not know A yet: Start leaves the call to Call.
	if _, ok := start(room.NewCaller(b.key, b.conn, room.NewDirectory()), req); ok {
		t.Fatal("Start sent a call whose provider key it does not hold")
	}
	if err := prov.Close(); err != nil {
		t.Fatal(err)
	}
	if got, ok := start(caller, req); !ok || room.CodeOf(got.err) != room.CodeUnavailable {
		t.Fatalf("provider gone: %v %v", got.err, ok)
	}
}

// A host whose bus is lost stops at once: Sync.Close withdraws no presence from a server that
// is not there (its records expire by their TTL), and neither a withdrawal nor the
// refresher's presence write already sent into the lost connection, each of which would wait
// 5 s for an answer that cannot come, holds it. Whether the connection noticed the loss
// before Close or during it. Before, three rooms kept Close for 5-15 s.
func TestSyncCloseWithItsBusLostDoesNotWait(t *testing.T) {
	for _, noticed := range []bool{false, true} {
		t.Run(fmt.Sprintf("noticed=%v", noticed), func(t *testing.T) {
			s, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			key, _ := room.GenerateHostKey()
			conn, err := bus.Dial(bus.DialConfig{URL: s.ClientURL(), Name: "host"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			dir := room.NewDirectory()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sy, err := room.OpenSync(ctx, room.SyncConfig{Key: key, Conn: conn, Directory: dir, PresenceRefresh: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"one", "two", "three"} {
				if err := dir.Trust(id, key.ID()); err != nil {
					t.Fatal(err)
				}
				if err := sy.PublishRoster(ctx, room.Roster{Room: id, Owner: key.ID(), Version: 1, Members: []room.Member{{Host: key.ID(), Name: "A"}}}); err != nil {
					t.Fatal(err)
				}
				if err := sy.Join(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if noticed {
				select {
				case <-conn.Lost():
				case <-ctx.Done():
					t.Fatal("the connection never saw its server go")
				}
			}
			start := time.Now()
			if err := sy.Close(); err != nil {
				t.Fatalf("Close with the bus lost: %v", err)
			}
			// Each wait it no longer makes is a bus operation's 5 s: far above this bound.
			if d := time.Since(start); d >= 4*time.Second {
				t.Fatalf("Close took %s: it waited for the bus", d)
			}
		})
	}
}
