package room

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// PrepareApprovalWait signs req at now for a publication that approves each call, with a
// deadline that leaves the provider wait (at most ApprovalTimeout) for its operator's decision
// and InvokeTimeout for the invoke after it. The provider ends the wait with approval_timeout
// when wait passes, so a caller chooses how long it is willing to wait for a person; Prepare
// with AwaitApproval waits the full ApprovalTimeout.
func (c *Caller) PrepareApprovalWait(req Request, wait time.Duration, now time.Time) (*Prepared, error) {
	if wait <= 0 || wait > ApprovalTimeout {
		wait = ApprovalTimeout
	}
	id := req.RequestID
	if id == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	call := &Call{
		Room: req.Room, Provider: req.Provider, Capability: req.Capability, Operation: req.Operation,
		Action: req.Action, Args: req.Args, RequestID: id, Timeout: InvokeTimeout + wait,
	}
	data, err := SignCall(c.key, call, now)
	if err != nil {
		return nil, err
	}
	return &Prepared{call: call, data: data}, nil
}
