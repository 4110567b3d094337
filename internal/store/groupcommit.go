package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

// groupCommit runs concurrent journal writes and call floor raises in shared transactions.
// bbolt fsyncs every Update before it returns, so one Update per write would cap the journal at
// the disk's fsync rate; sharing one Update among every write that is waiting pays one fsync
// for all of them.
//
// There is no background goroutine and no delay. A caller that finds no commit running becomes
// the leader: it takes every pending op, itself included, and runs them in one Update. Ops that
// arrive meanwhile wait; when the leader's Update returns, it hands the lead to the oldest of
// them, which takes everything then pending, and so on until nothing is pending. A lone caller
// therefore commits at once, and no caller leads more than one group, so none is kept past its
// own op by a steady stream of others. bbolt's own Batch, by contrast, waits up to 10ms for
// company.
//
// Ops run in arrival order. Each op makes all its checks before its first write, and a refused
// op returns an error carrying a *protocol.Error having written nothing, so the transaction
// still commits the other ops. Any other error from an op (a failed bbolt write, which may
// have written part of it) and a failed commit fail every op in the group that was not refused
// on its own, with durability_failed.
type groupCommit struct {
	mu      sync.Mutex
	pending []*commitOp
	leading bool // a leader holds the lead: it is running a group or about to take one

	commits atomic.Uint64 // Update transactions run, for tests

	// beforeGroup, when set (by tests only, before any op), runs in the leader before it takes
	// the pending ops.
	beforeGroup func()
}

// commitOp is one write waiting for a group.
type commitOp struct {
	what  string // what failed, for the durability_failed message: "cannot journal a wake of session \"x\""
	apply func(tx *bolt.Tx) error
	err   error // set by the leader before it signals wake
	// wake receives exactly one value once the op leaves the queue: false when its group has
	// run and err is final, true when its caller is handed the lead with the op still pending.
	wake chan bool
}

// commit runs apply in a group-committed transaction and returns once that transaction has
// committed (apply's changes are durable) or failed. apply must make all its checks before its
// first write and return refusals as coded errors; see groupCommit.
func (s *Store) commit(what string, apply func(tx *bolt.Tx) error) error {
	g := &s.group
	op := &commitOp{what: what, apply: apply, wake: make(chan bool, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, op)
	lead := !g.leading
	g.leading = true
	g.mu.Unlock()
	if !lead && !<-op.wake {
		return op.err
	}

	if g.beforeGroup != nil {
		g.beforeGroup()
	}
	g.mu.Lock()
	group := g.pending
	g.pending = nil
	g.mu.Unlock()
	s.runGroup(group, op)
	g.mu.Lock()
	if len(g.pending) == 0 {
		g.leading = false
	} else {
		g.pending[0].wake <- true
	}
	g.mu.Unlock()
	return op.err
}

// runGroup applies group in one Update, sets every op's err and wakes every op but self.
func (s *Store) runGroup(group []*commitOp, self *commitOp) {
	s.group.commits.Add(1)
	err := s.db.Update(func(tx *bolt.Tx) (err error) {
		defer func() {
			// A panicking op must not strand the ops waiting on this leader.
			if r := recover(); r != nil {
				err = fmt.Errorf("store: journal write panicked: %v", r)
			}
		}()
		for _, op := range group {
			op.err = op.apply(tx)
			if op.err != nil && !refused(op.err) {
				return op.err
			}
		}
		return nil
	})
	for _, op := range group {
		if err != nil && (op.err == nil || !refused(op.err)) {
			op.err = protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "%s: committing to %s failed", op.what, s.path), err)
		}
		if op != self {
			op.wake <- false
		}
	}
}

// refused reports whether an op's error is a refusal made before it wrote anything.
func refused(err error) bool {
	var pe *protocol.Error
	return errors.As(err, &pe)
}
