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
// the peer holding the most connections does. When nothing is idle, the new connection is
// refused with a *CapacityError.
//
// Peers are told apart by the pid that SO_PEERCRED recorded at connect. A process that forks
// to get more pids is not contained by the share, only by the total and by eviction.
//
// Pool methods and Slot methods are safe for concurrent use.
type Pool struct {
	name         string // the socket, for logs
	max, perPeer int
	log          *slog.Logger
	clock        atomic.Uint64 // orders uses: a slot's last use is the clock at that moment

	// mu guards the fields below.
	mu    sync.Mutex
	n     int
	peers map[int][]*Slot // the admitted slots, by peer pid
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
}

const evicted = -1

// CapacityError is returned by Admit when no connection can make room.
type CapacityError struct {
	PerPeer bool // the peer holds its share of busy connections; otherwise the pool is full of them
	Limit   int  // the share or the total
}

func (e *CapacityError) Error() string {
	if e.PerPeer {
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
		peers: map[int][]*Slot{}, warnedAt: map[string]time.Time{}, suppressed: map[string]int{}}
}

// Max returns the pool's total bound.
func (p *Pool) Max() int { return p.max }

// PerPeer returns the pool's per-peer share.
func (p *Pool) PerPeer() int { return p.perPeer }

// Len returns the number of admitted connections.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// Admit admits a connection of peer pid, evicting an idle one if it must; evict is how the
// pool closes this connection should it be chosen later. The evicted connection's evict runs
// before Admit returns, on the caller's goroutine, so it must not block. The result reports
// whether a connection was evicted for this one. An error is a *CapacityError.
func (p *Pool) Admit(pid int, evict func()) (s *Slot, evictedOne bool, err error) {
	p.mu.Lock()
	var victim *Slot
	switch {
	case len(p.peers[pid]) >= p.perPeer:
		if victim = p.evictLocked(p.peers[pid]); victim == nil {
			p.mu.Unlock()
			return nil, false, &CapacityError{PerPeer: true, Limit: p.perPeer}
		}
	case p.n >= p.max:
		if victim = p.evictFromLargestLocked(); victim == nil {
			p.mu.Unlock()
			return nil, false, &CapacityError{Limit: p.max}
		}
	}
	s = &Slot{p: p, pid: pid, evict: evict}
	s.last.Store(p.clock.Add(1))
	p.peers[pid] = append(p.peers[pid], s)
	p.n++
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

// evictFromLargestLocked evicts the least recently used idle slot of the peers with the most
// connections, going to smaller peers only when those are all busy.
func (p *Pool) evictFromLargestLocked() *Slot {
	for {
		var best *Slot
		bestPeer := 0
		for _, slots := range p.peers {
			for _, s := range slots {
				if s.state.Load() != 0 {
					continue
				}
				if best == nil || len(slots) > bestPeer || len(slots) == bestPeer && s.last.Load() < best.last.Load() {
					best, bestPeer = s, len(slots)
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
	p.n--
	slots := p.peers[s.pid]
	for i, x := range slots {
		if x == s {
			slots = append(slots[:i], slots[i+1:]...)
			break
		}
	}
	if len(slots) == 0 {
		delete(p.peers, s.pid)
	} else {
		p.peers[s.pid] = slots
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
