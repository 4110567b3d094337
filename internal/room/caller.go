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
}

// Prepared is a signed call, ready to be sent and, after a lost reply, sent again unchanged:
// the provider answers the copy from its duplicate window without invoking twice.
type Prepared struct {
	call *Call
	data []byte
}

// RequestID is the call's request id.
func (p *Prepared) RequestID() string { return p.call.RequestID }

// Caller signs calls with its host's key and sends them over the bus.
type Caller struct {
	key  *HostKey
	conn busport.Conn
}

// NewCaller returns a caller for key's host on conn.
func NewCaller(key *HostKey, conn busport.Conn) *Caller { return &Caller{key: key, conn: conn} }

// Prepare signs req at now.
func (c *Caller) Prepare(req Request, now time.Time) (*Prepared, error) {
	id := req.RequestID
	if id == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	timeout := CallTimeout
	if req.AwaitApproval {
		timeout = MaxCallTimeout
	}
	call := &Call{
		Room: req.Room, Provider: req.Provider, Capability: req.Capability, Operation: req.Operation,
		Action: req.Action, Args: req.Args, RequestID: id, Timeout: timeout,
	}
	data, err := SignCall(c.key, call, now)
	if err != nil {
		return nil, err
	}
	return &Prepared{call: call, data: data}, nil
}

// Send sends a prepared call and waits for its result until the call's deadline or ctx's,
// whichever is first. The result comes only from the provider the call names, signed by it;
// an error is an *Error, Remote when the provider answered with it.
func (c *Caller) Send(ctx context.Context, p *Prepared) (json.RawMessage, error) {
	ctx, cancel := context.WithDeadline(ctx, p.call.Time.Add(p.call.Timeout))
	defer cancel()
	data, err := c.conn.Request(ctx, CallSubject(p.call.Room, p.call.Provider), p.data)
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
	r, err := openReply(data, p.call)
	if err != nil {
		return nil, err
	}
	if r.Code != "" {
		return nil, &Error{Code: r.Code, Remote: true}
	}
	return r.Result, nil
}

// Call prepares req now and sends it.
func (c *Caller) Call(ctx context.Context, req Request) (json.RawMessage, error) {
	p, err := c.Prepare(req, time.Now())
	if err != nil {
		return nil, err
	}
	return c.Send(ctx, p)
}
