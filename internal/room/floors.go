package room

import (
	"context"
	"time"
)

// Floors keeps each caller's floor lease where it survives the provider's process: a kill -9,
// a crash or a restart. A provider with Floors keeps this invariant: every call it ever ran
// for caller C was signed at or before C's durable lease. It raises the lease (to the call's
// signing time plus FloorStep) before it runs a call signed after it, and at start makes each
// loaded lease its caller's floor, so that a call captured before the restart and sent again
// is refused duplicate_request instead of running a second time.
//
// Implementations must be safe for concurrent use, Raise for the same caller too; the daemon's
// is the state database (package roomhost), where concurrent raises share one commit.
type Floors interface {
	// Load returns the leases of the callers whose lease is after since. The provider calls
	// it once, when it is made.
	Load(since time.Time) (map[HostID]time.Time, error)
	// Raise makes caller's lease at least lease and returns nil once that is durable. It never
	// lowers a lease. It may forget any caller's lease that is not after since (such a lease
	// refuses nothing any more: see FloorRetention). On an error the lease may or may not
	// have been raised; the provider then runs none of the calls waiting for it.
	Raise(caller HostID, lease, since time.Time) error
}

// lease makes c's signing time covered by its caller's durable lease — writing e's raise when
// e leads it, else waiting for it — and then runs c as dispatch does. A failed raise ends c
// unavailable, recorded for its retries like any reply, without running it; so does the
// provider's stop while c waits for another call's raise (the write itself is not
// interrupted).
func (p *Provider) lease(ctx context.Context, c *Call, e *entry, pub Publication, now, deadline time.Time, departed uint64, end func(*Reply)) {
	r := e.raise
	unavailable := func() { end(&Reply{Room: c.Room, Caller: c.Caller, RequestID: c.RequestID, Code: CodeUnavailable}) }
	if e.lead {
		p.window.raised(c.Caller, r, p.cfg.Floors.Raise(c.Caller, r.to, time.Now().Add(-FloorRetention)))
	} else {
		select {
		case <-r.done:
		case <-ctx.Done():
			unavailable()
			return
		}
	}
	if r.err != nil {
		unavailable()
		return
	}
	p.dispatch(ctx, c, pub, now, deadline, departed, true, end)
}
