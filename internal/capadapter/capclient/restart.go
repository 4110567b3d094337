package capclient

// This file owns what happens when a child dies: the restart backoff, the monitor that
// restarts a registration, and the adoption of its new child when it lists what it was
// registered with.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// backoff is the restart delay schedule: min, doubling per consecutive failure, capped at max.
type backoff struct {
	min, max time.Duration
	attempt  int
}

func (b *backoff) next() time.Duration {
	d := b.min
	for i := 0; i < b.attempt && d < b.max; i++ {
		d *= 2
	}
	b.attempt++
	return min(d, b.max)
}

func (b *backoff) reset() { b.attempt = 0 }

// monitor watches a's child and restarts it after a crash, with backoff, until a is stopped,
// restarts give up, or a's files no longer match their recorded digests (state changed). A nil inst (a restored registration whose first start failed) starts
// with a restart. It never holds mu while it waits.
func (s *Supervisor) monitor(a *adapter, inst instance) {
	defer close(a.done)
	bo := backoff{min: s.opts.BackoffMin, max: s.opts.BackoffMax}
	started := time.Now()
	for {
		if inst != nil {
			select {
			case <-inst.Done():
			case <-a.ctx.Done():
				return
			}
			code := capadapter.CodeOf(inst.Failure())
			if code == "" {
				code = capadapter.CodeUnavailable
			}
			if time.Since(started) >= s.opts.HealthyAfter {
				bo.reset()
			}
			s.mu.Lock()
			a.inst, a.pid, a.lastFailure, a.state = nil, 0, code, StateBackoff
			s.mu.Unlock()
			a.log.note("adapter failed (" + code + ")")
		}
		for inst = nil; inst == nil; {
			if bo.attempt >= s.opts.MaxRestartFailures {
				s.setState(a, StateFailed)
				a.log.note("giving up after repeated failures; register the adapter again")
				return
			}
			timer := time.NewTimer(bo.next())
			select {
			case <-timer.C:
			case <-a.ctx.Done():
				timer.Stop()
				return
			}
			// The approval covers the files as they were: a changed one is never started again
			// until Approve (TestCrashRestartRefusesChangedExecutable).
			if cur, err := fileDigests(a.reg); err != nil || !sameDigests(a.reg.Digests, cur) {
				s.mu.Lock()
				a.state, a.lastFailure, a.current = StateChanged, capadapter.CodeAdapterChanged, cur
				s.mu.Unlock()
				a.log.note("not restarted: its executable or script changed since it was approved; approve it to start it")
				s.notifyChanged(a.reg)
				return
			}
			s.mu.Lock()
			a.state = StateStarting
			a.restarts++
			s.mu.Unlock()
			sctx, cancel := context.WithTimeout(a.ctx, s.opts.StartTimeout)
			next, err := s.spawn(sctx, a.reg, a.log)
			cancel()
			if err == nil {
				err = s.adopt(a, next)
			}
			if err == nil {
				inst, started = next, time.Now()
				continue
			}
			if next != nil {
				_ = next.Close(context.Background())
			}
			if err == errStopped {
				return
			}
			s.mu.Lock()
			a.lastFailure, a.state = capadapter.CodeOf(err), StateBackoff
			s.mu.Unlock()
			a.log.note("restart failed (" + capadapter.CodeOf(err) + ")")
		}
	}
}

// errStopped tells monitor that its adapter was stopped while a child started.
var errStopped = newError(capadapter.CodeUnavailable, "the adapter was stopped")

// adopt installs a restarted child as a's serving instance. Its descriptors must be exactly
// those a registered with; a restored registration that never started adopts them, if no
// other adapter owns their ids.
func (s *Supervisor) adopt(a *adapter, next instance) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.ctx.Err() != nil {
		return errStopped
	}
	canon := next.canonical()
	if a.canon == nil {
		descs := next.Descriptors()
		for _, d := range descs {
			if owner := s.owners[d.CapabilityID]; owner != nil && owner != a {
				return newError(capadapter.CodeCapabilityConflict, fmt.Sprintf("capability %q belongs to adapter %q", d.CapabilityID, owner.reg.Name))
			}
		}
		a.descs, a.canon = descs, canon
		for _, d := range descs {
			s.owners[d.CapabilityID] = a
		}
	} else if !sameCanon(canon, a.canon) {
		return newError(capadapter.CodeDescriptorChanged, "the restarted adapter lists other descriptors than it registered with")
	}
	a.inst, a.pid, a.state = next, next.PID(), StateReady
	return nil
}

func sameCanon(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}
