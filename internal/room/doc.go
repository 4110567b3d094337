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
// Each host also holds a static X25519 key, derived from its Ed25519 seed, whose public half
// it binds to its identity in a signed KeyRecord per room; a reader verifies the record once
// and keeps the key. For each directed link from a caller host to a provider host, both
// derive a call key and a reply key with X25519 and HKDF-SHA256 (the info names the purpose,
// both host ids and both X25519 keys). A call (Call) carries the HMAC-SHA256, under its link's
// call key, of a length-prefixed canonical encoding of (room, provider, caller, capability,
// operation, action, SHA-256 of the args, requestId, time, timeout). The provider finds the
// caller's key only for a member of the room's current roster, checks the MAC, the time
// within ClockWindow, the membership and the publication; it runs the call through its local
// Invoker, bounds the result and authorizes again before replying; the reply carries the
// MAC of the link's reply key (or, for a call refused before its MAC verified, the
// provider's Ed25519 signature) and goes to the caller's inbox only. Only the two ends of a
// link can make its MACs, so calls and results are authenticated to each other as strongly
// as by signatures; what is given up is proof to a third host, which nothing uses. The bus
// moves bytes and holds no authority: a forged roster, presence, projection, key record,
// call or reply fails its check wherever it is read.
//
// # Bounds
//
// Args ≤ MaxArgsBytes (8 KiB) at the room edge, results ≤ MaxResultBytes (16 KiB), at most
// MaxInFlightPerCaller (4) calls of one caller at one provider, CallTimeout (10 s) per call
// (InvokeTimeout, 8 s, for the invoker inside it), a duplicate window of
// DuplicateWindowEntries (64) calls per caller for DuplicateWindow (60 s), and per-call
// approval within ApprovalTimeout (60 s). A retried call (the same Prepared, same requestId
// and authenticated bytes) is answered from the duplicate window: the invoker runs once. The
// window is in memory; a provider with Floors also keeps each caller's floor lease durable
// (raised FloorStep past a call's signing time before the call runs), so that no call runs
// twice across the provider's restarts either.
//
// # Errors
//
// Every error is an *Error with a stable code: unauthorized, unavailable, busy, timeout,
// duplicate_request, approval_denied, approval_timeout, invalid_request, too_large,
// invalid_reply, invalid_record, invalid_key, unknown_approval, internal; and the invoker's own
// codes, passed through by ProviderConfig.ErrorCode.
package room
