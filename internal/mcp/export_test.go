package mcp

// FastCalls is how many tools/call requests b's stdio fast path has taken from the SDK.
func FastCalls(b *Bridge) int64 { return b.fastCalls.Load() }
