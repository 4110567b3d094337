package session

// This file owns a generation's host tool adapter: binding the connection at open, rebinding
// it, revoking it, and handing it to a tool call.

import (
	"context"
	"time"

	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
)

// bind connects and binds the host tool adapter an open grants, beneath the canonical cwd.
func (m *Manager) bind(ctx context.Context, req OpenRequest) (*toolclient.Conn, *protocol.Error) {
	root, e := tooladapter.CanonicalRoot(req.Policy.Cwd)
	if e != nil {
		return nil, e
	}
	return m.cfg.Tools.Open(ctx, req.Tools, toolclient.Options{Root: root, Logger: m.log})
}

// rebind replaces the failed adapter connection of a resident generation, for an open of the
// same generation and policy. Nothing durable changes; the answer is created:false.
func (m *Manager) rebind(ctx context.Context, rt *runtime, req OpenRequest) (*protocol.OpenResult, error) {
	if req.Tools == nil {
		return nil, protocol.Errorf(protocol.CodeSessionPolicyConflict, "the generation was opened with a tool adapter")
	}
	m.cfg.Tools.Revoke(req.Tools.Incarnation())
	conn, e := m.bind(ctx, req)
	if e != nil {
		return nil, e
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions[rt.id] != rt {
		// Closed or replaced meanwhile.
		m.cfg.Tools.Revoke(req.Tools.Incarnation())
		return nil, notFound(rt.id)
	}
	if e := m.admitting(); e != nil {
		// The callers checked before binding, but Drain does not take the session's lock:
		// one that began meanwhile revoked the connection this replaces and would never
		// revoke this one (TestRebindRefusedOnceDraining).
		m.cfg.Tools.Revoke(req.Tools.Incarnation())
		return nil, e
	}
	rt.tools, rt.revoked = conn, false
	if rt.spec != nil {
		spec := *rt.spec
		spec.Tools = m.toolInvoker(rt, conn)
		rt.spec = &spec
	}
	rt.lastUsed = m.now()
	if req.ToolsBound != nil {
		*req.ToolsBound = true
	}
	return &protocol.OpenResult{Created: false, Session: m.snapshotLocked(rt)}, nil
}

// Regrant repairs a resident generation whose adapter connection failed, for a caller that can
// grant the generation its cwd again itself: airlockd, whose own airlock-fs restarted and took
// the generation's grant with it. grant gets the generation's cwd and operations and returns
// the new descriptor; it is then bound as an open of the same generation and policy would bind
// it (rebind, created:false). grant runs under the session's operation lock, so no open, close
// or replacement of the session runs between the check and the binding.
//
// Regrant returns false without calling grant when there is nothing to repair: the generation
// is not resident (closed, replaced, evicted), has no adapter, its connection is live (an open
// rebound it already) or was revoked (the host is draining). It returns true once the new grant
// is bound, and an error when grant failed, when its descriptor is not the generation's policy
// (another adapter version: session_policy_conflict), or when binding failed; the caller then
// revokes what grant made.
//
// timeout bounds grant and the binding, from when the session's lock is taken: the wait for
// an open or close of the session holding it does not count against it. grant gets ctx so
// bounded.
func (m *Manager) Regrant(ctx context.Context, id string, generation int64, timeout time.Duration,
	grant func(ctx context.Context, cwd string, ops []string) (*tooladapter.Descriptor, *protocol.Error)) (bool, *protocol.Error) {
	release := m.lockSession(id)
	defer release()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m.mu.Lock()
	rt := m.sessions[id]
	if rt == nil || rt.generation != generation || rt.tools == nil || rt.revoked || rt.tools.Err() == nil {
		m.mu.Unlock()
		return false, nil
	}
	if e := m.admitting(); e != nil {
		m.mu.Unlock()
		return false, e
	}
	pol := rt.policy
	ops := rt.tools.Summary().Operations
	m.mu.Unlock()

	d, e := grant(ctx, pol.Cwd, ops)
	if e != nil {
		return false, e
	}
	if string(d.Summary().Canonical()) != string(pol.ToolAdapter) {
		return false, protocol.Errorf(protocol.CodeSessionPolicyConflict, "the new grant's adapter summary is not the generation's")
	}
	if _, err := m.rebind(ctx, rt, OpenRequest{SessionID: id, Generation: generation, Policy: &pol, Tools: d}); err != nil {
		return false, protocol.AsError(err)
	}
	return true, nil
}

// revoke ends a runtime's adapter connection, if any: pending work fails, a best-effort revoke
// frame is sent and the socket closed. It may wait briefly, so m.mu must not be held.
func (m *Manager) revoke(rt *runtime) {
	if rt == nil {
		return
	}
	m.mu.Lock()
	conn := rt.tools
	if conn != nil {
		rt.revoked = true
	}
	m.mu.Unlock()
	if conn != nil {
		m.cfg.Tools.Revoke(conn.Incarnation())
	}
}

// Tool returns the adapter connection of exactly this resident generation.
func (m *Manager) Tool(id string, generation int64) (*toolclient.Conn, error) {
	conn, _, err := m.GatedTool(id, generation)
	return conn, err
}

// GatedTool returns the adapter connection of exactly this resident generation and the
// generation's policy (nil: none of its own), for the gate.
func (m *Manager) GatedTool(id string, generation int64) (*toolclient.Conn, *policy.Policy, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.usableLocked(id, generation)
	if e != nil {
		return nil, nil, e
	}
	if rt.tools == nil {
		return nil, nil, protocol.Errorf(tooladapter.CodeOperationDenied, "this session generation has no host tool adapter").
			With("indeterminate", false)
	}
	rt.lastUsed = m.now()
	return rt.tools, rt.rules, nil
}
