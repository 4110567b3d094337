package session

// This file owns a generation's host tool adapter: binding the connection at open, rebinding
// it, revoking it, and handing it to a tool call.

import (
	"context"
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
