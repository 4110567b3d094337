package ownersock

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

// admit admits a connection of pid that records its eviction in evicted.
func admit(t *testing.T, p *Pool, pid int, name string, evicted *[]string) *Slot {
	t.Helper()
	s, _, err := p.Admit(pid, func() { *evicted = append(*evicted, name) })
	if err != nil {
		t.Fatalf("admit %s: %v", name, err)
	}
	return s
}

func TestPoolPeerShareEvictsThePeersOwnIdleConnection(t *testing.T) {
	var evicted []string
	p := NewPool("test", 10, 2, nil)
	a1 := admit(t, p, 1, "a1", &evicted)
	a2 := admit(t, p, 1, "a2", &evicted)
	b1 := admit(t, p, 2, "b1", &evicted)
	a1.Hold()
	a1.Unhold() // a1 is now more recently used than a2
	admit(t, p, 1, "a3", &evicted)
	if len(evicted) != 1 || evicted[0] != "a2" || !a2.Evicted() {
		t.Fatalf("evicted %v, want the least recently used idle connection of the same peer, a2", evicted)
	}
	if a2.Hold() {
		t.Fatal("an evicted slot became busy")
	}
	if b1.Evicted() || p.Len() != 3 {
		t.Fatalf("another peer's connection was evicted, or the count is off: len %d", p.Len())
	}
}

func TestPoolNeverEvictsABusyConnection(t *testing.T) {
	var evicted []string
	p := NewPool("test", 10, 2, nil)
	a1 := admit(t, p, 1, "a1", &evicted)
	a2 := admit(t, p, 1, "a2", &evicted)
	a1.Hold() // an attachment
	a2.Hold() // a request in flight
	_, _, err := p.Admit(1, func() {})
	var ce *CapacityError
	if !errors.As(err, &ce) || !ce.PerPeer || ce.Limit != 2 {
		t.Fatalf("third connection of a peer with two busy ones: %v, want a per-peer CapacityError", err)
	}
	a2.Unhold()
	admit(t, p, 1, "a3", &evicted)
	if len(evicted) != 1 || evicted[0] != "a2" {
		t.Fatalf("evicted %v, want a2 once its request ended", evicted)
	}
	// Holds nest: two holds need two unholds.
	a1.Hold()
	a1.Unhold()
	admit(t, p, 1, "a4", &evicted)
	if len(evicted) != 2 || evicted[1] != "a3" {
		t.Fatalf("evicted %v, want a3: a1 still holds its attachment", evicted)
	}
}

// TestPoolFullNeverEvictsASmallerPeer pins issue 24.3's rule: a peer whose connections are
// busy does not make room out of a smaller peer's single idle connection; it makes room out
// of its own, or out of a peer holding as many as it would.
func TestPoolFullNeverEvictsASmallerPeer(t *testing.T) {
	var evicted []string
	p := NewPool("test", 4, 4, nil)
	for _, n := range []string{"a1", "a2", "a3"} {
		admit(t, p, 1, n, &evicted).Hold()
	}
	b1 := admit(t, p, 2, "b1", &evicted) // a client that just connected: idle
	_, _, err := p.Admit(1, func() {})
	var ce *CapacityError
	if !errors.As(err, &ce) || ce.PerPeer || ce.Limit != 4 || b1.Evicted() {
		t.Fatalf("admit of the largest, busy peer: %v (b1 evicted %v), want a total CapacityError", err, b1.Evicted())
	}
	// The same peer with an idle connection of its own makes room out of it.
	p.peers[1][0].Unhold()
	admit(t, p, 1, "a4", &evicted)
	if len(evicted) != 1 || evicted[0] != "a1" || b1.Evicted() {
		t.Fatalf("evicted %v, want a1, the peer's own", evicted)
	}
	// A smaller peer still makes room out of the largest.
	for _, s := range p.peers[1] {
		s.Unhold()
		s.Hold()
	}
	p.peers[1][1].Unhold()
	admit(t, p, 3, "c1", &evicted)
	if len(evicted) != 2 || evicted[1] != "a3" {
		t.Fatalf("evicted %v, want a3", evicted)
	}
}

