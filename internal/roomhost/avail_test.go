package roomhost

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// cutProxy carries a host's TCP connection to the bus, so that a test can take the bus away
// from that host alone: cut closes the connections it carries and every new one at once,
// until restore; stall holds every byte in both directions, with the connections open, until
// it is lifted (a server that stopped answering). The server and the other hosts stay up.
type cutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex // guards the fields below
	cut     bool
	stalled bool
	closed  bool
	conns   map[net.Conn]struct{}
	flow    *sync.Cond // on mu: broadcast when cut, stalled or closed change

	wg sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.flow = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// url is the proxy's NATS URL.
func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

// pipe copies src to dst, holding what it read while the proxy is stalled, until either ends.
func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.flowing() {
			_, err = dst.Write(buf[:n])
		} else if n > 0 {
			break
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// flowing waits while the proxy is stalled and reports whether bytes may pass: false once it
// is cut or closed.
func (p *cutProxy) flowing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.stalled && !p.cut && !p.closed {
		p.flow.Wait()
	}
	return !p.cut && !p.closed
}

// setStalled stalls (true) or lifts the stall of (false) the host's bus.
func (p *cutProxy) setStalled(stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = stalled
	p.flow.Broadcast()
}

// setCut cuts (true) or restores (false) the host's bus.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	p.flow.Broadcast()
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

func (p *cutProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.flow.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.setCut(true)
	p.wg.Wait()
}

// startProxiedHost starts a host on A's bus through a new cutProxy; refresh, when set,
// replaces its presence refresh.
func startProxiedHost(t *testing.T, a *host, refresh time.Duration) (*host, *cutProxy) {
	t.Helper()
	target := a.svc.Status().NATSURL[len("nats://"):]
	p := newCutProxy(t, target)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &host{st: st, dir: dir, caps: &lamp{}}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h.svc, err = Start(c, Config{StateDir: dir, Store: st, Capabilities: h.caps, Via: a.svc, viaURL: p.url(),
		PresenceTTL: 3 * time.Second, presenceRefresh: refresh})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(h.stop)
	return h, p
}

