package room

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
)

// Request is one call a caller wants to make.
type Request struct {
	Room       string
	Provider   HostID
	Capability string
	Operation  Operation
	// Action and Args are for invoke only.
	Action string
	Args   json.RawMessage
	// RequestID identifies the call for the duplicate window; empty picks a random one.
	RequestID string
	// AwaitApproval extends the deadline by ApprovalTimeout, for a publication that approves
	// each call.
	AwaitApproval bool
	// ApprovalWait, with AwaitApproval, is how long the caller is willing to wait for the
	// provider's operator instead: the deadline leaves the provider that wait and
	// InvokeTimeout for the invoke after it, and the provider ends the wait with
	// approval_timeout when it passes. Zero, or more than ApprovalTimeout, means
	// ApprovalTimeout. It is rounded up to a millisecond.
	ApprovalWait time.Duration
}

// Prepared is an authenticated call, ready to be sent and, after a lost reply, sent again
// unchanged: the provider answers the copy from its duplicate window without invoking twice.
type Prepared struct {
	call *Call
	link *linkKeys
	data busport.Msg
}

// RequestID is the call's request id.
func (p *Prepared) RequestID() string { return p.call.RequestID }

// Caller authenticates calls as its host and sends them over the bus. It finds each
// provider's key in its host's Directory: a call goes only to a member of the room's current
// roster whose key record the directory verified.
type Caller struct {
	key  *HostKey
	conn busport.Conn
	dir  *Directory
}

// NewCaller returns a caller for key's host on conn, with the host's directory dir (the one
// its Sync keeps current).
func NewCaller(key *HostKey, conn busport.Conn, dir *Directory) *Caller {
	return &Caller{key: key, conn: conn, dir: dir}
}

// Prepare authenticates req at now with the keys of the link from this host to the provider.
// A provider that is not in the room's current roster, or whose key record this host has
// not verified (nor could read from the bus), gives unavailable.
func (c *Caller) Prepare(req Request, now time.Time) (*Prepared, error) {
	p, _, err := c.prepare(req, now, true)
	return p, err
}

// prepare is Prepare; without fetch it does not read the bus, and returns false (and no
// call) where Prepare would.
func (c *Caller) prepare(req Request, now time.Time, fetch bool) (*Prepared, bool, error) {
	id := req.RequestID
	if id == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	timeout := CallTimeout
	if req.AwaitApproval {
		timeout = MaxCallTimeout
		if w := req.ApprovalWait; w > 0 && w < ApprovalTimeout {
			timeout = InvokeTimeout + (w + time.Millisecond - 1).Truncate(time.Millisecond)
		}
	}
	call := &Call{
		Room: req.Room, Provider: req.Provider, Capability: req.Capability, Operation: req.Operation,
		Action: req.Action, Args: req.Args, RequestID: id, Timeout: timeout,
	}
	if !ValidRoomID(req.Room) || !req.Provider.Valid() {
		return nil, true, newError(CodeInvalidRequest, "call: bad room or provider")
	}
	pub, ok := c.dir.memberKey(context.Background(), req.Room, req.Provider, false)
	if !ok && !fetch {
		return nil, false, nil
	}
	if !ok {
		// Read the provider's key record from the bus (memberKey bounds it by syncTimeout).
		pub, ok = c.dir.memberKey(context.Background(), req.Room, req.Provider, true)
	}
	if !ok {
		return nil, true, newError(CodeUnavailable, "the provider is not a member with a known key in the room")
	}
	link, err := c.key.link(c.key.ID(), req.Provider, pub)
	if err != nil {
		return nil, true, err
	}
	data, err := sealCall(c.key, link, call, now)
	if err != nil {
		return nil, true, err
	}
	return &Prepared{call: call, link: link, data: data}, true, nil
}

// Send sends a prepared call and waits for its result until the call's deadline or ctx's,
// whichever is first. The result comes only from the provider the call names, authenticated
// by it; an error is an *Error, Remote when the provider answered with it.
func (c *Caller) Send(ctx context.Context, p *Prepared) (json.RawMessage, error) {
	ctx, cancel := context.WithDeadline(ctx, p.call.Time.Add(p.call.Timeout))
	defer cancel()
	data, err := c.conn.RequestMsg(ctx, CallSubject(p.call.Room, p.call.Provider), p.data)
	return c.result(p, data, err)
}

// StartSend is Send without the wait: done receives exactly what Send would return, exactly
// once, on the goroutine that ends the call (the bus connection's reply goroutine, normally)
// or before StartSend returns. done must not block.
func (c *Caller) StartSend(ctx context.Context, p *Prepared, done func(json.RawMessage, error)) {
	ctx, cancel := context.WithDeadline(ctx, p.call.Time.Add(p.call.Timeout))
	c.conn.StartRequestMsg(ctx, CallSubject(p.call.Room, p.call.Provider), p.data, func(data busport.Msg, err error) {
		cancel()
		done(c.result(p, data, err))
	})
}

// result opens the bus's answer to p.
func (c *Caller) result(p *Prepared, data busport.Msg, err error) (json.RawMessage, error) {
	switch {
	case errors.Is(err, busport.ErrNoResponders), errors.Is(err, busport.ErrClosed):
		return nil, newError(CodeUnavailable, "the provider is not on the bus")
	case errors.Is(err, busport.ErrTimeout):
		return nil, newError(CodeTimeout, "no reply within the call deadline")
	case errors.Is(err, busport.ErrTooLarge):
		return nil, newError(CodeTooLarge, "call or reply over the bus limit")
	case err != nil:
		return nil, newError(CodeUnavailable, "bus failure")
	}
	r, err := openReply(data, p.call, p.link)
	if err != nil {
		return nil, err
	}
	if r.Code != "" {
		return nil, &Error{Code: r.Code, Remote: true}
	}
	return r.Result, nil
}

// Start prepares req at now and sends it as StartSend does, if it can without waiting: when
// the provider's key record would have to be read from the bus first, it returns false and
// does nothing, and the call is for Call, on a goroutine that may wait.
func (c *Caller) Start(ctx context.Context, req Request, now time.Time, done func(json.RawMessage, error)) bool {
	p, ok, err := c.prepare(req, now, false)
	switch {
	case !ok:
		return false
	case err != nil:
		done(nil, err)
	default:
		c.StartSend(ctx, p, done)
	}
	return true
}

// Call prepares req now and sends it.
func (c *Caller) Call(ctx context.Context, req Request) (json.RawMessage, error) {
	p, err := c.Prepare(req, time.Now())
	if err != nil {
		return nil, err
	}
	return c.Send(ctx, p)
}
