package toolclient

import (
	"context"
	"strconv"
	"sync"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// Registry holds a host's live adapter connections, at most one per (host, session,
// generation). Its keys never include the capability handle. It is safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	closed  bool
	conns   map[string]*Conn
	pending map[string]bool // connecting now
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{conns: make(map[string]*Conn), pending: make(map[string]bool)}
}

func registryKey(b tooladapter.Binding) string {
	return b.HostInstanceID + "\x00" + b.SessionID + "\x00" + strconv.FormatInt(b.Generation, 10)
}

// Open connects and binds d and registers the connection. A live or connecting connection for
// the same binding is adapter_session_conflict; a failed one is replaced. After Close, Open is
// adapter_registry_closed.
func (r *Registry) Open(ctx context.Context, d *tooladapter.Descriptor, opts Options) (*Conn, *protocol.Error) {
	key := registryKey(d.Incarnation())
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, protocol.Errorf(tooladapter.CodeRegistryClosed, "tool adapter registry is closed")
	}
	if old := r.conns[key]; r.pending[key] || (old != nil && old.Err() == nil) {
		r.mu.Unlock()
		return nil, protocol.Errorf(tooladapter.CodeSessionConflict, "a tool adapter is already bound to this session generation")
	}
	r.pending[key] = true
	old := r.conns[key]
	delete(r.conns, key)
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}

	c, e := Connect(ctx, d, opts)

	r.mu.Lock()
	delete(r.pending, key)
	if e == nil && r.closed {
		e = protocol.Errorf(tooladapter.CodeRegistryClosed, "tool adapter registry is closed")
	} else if e == nil {
		r.conns[key] = c
		r.mu.Unlock()
		return c, nil
	}
	r.mu.Unlock()
	if c != nil {
		c.Close()
	}
	return nil, e
}

// Get returns the connection registered for b, or nil. A connection that has failed stays
// registered until it is revoked or replaced, so that its telemetry stays visible and Invoke
// reports adapter_session_closed with the failure in details.cause.
func (r *Registry) Get(b tooladapter.Binding) *Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[registryKey(b)]
}

// Revoke closes and forgets the connection for b, if any (session close, generation
// replacement, eviction).
func (r *Registry) Revoke(b tooladapter.Binding) {
	key := registryKey(b)
	r.mu.Lock()
	c := r.conns[key]
	delete(r.conns, key)
	r.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Close revokes every connection; later Opens fail adapter_registry_closed.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	conns := r.conns
	r.conns = make(map[string]*Conn)
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(c.Close)
	}
	wg.Wait()
}