// joinHome has h join A's room home.
func joinHome(t *testing.T, a, h *host) {
	t.Helper()
	inv, err := a.svc.Invite(ctx(t), "home", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Join(ctx(t), inv.Code); err != nil {
		t.Fatal(err)
	}
}

// within polls cond every 10 ms until it holds, failing the test after d.
func within(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// capOf returns the capability id of provider in h's listing of home.
func capOf(t *testing.T, h *host, provider room.HostID, id string) (Capability, bool) {
	t.Helper()
	caps, err := h.svc.Capabilities(ctx(t), "home")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps {
		if c.Provider == provider && c.CapabilityID == id {
			return c, true
		}
	}
	return Capability{}, false
}

func present(t *testing.T, h *host, member room.HostID) bool {
	t.Helper()
	d, err := h.svc.Room(ctx(t), "home")
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(d.Members, func(m Member) bool { return m.HostID == member && m.Present })
}

// A provider that loses the bus is listed unavailable (provider_absent) once its presence
// expires, within the presence TTL (3 s here, 10 s by default: the call deadline), and
// available again once it is back and has announced itself; a call to it meanwhile fails
// unavailable. Its own listing says bus_disconnected for A's capability.
func TestAvailabilityProviderAbsent(t *testing.T) {
	a := startHost(t, nil, "", 0)
	if _, err := a.svc.Create(ctx(t), "home", ""); err != nil {
		t.Fatal(err)
	}
	c, proxy := startProxiedHost(t, a, 0)
	joinHome(t, a, c)
	bg := ctx(t)
	if _, err := c.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	cID := c.svc.HostID()
	within(t, 10*time.Second, "A lists C's lamp available", func() bool {
		cap, ok := capOf(t, a, cID, "lamp")
		return ok && cap.Available && cap.UnavailableReason == "" && cap.Title == "Lamp"
	})
	if own, ok := capOf(t, a, a.svc.HostID(), "lamp"); !ok || !own.Available || !own.ProviderSelf {
		t.Fatalf("A's own lamp: %+v", own)
	}
	within(t, 10*time.Second, "C lists A's lamp available", func() bool {
		cap, ok := capOf(t, c, a.svc.HostID(), "lamp")
		return ok && cap.Available && cap.Title == "Lamp"
	})

	proxy.setCut(true)
	took := within(t, 3*time.Second+2*time.Second, "A lists C's lamp provider_absent", func() bool {
		cap, ok := capOf(t, a, cID, "lamp")
		return ok && !cap.Available && cap.UnavailableReason == ReasonProviderAbsent
	})
	t.Logf("C absent at A %v after the cut", took)
	within(t, 10*time.Second, "C lists A's lamp bus_disconnected", func() bool {
		cap, ok := capOf(t, c, a.svc.HostID(), "lamp")
		// Described from the catalog its watch delivered before the cut.
		return ok && !cap.Available && cap.UnavailableReason == ReasonBusDisconnected && cap.Title == "Lamp"
	})
	_, err := a.svc.Observe(bg, "home", string(cID), "lamp")
	codeIs(t, err, room.CodeUnavailable)
	if own, _ := capOf(t, a, a.svc.HostID(), "lamp"); !own.Available {
		t.Fatalf("A's own lamp while C is away: %+v", own)
	}

	proxy.setCut(false)
	took = within(t, 10*time.Second, "A lists C's lamp available again", func() bool {
		cap, ok := capOf(t, a, cID, "lamp")
		return ok && cap.Available
	})
	t.Logf("C available at A %v after the restore", took)
	if _, err := a.svc.Observe(bg, "home", string(cID), "lamp"); err != nil {
		t.Fatalf("observe C's lamp after its return: %v", err)
	}

	// This host's own capability is available while its adapter is ready and its last
	// calls did not all end unavailable; either reason shows, and neither refuses a call.
	for _, why := range []string{ReasonAdapterNotReady, ReasonCallsUnavailable} {
		a.caps.mu.Lock()
		a.caps.unavailable = why
		a.caps.mu.Unlock()
		if own, _ := capOf(t, a, a.svc.HostID(), "lamp"); own.Available || own.UnavailableReason != why {
			t.Fatalf("A's own lamp shown unavailable for %s: %+v", why, own)
		}
		if _, err := a.svc.Observe(bg, "home", string(a.svc.HostID()), "lamp"); err != nil {
			t.Fatalf("observe of A's own lamp shown %s: %v", why, err)
		}
	}
	a.caps.mu.Lock()
	a.caps.unavailable = ""
	a.caps.mu.Unlock()
	if own, _ := capOf(t, a, a.svc.HostID(), "lamp"); !own.Available || own.UnavailableReason != "" {
		t.Fatalf("A's own lamp available again: %+v", own)
	}

	// A provider that left is absent at once, without waiting for the TTL.
	c.stop()
	within(t, 2*time.Second, "A lists C's lamp provider_absent after C left", func() bool {
		cap, ok := capOf(t, a, cID, "lamp")
		return !ok || (!cap.Available && cap.UnavailableReason == ReasonProviderAbsent)
	})
}

// A host that loses the bus lists every remote capability unavailable (bus_disconnected)
// within the call deadline, and describes them from the catalogs its watch delivered. When the
// bus returns it rewrites its presence at once — B's refresh here is a minute, so only the
// reconnect can announce it — and its restarted watches bring what changed while it was
// away.
func TestAvailabilityBusDisconnected(t *testing.T) {
	a := startHost(t, nil, "", 0)
	if _, err := a.svc.Create(ctx(t), "home", ""); err != nil {
		t.Fatal(err)
	}
	b, proxy := startProxiedHost(t, a, time.Minute)
	joinHome(t, a, b)
	bg := ctx(t)
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}}); err != nil {
		t.Fatal(err)
	}
	aID, bID := a.svc.HostID(), b.svc.HostID()
	within(t, 10*time.Second, "B lists A's lamp available", func() bool {
		cap, ok := capOf(t, b, aID, "lamp")
		return ok && cap.Available && len(cap.Actions) == 1
	})
	// B's presence, written when it joined and not refreshed for a minute, expires.
	within(t, 10*time.Second, "B's presence to expire at A", func() bool { return !present(t, a, bID) })

	proxy.setCut(true)
	took := within(t, 10*time.Second, "B lists A's lamp bus_disconnected", func() bool {
		cap, ok := capOf(t, b, aID, "lamp")
		return ok && !cap.Available && cap.UnavailableReason == ReasonBusDisconnected && cap.Title == "Lamp" &&
			len(cap.Actions) == 1
	})
	t.Logf("B lists bus_disconnected %v after the cut", took)
	// A listing while the bus is away answers at once, from what B's watches delivered.
	start := time.Now()
	if _, err := b.svc.Room(bg, "home"); err != nil || time.Since(start) > 2*time.Second {
		t.Fatalf("Room while the bus is away: %v after %v", err, time.Since(start))
	}
	// Changed while B is away: A publishes all of the lamp's actions. The outage outlasts
	// the server's inactivity threshold of B's watch consumers (5 s), so they are gone when
	// B returns and only restarted watches bring the change.
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	if cap, _ := capOf(t, b, aID, "lamp"); cap.Available {
		t.Fatalf("B lists A's lamp available while its bus is cut: %+v", cap)
	}

	proxy.setCut(false)
	took = within(t, 10*time.Second, "B's presence rewritten at A after the reconnect", func() bool { return present(t, a, bID) })
	t.Logf("B present at A %v after the restore", took)
	took = within(t, 10*time.Second, "B lists A's lamp available with the actions published meanwhile", func() bool {
		cap, ok := capOf(t, b, aID, "lamp")
		return ok && cap.Available && cap.Observe && len(cap.Actions) == 2
	})
	t.Logf("B lists A's lamp available %v after that", took)
	res, err := b.svc.Invoke(bg, "home", string(aID), "lamp", "reboot", json.RawMessage(`{}`))
	if err != nil || string(res) != `{"done":"reboot"}` {
		t.Fatalf("invoke after the reconnect = %s, %v", res, err)
	}
}