// TestPoolControlBand pins the reserved control band (issue 24.3): admitted only when the
// total is full of busy connections and the peer is under its share, bounded with its own
// per-peer share, its idle connections making room in it, never counted in the total.
func TestPoolControlBand(t *testing.T) {
	var evicted []string
	p := NewPool("test", 2, 2, nil)
	p.ReserveControl(3, 2)
	a1 := admit(t, p, 1, "a1", &evicted)
	b1 := admit(t, p, 2, "b1", &evicted)
	// With an idle regular connection, a new one takes its place: no band.
	if c := admit(t, p, 3, "c1", &evicted); c.Control() || len(evicted) != 1 || evicted[0] != "a1" {
		t.Fatalf("control %v, evicted %v: want a regular slot in place of a1", c.Control(), evicted)
	}
	a1.Close()
	b1.Hold()
	for _, s := range p.peers[3] {
		s.Hold()
	}
	// Every regular connection busy: the band.
	d1 := admit(t, p, 4, "d1", &evicted)
	d2 := admit(t, p, 4, "d2", &evicted)
	if !d1.Control() || !d2.Control() || p.Len() != 4 {
		t.Fatalf("control %v %v, len %d: want two band connections beyond the total", d1.Control(), d2.Control(), p.Len())
	}
	// At its band share, the peer's own idle band connection makes room, not another's.
	e1 := admit(t, p, 5, "e1", &evicted)
	d1.Hold()
	d2.Unhold()
	admit(t, p, 4, "d3", &evicted)
	if len(evicted) != 2 || evicted[1] != "d2" || e1.Evicted() {
		t.Fatalf("evicted %v, want d2, the peer's idle band connection", evicted)
	}
	// The band full: an idle band connection of the largest band holder makes room.
	admit(t, p, 6, "f1", &evicted)
	if len(evicted) != 3 || evicted[2] != "d3" {
		t.Fatalf("evicted %v, want d3 (peer 4 holds the most band connections, d1 is busy)", evicted)
	}
	// Busy band connections are never evicted.
	for _, slots := range p.bandPeers {
		for _, s := range slots {
			s.Hold()
		}
	}
	_, _, err := p.Admit(7, func() {})
	var ce *CapacityError
	if !errors.As(err, &ce) || !ce.Control || ce.PerPeer || ce.Limit != 3 {
		t.Fatalf("admit with the band busy: %v, want a band CapacityError", err)
	}
	e1.Close()
	admit(t, p, 4, "d4", &evicted).Hold()
	_, _, err = p.Admit(4, func() {})
	if !errors.As(err, &ce) || !ce.Control || !ce.PerPeer || ce.Limit != 2 {
		t.Fatalf("admit of a peer at its busy band share: %v, want a per-peer band CapacityError", err)
	}
	// A peer at its regular share is not let into the band.
	q := NewPool("test", 2, 1, nil)
	q.ReserveControl(3, 2)
	admit(t, q, 1, "x1", &evicted).Hold()
	_, _, err = q.Admit(1, func() {})
	if !errors.As(err, &ce) || ce.Control || !ce.PerPeer {
		t.Fatalf("admit of a peer at its share: %v, want a per-peer CapacityError outside the band", err)
	}
	// Closing a band slot gives its place back.
	d1.Close()
	if p.Len() != 4 {
		t.Fatalf("len %d after closing a band slot, want 4", p.Len())
	}
}

func TestPoolFullEvictsFromTheLargestPeer(t *testing.T) {
	var evicted []string
	p := NewPool("test", 5, 3, nil)
	b1 := admit(t, p, 2, "b1", &evicted) // the oldest connection of all, but of the small peer
	admit(t, p, 1, "a1", &evicted)
	admit(t, p, 1, "a2", &evicted)
	admit(t, p, 1, "a3", &evicted)
	admit(t, p, 3, "c1", &evicted)
	admit(t, p, 4, "d1", &evicted)
	if len(evicted) != 1 || evicted[0] != "a1" || b1.Evicted() {
		t.Fatalf("evicted %v, want the largest peer's least recently used connection a1", evicted)
	}
	// When the largest peer is all busy, the next largest with an idle connection gives way.
	for _, s := range p.peers[1] {
		s.Hold()
	}
	admit(t, p, 5, "e1", &evicted)
	if len(evicted) != 2 || evicted[1] != "b1" {
		t.Fatalf("evicted %v, want b1 (the largest peers are busy, b1 is the least recently used)", evicted)
	}
	for _, slots := range p.peers {
		for _, s := range slots {
			s.Hold()
		}
	}
	_, _, err := p.Admit(6, func() {})
	var ce *CapacityError
	if !errors.As(err, &ce) || ce.PerPeer || ce.Limit != 5 {
		t.Fatalf("admit into a pool of busy connections: %v, want a total CapacityError", err)
	}
}

