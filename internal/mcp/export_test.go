package mcp

import "time"

// FastCalls is how many tools/call requests b's stdio fast path has taken from the SDK.
func FastCalls(b *Bridge) int64 { return b.fastCalls.Load() }

// KeyTTL is how long the bridge keeps a key open for a retry, and a client-named capability
// action's outcome.
const KeyTTL = keyTTL

// SetKeyClock makes b's key table read the time from now. Call it before b serves a call.
func SetKeyClock(b *Bridge, now func() time.Time) { b.keys.now = now }
