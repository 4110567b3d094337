package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// uncachedPrivate sets the cache fields of every result that has them (server/discover and
// tools/list, SEP-2549) to "stale at once, for this client only". The tool list is one
// session's grant and the capabilities' availability, which the poller may change at any
// moment; a client of the stateless revision (2026-07-28) that holds no subscriptions/listen
// stream learns of a change only by listing again, so it must not serve the list from a cache,
// and nothing between it and the bridge may keep the list for another client.
func uncachedPrivate(_ context.Context, _ sdk.Request, c *sdk.Cacheable) {
	c.TTLMs = 0
	c.CacheScope = "private"
}
