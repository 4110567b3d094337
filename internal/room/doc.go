// Package room implements rooms: shared spaces in which airlockd hosts publish local
// capabilities to each other, and the provider-side authorization of every call into them. It
// knows nothing of NATS: it speaks to the bus through package busport's interfaces, which
// package bus implements.
//
// # Trust
//
// Every participant is a host with an Ed25519 key pair (HostKey, kept in the state directory
// as a 0600 file); its HostID is the hex public key. A room's owner signs its roster (the
// member list, versioned); members trust the owner key they learnt when they created or
// joined the room, never one read from the bus. A provider's publications are its own table
// (Publications): the operator's explicit act, distinct from registering an adapter.
//
// A call (Call) is signed by the caller's host key over (room, provider, caller, capability,
// operation, action, SHA-256 of the args, requestId, time, timeout) in a length-prefixed
// canonical encoding. The provider verifies the signature against the caller's key, the time
// within ClockWindow, the caller's membership in the roster, and the publication; it runs the
// call through its local Invoker, bounds the result and authorizes again before replying; the
// reply is signed by the provider and goes to the caller's inbox only. The bus moves bytes and
// holds no authority: a forged roster, presence, projection, call or reply fails its
// signature check wherever it is read.
//
// # Bounds
//
// Args ≤ MaxArgsBytes (8 KiB) at the room edge, results ≤ MaxResultBytes (16 KiB), at most
// MaxInFlightPerCaller (4) calls of one caller at one provider, CallTimeout (10 s) per call
// (InvokeTimeout, 8 s, for the invoker inside it), a duplicate window of
// DuplicateWindowEntries (64) calls per caller for DuplicateWindow (60 s), and per-call
// approval within ApprovalTimeout (60 s). A retried call (the same Prepared, same requestId
// and signed bytes) is answered from the duplicate window: the invoker runs once.
//
// # Errors
//
// Every error is an *Error with a stable code: unauthorized, unavailable, busy, timeout,
// duplicate_request, approval_denied, approval_timeout, invalid_request, too_large,
// invalid_reply, invalid_record, invalid_key, unknown_approval, internal; and the invoker's own
// codes, passed through by ProviderConfig.ErrorCode.
package room
