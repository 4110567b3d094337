package capclient

// This file owns what makes an adapter temporary and what guards its code: the removal hooks
// and their reasons, the lease loop that removes a registration when its lease ends, removal
// by tie, and Approve, the only way a changed executable runs again.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// Removal reasons, as the removal hooks are told them.
const (
	ReasonRemoved      = "removed"       // the operator removed it
	ReasonReplaced     = "replaced"      // a registration of the same name (or Approve) replaced it
	ReasonLeaseExpired = "lease_expired" // its lease ended
	ReasonRoomClosed   = "room_closed"   // the room it was tied to closed
	ReasonSessionEnded = "session_ended" // the session generation it was tied to ended
)

// Removal tells a removal hook that a registration stops serving, before its child is
// stopped: for a removal its capabilities no longer route to it; for ReasonReplaced they are
// about to be served by the registration that replaces it (already started and validated),
// whose code may differ.
type Removal struct {
	Registration Registration
	// Capabilities are the ids the removed registration served.
	Capabilities []string
	Reason       string
}

func removalOf(a *adapter, reason string) Removal {
	ids := make([]string, 0, len(a.descs))
	for _, d := range a.descs {
		ids = append(ids, d.CapabilityID)
	}
	r := a.reg
	r.Args, r.Digests = slices.Clone(r.Args), slices.Clone(r.Digests)
	return Removal{Registration: r, Capabilities: ids, Reason: reason}
}

// OnRemove adds fn to the hooks told of every removal and replacement (not of Close, which
// keeps registrations for the next start), whatever the reason. fn runs synchronously on the
// goroutine that removes (a Register, Remove, RemoveBecause, RemoveWhere or Approve caller, or
// the lease loop), before the old child is stopped and, for a replacement, before the new one
// serves: what fn withdraws is withdrawn before any other code answers for those
// capabilities. It runs with the Supervisor's administration serialized (no Register, Remove,
// Approve or Close can start until it returns; calling one of them from fn deadlocks) but no
// other lock held: fn may call List, Describe, Status, Observe and Invoke. It should be quick.
// The removal's Registration is no longer installed when fn runs.
func (s *Supervisor) OnRemove(fn func(Removal)) {
	s.mu.Lock()
	s.hooks = append(s.hooks, fn)
	s.mu.Unlock()
}

// OnChanged adds fn to the hooks told when a registration's executable or script is found
// changed since it was approved (its state becomes StateChanged): at a restart after a
// crash, or when Restore installs it. fn runs on that goroutine with no lock held and should
// be quick; the audit journal records it.
func (s *Supervisor) OnChanged(fn func(Registration)) {
	s.mu.Lock()
	s.changed = append(s.changed, fn)
	s.mu.Unlock()
}

func (s *Supervisor) notifyChanged(r Registration) {
	s.mu.Lock()
	hooks := slices.Clone(s.changed)
	s.mu.Unlock()
	for _, fn := range hooks {
		fn(r)
	}
}

// notify tells the hooks of r; the caller holds s.life, not s.mu.
func (s *Supervisor) notify(r Removal) {
	s.mu.Lock()
	hooks := slices.Clone(s.hooks)
	s.mu.Unlock()
	for _, fn := range hooks {
		fn(r)
	}
}

// RemoveWhere removes, with reason, every registration for which match returns true, and
// returns their names in name order. match runs with the Supervisor's lock held: it must only
// look at the registration.
func (s *Supervisor) RemoveWhere(ctx context.Context, reason string, match func(Registration) bool) []string {
	var names []string
	s.mu.Lock()
	for name, a := range s.adapters {
		if match(a.reg) {
			names = append(names, name)
		}
	}
	s.mu.Unlock()
	slices.Sort(names)
	out := names[:0]
	for _, n := range names {
		if s.RemoveBecause(ctx, n, reason) == nil {
			out = append(out, n)
		}
	}
	return out
}

// Approval is what Approve did: the registration's digests before and after, and whether it
// restarted the adapter.
type Approval struct {
	Name         string         `json:"name"`
	Restarted    bool           `json:"restarted"`
	Changes      []DigestChange `json:"digests"`
	Registration Registration   `json:"-"`
}

// Approve is the operator's acceptance of the files of the registration called name as they
// are now: it hashes them, and when they differ from the recorded digests or the adapter is
// in state changed, it records the new digests and starts the adapter under them, replacing
// the registration (its removal hooks are told ReasonReplaced, since the code that serves
// its capabilities changed). A start that fails changes nothing and returns its error. An
// adapter whose files are unchanged and that is not in state changed is left as it is
// (Restarted false). Approve fails with unknown_adapter for an unknown name, with
// invalid_registration when a file cannot be hashed.
func (s *Supervisor) Approve(ctx context.Context, name string) (Approval, error) {
	s.mu.Lock()
	a := s.adapters[name]
	var reg Registration
	var state State
	if a != nil {
		reg, state = a.reg, a.state
	}
	s.mu.Unlock()
	if a == nil {
		return Approval{}, newError(capadapter.CodeUnknownAdapter, fmt.Sprintf("no adapter is registered as %q", name))
	}
	current, err := fileDigests(reg)
	if err != nil {
		return Approval{}, invalidRegistration("cannot hash the command or its script: " + err.Error())
	}
	ap := Approval{Name: name, Changes: digestChanges(reg.Digests, current), Registration: reg}
	if state != StateChanged && sameDigests(reg.Digests, current) {
		return ap, nil
	}
	norm, err := s.register(ctx, reg, modeApprove)
	if err != nil {
		return Approval{}, err
	}
	ap.Restarted, ap.Registration = true, norm
	ap.Changes = digestChanges(reg.Digests, norm.Digests)
	return ap, nil
}

// leaseLoop is the Supervisor's one lease timer: a goroutine, started with the first lease,
// that sleeps until the earliest lease ends and removes that registration
// (ReasonLeaseExpired). Close stops it before it stops the adapters.
type leaseLoop struct {
	mu      sync.Mutex
	running bool
	stopped bool
	kick    chan struct{} // 1-buffered: the earliest lease may have changed
	quit    chan struct{}
	wg      sync.WaitGroup
}

func (l *leaseLoop) init() {
	l.kick = make(chan struct{}, 1)
	l.quit = make(chan struct{})
}

// wake starts the loop, or makes it look at the leases again.
func (l *leaseLoop) wake(s *Supervisor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	if !l.running {
		l.running = true
		l.wg.Go(func() { s.runLeases() })
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// stop ends the loop and waits for it; it is idempotent.
func (l *leaseLoop) stop() {
	l.mu.Lock()
	if !l.stopped {
		l.stopped = true
		close(l.quit)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// nextLease returns the adapter whose lease ends first, if any.
func (s *Supervisor) nextLease() (*adapter, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first *adapter
	var at time.Time
	for _, a := range s.adapters {
		if e := a.reg.LeaseExpires; !e.IsZero() && (first == nil || e.Before(at)) {
			first, at = a, e
		}
	}
	return first, at
}

func (s *Supervisor) runLeases() {
	l := &s.leases
	for {
		a, at := s.nextLease()
		var fire <-chan time.Time
		var timer *time.Timer
		if a != nil {
			if d := time.Until(at); d <= 0 {
				a.log.note("lease ended; removing the registration")
				_ = s.remove(context.Background(), a.reg.Name, ReasonLeaseExpired, a)
				continue
			} else {
				timer = time.NewTimer(d)
				fire = timer.C
			}
		}
		select {
		case <-fire:
		case <-l.kick:
		case <-l.quit:
			if timer != nil {
				timer.Stop()
			}
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}