// Another provider's catalog reaches a listing through the sync's watch: published, changed
// and deleted by the provider, each shows in B's listing, a deletion leaving the capability
// by id alone. A listing reads no bus: it answers at once while B's connection is stalled
// (up, but carrying nothing, as to a server that died) and while it is cut, and describes the
// capability from the catalog last delivered. A room B left keeps no catalog.
func TestCatalogsFollowTheWatch(t *testing.T) {
	a := startHost(t, nil, "", 0)
	if _, err := a.svc.Create(ctx(t), "home", ""); err != nil {
		t.Fatal(err)
	}
	b, proxy := startProxiedHost(t, a, 0)
	joinHome(t, a, b)
	bg := ctx(t)
	aID := a.svc.HostID()
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}}); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "B lists A's lamp described", func() bool {
		cap, ok := capOf(t, b, aID, "lamp")
		return ok && cap.Title == "Lamp" && len(cap.Actions) == 1 && !cap.Observe
	})
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "B lists A's lamp with its changed catalog", func() bool {
		cap, ok := capOf(t, b, aID, "lamp")
		return ok && cap.Title == "Lamp" && len(cap.Actions) == 2 && cap.Observe
	})

	// Deleted: the projection still lists the lamp, which shows by id alone.
	cats, err := a.svc.conn.Bucket(bg, busport.BucketConfig{Name: room.CatalogBucket, MaxValueBytes: room.MaxRecordBytes})
	if err != nil {
		t.Fatal(err)
	}
	if err := cats.Delete(bg, "home."+string(aID)); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "B lists A's lamp by id alone", func() bool {
		cap, ok := capOf(t, b, aID, "lamp")
		return ok && cap.Title == "" && len(cap.Actions) == 0 && !cap.Observe
	})
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Observe: true}); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "B lists A's lamp described again", func() bool {
		cap, ok := capOf(t, b, aID, "lamp")
		return ok && cap.Title == "Lamp" && len(cap.Actions) == 2
	})

	// Stalled, B's connection counts as up: the lamp stays available, and described.
	proxy.setStalled(true)
	start := time.Now()
	cap, ok := capOf(t, b, aID, "lamp")
	if took := time.Since(start); !ok || !cap.Available || cap.Title != "Lamp" || took > 500*time.Millisecond {
		t.Fatalf("B's listing while its bus is stalled: %+v, %v after %v", cap, ok, took)
	}
	proxy.setStalled(false)
	proxy.setCut(true)
	within(t, 10*time.Second, "B lists A's lamp bus_disconnected", func() bool {
		start := time.Now()
		cap, ok := capOf(t, b, aID, "lamp")
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Fatalf("B's listing while its bus is cut took %v", took)
		}
		return ok && !cap.Available && cap.UnavailableReason == ReasonBusDisconnected && cap.Title == "Lamp"
	})
	proxy.setCut(false)
	within(t, 10*time.Second, "B lists A's lamp available after the restore", func() bool {
		cap, ok := capOf(t, b, aID, "lamp")
		return ok && cap.Available && cap.Title == "Lamp"
	})

	if err := b.svc.CloseRoom(bg, "home"); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.svc.sync.Catalog("home", aID); ok {
		t.Fatal("B keeps A's catalog of a room it left")
	}
}
