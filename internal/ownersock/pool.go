package ownersock

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Pool admits the connections of one socket under a total bound and a per-peer share, so that
// one process (a looping or compromised agent harness of the same user) cannot lock the others
// out (issue 16).
//
// A connection is busy while it holds something a client would lose: a request in flight, an
// attached session, a bound grant. Only idle connections are ever evicted. When a connection
// arrives and its peer already holds its share, the peer's own least recently used idle
// connection makes room; when the pool is full, the least recently used idle connection of
// the peer holding the most connections does, but never one of a peer holding fewer than the
// new connection's would. When nothing may make room, the new connection is refused with a
// *CapacityError.
//
// Peers are told apart by the pid that SO_PEERCRED recorded at connect. A process that forks
// to get more pids is not contained by the share, only by the total and by eviction.
//
// A pool may reserve a control band (ReserveControl): a few slots beyond the total, admitted
// only when the total is full of busy connections and the peer is under its share, so that
// however many processes keep every regular connection busy, another can still connect for
// the short operations that see and take back the host. The caller serves only those on a
// band connection (Slot.Control). The band has its own per-peer share, and its idle
// connections make room in it by the same rules; a band connection is never counted in the
// total or the share (issue 24.3).
//
// Pool methods and Slot methods are safe for concurrent use.
type Pool struct {
	name         string // the socket, for logs
	max, perPeer int
	log          *slog.Logger
	clock        atomic.Uint64 // orders uses: a slot's last use is the clock at that moment

	// band and bandPerPeer bound the control band (ReserveControl); zero without one.
	band, bandPerPeer int

	// mu guards the fields below.
	mu    sync.Mutex
	n     int
	peers map[int][]*Slot // the admitted slots, by peer pid
	// nBand and bandPeers are n and peers of the control band.
	nBand     int
	bandPeers map[int][]*Slot
	// Warnings are rate-limited: a flood would otherwise write a log line per connection.
	warnedAt   map[string]time.Time
	suppressed map[string]int
}

// warnEvery bounds the flood warnings of one kind to one per interval; the lines between are
// counted in the next one, and the status counters have every event.
const warnEvery = 10 * time.Second

// Slot is one admitted connection's place in a Pool.
type Slot struct {
	p   *Pool
	pid int
	// state is the number of holds (busy while > 0), or evicted (-1) once the pool chose the
	// slot as the one to go; an evicted slot never becomes busy again.
	state atomic.Int64
	last  atomic.Uint64 // Pool.clock at the last Hold or Unhold, or at admission
	evict func()
	gone  bool // released or evicted; guarded by p.mu
	band  bool // admitted to the control band
}

const evicted = -1

// CapacityError is returned by Admit when no connection can make room.
type CapacityError struct {
	PerPeer bool // the peer holds its share of busy connections; otherwise the pool is full of them
	// Control: the total was full of busy connections, and so was the control band or the
	// peer's share of it (then PerPeer is set too).
	Control bool
	Limit   int // the share or the total (of the band, with Control)
}

func (e *CapacityError) Error() string {
	switch {
	case e.Control && e.PerPeer:
		return fmt.Sprintf("every connection is busy, and the peer process holds %d busy control connections, its share", e.Limit)
	case e.Control:
		return fmt.Sprintf("every connection is busy, and so are the %d control connections", e.Limit)
	case e.PerPeer:
		return fmt.Sprintf("the peer process holds %d busy connections, its share", e.Limit)
	}
	return fmt.Sprintf("%d busy connections are open, the limit", e.Limit)
}

// NewPool returns a pool of at most total connections and perPeer per peer process (at least
// 1, at most total). Warnings about floods go to log, naming the socket.
func NewPool(name string, total, perPeer int, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pool{name: name, max: total, perPeer: min(max(perPeer, 1), total), log: log,
		peers: map[int][]*Slot{}, bandPeers: map[int][]*Slot{}, warnedAt: map[string]time.Time{}, suppressed: map[string]int{}}
}

// ReserveControl gives the pool a control band of n slots beyond its total, perPeer of them
// (at least 1, at most n) per peer process. Call it before the first Admit; n = 0 leaves the
// pool without a band.
func (p *Pool) ReserveControl(n, perPeer int) {
	p.band, p.bandPerPeer = max(n, 0), min(max(perPeer, 1), max(n, 0))
}

// Control returns the size of the control band and its per-peer share.
func (p *Pool) Control() (n, perPeer int) { return p.band, p.bandPerPeer }

// Max returns the pool's total bound.
func (p *Pool) Max() int { return p.max }

// PerPeer returns the pool's per-peer share.
func (p *Pool) PerPeer() int { return p.perPeer }

// Len returns the number of admitted connections, the control band's included.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n + p.nBand
}