func TestPoolCloseIsIdempotentAndFreesTheSlot(t *testing.T) {
	p := NewPool("test", 1, 1, nil)
	s, _, err := p.Admit(1, func() { t.Fatal("evicted a closed slot") })
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if p.Len() != 0 {
		t.Fatalf("len %d after close", p.Len())
	}
	if _, ev, err := p.Admit(1, func() {}); err != nil || ev {
		t.Fatalf("admit after close: evicted %v, %v", ev, err)
	}
	if p.PerPeer() != 1 || NewPool("x", 4, 9, nil).PerPeer() != 4 || NewPool("x", 4, 0, nil).PerPeer() != 1 {
		t.Fatal("the share is not clamped to [1, total]")
	}
}

// pipe returns a LineDeadline on one end of a net.Pipe and the other end.
func pipe(t *testing.T, first, line time.Duration) (*LineDeadline, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return NewLineDeadline(a, first, line), b
}

func readErr(d *LineDeadline) error {
	buf := make([]byte, 64)
	for {
		if _, err := d.Read(buf); err != nil {
			return err
		}
	}
}

func TestLineDeadlineFirstLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, peer := pipe(t, 2*time.Second, 5*time.Second)
		start := time.Now()
		go peer.Write([]byte("par")) // a partial first line, then silence
		err := readErr(d)
		var le *LineTimeoutError
		if !errors.As(err, &le) || !le.FirstLine || le.Limit != 2*time.Second || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("err %v, want a first-line timeout", err)
		}
		if got := time.Since(start); got != 2*time.Second {
			t.Fatalf("closed after %v, want the first-line deadline of 2s", got)
		}
	})
}

func TestLineDeadlineStalledLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, peer := pipe(t, 2*time.Second, 3*time.Second)
		buf := make([]byte, 64)
		go peer.Write([]byte("first\n"))
		if n, err := d.Read(buf); err != nil || string(buf[:n]) != "first\n" {
			t.Fatalf("read %q %v", buf[:n], err)
		}
		d.FirstLineDone()
		// Between lines there is no deadline: an hour of silence is fine.
		time.Sleep(time.Hour)
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			// One byte a second never completes the line within 3 s.
			for _, c := range []byte("slowly") {
				if _, err := peer.Write([]byte{c}); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}()
		err := readErr(d)
		var le *LineTimeoutError
		if !errors.As(err, &le) || le.FirstLine || le.Limit != 3*time.Second {
			t.Fatalf("err %v, want a line timeout", err)
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Fatalf("closed after %v, want 3s after the line's first byte", got)
		}
		peer.Close()
		<-done
	})
}

func TestLineDeadlineWholeLinesAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, peer := pipe(t, 2*time.Second, 3*time.Second)
		buf := make([]byte, 64)
		go func() {
			for range 5 {
				time.Sleep(time.Second) // each line comes within the first-line deadline
				peer.Write([]byte("line\n"))
			}
		}()
		for range 5 {
			if _, err := d.Read(buf); err != nil {
				t.Fatal(err)
			}
			d.Restart() // one request per line, each within 2 s of the last answer
		}
		start := time.Now()
		err := readErr(d)
		var le *LineTimeoutError
		if !errors.As(err, &le) || !le.FirstLine || time.Since(start) != 2*time.Second {
			t.Fatalf("err %v after %v, want the restarted first-line deadline", err, time.Since(start))
		}
	})
}

func TestLineDeadlineStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := pipe(t, time.Hour, time.Hour)
		go func() {
			time.Sleep(time.Second)
			d.Stop()
		}()
		err := readErr(d)
		var le *LineTimeoutError
		if errors.As(err, &le) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("err %v, want the plain deadline error of a stop", err)
		}
		// A read after Stop fails at once, even when it would arm a deadline.
		if _, err := d.Read(make([]byte, 1)); err == nil || err == io.EOF {
			t.Fatalf("read after stop: %v", err)
		}
	})
}

// TestAcceptRetry: the pause after failed accepts starts at 5 ms, doubles at each failure in
// a row, and stays at 1 s.
func TestAcceptRetry(t *testing.T) {
	var got []time.Duration
	var p time.Duration
	for range 10 {
		p = AcceptRetry(p)
		got = append(got, p)
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("pauses %v", got)
		}
	}
}