// Admit admits a connection of peer pid, evicting an idle one if it must; evict is how the
// pool closes this connection should it be chosen later. The evicted connection's evict runs
// before Admit returns, on the caller's goroutine, so it must not block. The result reports
// whether a connection was evicted for this one. An error is a *CapacityError.
//
// When the total is full of busy connections and the peer is under its share, the connection
// goes to the control band (s.Control() is true), if the pool has one and it has room or an
// idle band connection to evict (its own first, at its band share).
func (p *Pool) Admit(pid int, evict func()) (s *Slot, evictedOne bool, err error) {
	p.mu.Lock()
	var victim *Slot
	band := false
	switch {
	case len(p.peers[pid]) >= p.perPeer:
		if victim = p.evictLocked(p.peers[pid]); victim == nil {
			p.mu.Unlock()
			return nil, false, &CapacityError{PerPeer: true, Limit: p.perPeer}
		}
	case p.n >= p.max:
		if victim = p.evictFromLargestLocked(p.peers, pid); victim != nil {
			break
		}
		if p.band == 0 {
			p.mu.Unlock()
			return nil, false, &CapacityError{Limit: p.max}
		}
		band = true
		switch {
		case len(p.bandPeers[pid]) >= p.bandPerPeer:
			if victim = p.evictLocked(p.bandPeers[pid]); victim == nil {
				p.mu.Unlock()
				return nil, false, &CapacityError{Control: true, PerPeer: true, Limit: p.bandPerPeer}
			}
		case p.nBand >= p.band:
			if victim = p.evictFromLargestLocked(p.bandPeers, pid); victim == nil {
				p.mu.Unlock()
				return nil, false, &CapacityError{Control: true, Limit: p.band}
			}
		}
	}
	s = &Slot{p: p, pid: pid, evict: evict, band: band}
	s.last.Store(p.clock.Add(1))
	if band {
		p.bandPeers[pid] = append(p.bandPeers[pid], s)
		p.nBand++
	} else {
		p.peers[pid] = append(p.peers[pid], s)
		p.n++
	}
	p.mu.Unlock()
	if victim != nil {
		victim.evict()
	}
	return s, victim != nil, nil
}

// evictLocked marks the least recently used idle slot of slots evicted, removes it and
// returns it, or nil when every slot is busy.
func (p *Pool) evictLocked(slots []*Slot) *Slot {
	for {
		var lru *Slot
		for _, s := range slots {
			if s.state.Load() == 0 && (lru == nil || s.last.Load() < lru.last.Load()) {
				lru = s
			}
		}
		if lru == nil {
			return nil
		}
		// The slot may have become busy since it was looked at; then look again.
		if lru.state.CompareAndSwap(0, evicted) {
			p.removeLocked(lru)
			return lru
		}
	}
}

// evictFromLargestLocked evicts, for a new connection of peer pid, the least recently used
// idle slot of the peers with the most connections in peers (the regular ones or the band's),
// going to smaller peers only when those are all busy. It counts pid with its new connection
// and takes pid's own idle slot on a tie, and it never takes the slot of a peer holding fewer
// than pid would: a peer that holds the most makes room out of its own connections, or finds
// none (issue 24.3: eight processes whose connections were all busy but for a new one each
// evicted the single new connection of every other client).
func (p *Pool) evictFromLargestLocked(peers map[int][]*Slot, pid int) *Slot {
	mine := len(peers[pid]) + 1
	for {
		var best *Slot
		bestN, bestMine := 0, false
		for peer, slots := range peers {
			n, own := len(slots), peer == pid
			if own {
				n = mine
			} else if n < mine {
				continue
			}
			for _, s := range slots {
				if s.state.Load() != 0 {
					continue
				}
				if best == nil || n > bestN || n == bestN && (own && !bestMine || own == bestMine && s.last.Load() < best.last.Load()) {
					best, bestN, bestMine = s, n, own
				}
			}
		}
		if best == nil {
			return nil
		}
		if best.state.CompareAndSwap(0, evicted) {
			p.removeLocked(best)
			return best
		}
	}
}

func (p *Pool) removeLocked(s *Slot) {
	if s.gone {
		return
	}
	s.gone = true
	peers := p.peers
	if s.band {
		peers = p.bandPeers
		p.nBand--
	} else {
		p.n--
	}
	slots := peers[s.pid]
	for i, x := range slots {
		if x == s {
			slots = append(slots[:i], slots[i+1:]...)
			break
		}
	}
	if len(slots) == 0 {
		delete(peers, s.pid)
	} else {
		peers[s.pid] = slots
	}
}

// Warn logs a flood event of kind (an eviction, a refusal, a timeout) for peer pid, at most
// once per warnEvery per kind; the line counts the events it stands for.
func (p *Pool) Warn(kind string, pid int, msg string) {
	now := time.Now()
	p.mu.Lock()
	p.suppressed[kind]++
	if now.Sub(p.warnedAt[kind]) < warnEvery {
		p.mu.Unlock()
		return
	}
	n := p.suppressed[kind]
	p.suppressed[kind] = 0
	p.warnedAt[kind] = now
	p.mu.Unlock()
	p.log.Warn(msg, "socket", p.name, "event", kind, "peerPid", pid, "events", n, "per", warnEvery)
}

// PID returns the peer process of the slot.
func (s *Slot) PID() int { return s.pid }

// Control reports whether the slot is in the control band: its connection may run only the
// short control operations the band is for.
func (s *Slot) Control() bool { return s.band }

// Hold marks the connection busy (a request in flight, an attachment) until a matching Unhold.
// It reports false when the pool already evicted the connection: it is being closed, and the
// caller must not start what it was about to.
func (s *Slot) Hold() bool {
	for {
		n := s.state.Load()
		if n == evicted {
			return false
		}
		if s.state.CompareAndSwap(n, n+1) {
			s.last.Store(s.p.clock.Add(1))
			return true
		}
	}
}

// Unhold ends one Hold.
func (s *Slot) Unhold() {
	for {
		n := s.state.Load()
		if n <= 0 {
			return
		}
		if s.state.CompareAndSwap(n, n-1) {
			s.last.Store(s.p.clock.Add(1))
			return
		}
	}
}

// Evicted reports whether the pool chose this connection to make room for another.
func (s *Slot) Evicted() bool { return s.state.Load() == evicted }

// Close gives the slot back when its connection ends. It is idempotent.
func (s *Slot) Close() {
	s.p.mu.Lock()
	s.p.removeLocked(s)
	s.p.mu.Unlock()
}
