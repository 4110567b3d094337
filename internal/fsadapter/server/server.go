// Package server is airlock-fs, the reference host tool adapter: an operator-owned service that
// mints capability grants over an admin socket and serves the fs.* operations of each grant,
// confined to its root by internal/fsadapter/fsops, to the daemon over a serving socket.
//
// # Sockets
//
// Both sockets are owner-only, with the daemon's rules: a 0700 directory owned by the user and
// writable by nobody else, a 0600 socket, a stale socket replaced and a live one refused, and the
// peer's uid (SO_PEERCRED) checked on every connection. The serving socket path is the
// descriptor's endpoint and must fit in 100 bytes.
//
// # Grants
//
// A grant binds a fresh random capability handle to a canonical root directory, one session
// incarnation (host instance, session, generation), an ordered operation list and the seven
// limits. Grants live in memory only: a restart loses them all, by design. The handle is
// written exactly once, in the descriptor the grant request returns; it never reaches a log,
// an error or the grants list.
//
// # Serving
//
// A serving connection's first frame must be a bind of a live grant with exactly its binding,
// operations and limits; anything else is closed without a byte written. A grant has at most
// one connection. After bound, the adapter enforces the grant's limits itself: at most
// maxConcurrentRequests run, up to maxQueuedRequests more wait in FIFO order, the rest are
// refused (adapter_queue_capacity); each request times out requestTimeoutMs after admission;
// request lines over maxRequestBytes end the connection and results over maxResponseBytes
// become too_large errors. Every invoke gets exactly one result frame, also after an abort.
// Idempotency keys are remembered per session generation, across its grants (see scope and
// docs/airlock-fs.md).
//
// # Concurrency
//
// Server methods are safe for concurrent use. Lock order: Server.mu, then grant.mu; conn.writeMu
// is never held while taking either.
package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/trywrite"
)

// ConnLimits bound the connections that hold no grant, so that one process of the user
// cannot lock out the daemon's binds or the operator's admin calls (issue 16). Bound serving
// connections are not counted: there is at most one per grant.
type ConnLimits struct {
	// MaxUnbound bounds the serving connections that have not bound yet; past it, and past a
	// peer's share, the least recently connected unbound connection of the largest peer is
	// closed to make room.
	MaxUnbound int
	// MaxAdmin bounds the admin connections; idle ones make room the same way.
	MaxAdmin int
	// MaxPerPeer is one peer process's (SO_PEERCRED pid) share of each of the two.
	MaxPerPeer int
	// BindTimeout bounds the wait for the bind line, from accept: the daemon writes it right
	// after connecting, so a connection silent this long is not a daemon.
	BindTimeout time.Duration
	// AdminLineTimeout bounds the wait for each admin request line, from accept or from the
	// last answer: the CLI sends its one request at once.
	AdminLineTimeout time.Duration
}

// DefaultConnLimits are the connection limits of a zero Config.Conns member. A daemon opening
// many sessions at once binds in parallel, so a peer may hold a quarter of the unbound slots.
var DefaultConnLimits = ConnLimits{
	MaxUnbound:       128,
	MaxAdmin:         32,
	MaxPerPeer:       32,
	BindTimeout:      5 * time.Second,
	AdminLineTimeout: 10 * time.Second,
}

// Config configures a Server.
type Config struct {
	Socket      string // serving socket: absolute, canonical, at most 100 bytes
	AdminSocket string // admin socket
	// Version is the build version; AdapterVersion turns it into the adapterVersion.
	Version string
	// Logger receives operator logs: grant ids, roots, sessions, codes; never a handle.
	Logger *slog.Logger
	// Conns bounds the connections without a grant; zero members take DefaultConnLimits.
	Conns ConnLimits
}

// Server is a running airlock-fs.
type Server struct {
	cfg     Config
	log     *slog.Logger
	version string
	uid     int
	serving *ownersock.Socket
	admin   *ownersock.Socket
	// The pools bound the connections that hold no grant; a bound connection is one per grant.
	limits  ConnLimits
	unbound *ownersock.Pool // serving connections until they bind
	admins  *ownersock.Pool
	wg      sync.WaitGroup

	// mu guards the fields below.
	mu     sync.Mutex
	closed bool
	grants map[string]*grant     // by grant id
	conns  map[net.Conn]struct{} // every accepted connection, closed by Close
	// memories are the idempotency memories by scope, shared by the grants of one session
	// generation and kept after its last grant is revoked until their outcomes expire (see
	// memory).
	memories map[scope]*idemCache
}

// Start listens on both sockets and serves them until Close.
func Start(cfg Config) (*Server, error) {
	if !validSocketPath(cfg.Socket) {
		return nil, fmt.Errorf("serving socket path must be absolute, canonical and at most %d bytes", tooladapter.MaxSocketPathBytes)
	}
	if cfg.AdminSocket == "" || !path.IsAbs(cfg.AdminSocket) {
		return nil, errors.New("admin socket path must be absolute")
	}
	if cfg.AdminSocket == cfg.Socket {
		return nil, errors.New("the admin and serving sockets must differ")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, version: AdapterVersion(cfg.Version), uid: os.Geteuid(),
		grants: make(map[string]*grant), conns: make(map[net.Conn]struct{}),
		memories: make(map[scope]*idemCache)}
	if err := s.setLimits(cfg.Conns); err != nil {
		return nil, err
	}
	var err error
	if s.serving, err = ownersock.Listen(cfg.Socket, s.uid); err != nil {
		return nil, err
	}
	if s.admin, err = ownersock.Listen(cfg.AdminSocket, s.uid); err != nil {
		s.serving.Close()
		return nil, err
	}
	s.wg.Add(2)
	go s.accept(s.serving, s.unbound, s.serveConn, evictUnbound)
	go s.accept(s.admin, s.admins, s.adminConn, s.evictAdmin)
	log.Info("airlock-fs serving", "socket", cfg.Socket, "adminSocket", cfg.AdminSocket, "adapterVersion", s.version,
		"maxUnboundConnections", s.limits.MaxUnbound, "maxAdminConnections", s.limits.MaxAdmin,
		"maxConnectionsPerPeer", s.limits.MaxPerPeer)
	return s, nil
}

// setLimits fills in the connection limits and the pools. The unbound and admin pools are
// capped well below the descriptor limit, which is first raised to its hard limit: every grant
// holds its root and its connection, and operations open files, so a flood of connections
// that hold nothing must never take the descriptors a bind or a read needs.
func (s *Server) setLimits(l ConnLimits) error {
	d := DefaultConnLimits
	l.MaxUnbound = cmp.Or(l.MaxUnbound, d.MaxUnbound)
	l.MaxAdmin = cmp.Or(l.MaxAdmin, d.MaxAdmin)
	l.MaxPerPeer = cmp.Or(l.MaxPerPeer, d.MaxPerPeer)
	l.BindTimeout = cmp.Or(l.BindTimeout, d.BindTimeout)
	l.AdminLineTimeout = cmp.Or(l.AdminLineTimeout, d.AdminLineTimeout)
	if l.MaxUnbound < 1 || l.MaxAdmin < 1 || l.MaxPerPeer < 1 || l.BindTimeout < 0 || l.AdminLineTimeout < 0 {
		return errors.New("connection limits must be positive")
	}
	fds := raiseNoFile()
	budget := fds - 2*MaxGrants - fdReserve
	unbound, admin := min(l.MaxUnbound, max(16, budget/2)), min(l.MaxAdmin, max(4, budget/8))
	if unbound < l.MaxUnbound || admin < l.MaxAdmin {
		s.log.Warn("connection limits lowered to fit the descriptor limit", "nofile", fds,
			"maxUnboundConnections", unbound, "maxAdminConnections", admin)
	}
	l.MaxUnbound, l.MaxAdmin = unbound, admin
	s.limits = l
	s.unbound = ownersock.NewPool(s.cfg.Socket, l.MaxUnbound, l.MaxPerPeer, s.log)
	s.admins = ownersock.NewPool(s.cfg.AdminSocket, l.MaxAdmin, l.MaxPerPeer, s.log)
	return nil
}

// fdReserve is the descriptors kept for everything but connections and grant roots: the
// listeners, files open in operations, the log.
const fdReserve = 256

// raiseNoFile raises the soft descriptor limit to the hard one and returns the limit in force.
func raiseNoFile() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 1024
	}
	if l.Cur < l.Max {
		raised := l
		raised.Cur = raised.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			l = raised
		}
	}
	return int(min(l.Cur, 1<<30))
}

func validSocketPath(p string) bool {
	if len(p) < 2 || len(p) > tooladapter.MaxSocketPathBytes || !utf8.ValidString(p) || p[0] != '/' || path.Clean(p) != p {
		return false
	}
	for _, c := range []byte(p) {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// accept serves ln until it is closed; each connection runs in its own goroutine, with its
// place in pool (see ownersock.Pool). To make room the pool evicts an idle connection with
// evict, which closes it at once (its descriptor is what a flood must not hold); handle then
// learns it from its slot.
func (s *Server) accept(ln *ownersock.Socket, pool *ownersock.Pool, handle func(*net.UnixConn, *ownersock.Slot), evict func(*net.UnixConn)) {
	defer s.wg.Done()
	var pause time.Duration
	for {
		nc, err := ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				// EMFILE and friends: neither spin nor log every failure. A Close meanwhile
				// is seen by the next accept, within the pause.
				pause = ownersock.AcceptRetry(pause)
				s.log.Error("accept failed", "err", err, "retryIn", pause)
				time.Sleep(pause)
				continue
			}
			return
		}
		pause = 0
		cred, err := ownersock.PeerCred(nc)
		if err != nil || cred.UID != s.uid {
			s.log.Warn("connection from another user refused", "peerUid", cred.UID)
			nc.Close()
			continue
		}
		slot, evicted, err := pool.Admit(cred.PID, func() { evict(nc) })
		if err != nil {
			pool.Warn("refused", cred.PID, "connection refused: every connection is busy")
			nc.Close()
			continue
		}
		if evicted {
			pool.Warn("evicted", cred.PID, "connection flood: idle connections evicted to admit new ones")
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			slot.Close()
			nc.Close()
			continue
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			handle(nc, slot)
			slot.Close()
			s.mu.Lock()
			delete(s.conns, nc)
			s.mu.Unlock()
		}()
	}
}

// Close stops accepting, closes every connection, ends every grant and waits for all
// goroutines. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	grants := s.grants
	s.grants = map[string]*grant{}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	err := errors.Join(s.serving.Close(), s.admin.Close())
	for _, g := range grants {
		s.endGrant(g)
	}
	s.wg.Wait()
	for _, g := range grants {
		g.root.Close()
	}
	s.log.Info("airlock-fs stopped")
	return err
}

// endGrant marks g revoked and closes its connection.
// scope is what an idempotency memory belongs to: one session generation of one host's
// sessions on one root. The daemon's keys are derived from the operation and the tool call id
// alone, so two sessions may send the same key for unrelated calls; the session and
// generation keep them apart. A daemon restart gives the host a new hostInstanceId and the
// session a new grant for the same generation (reprovisioning), so hostInstanceId is not part
// of the scope: a call retried with its key after the restart finds the outcome it had.
type scope struct {
	adapterID  string
	root       string
	sessionID  string
	generation int64
}

func scopeOf(g *grant) scope {
	return scope{adapterID: g.identity.AdapterID, root: g.root.Name(), sessionID: g.identity.SessionID,
		generation: g.identity.Generation}
}

// maxIdleMemories bounds the memories kept for scopes without a live grant; past it, those
// whose newest outcome expires first are forgotten first. Such a memory keeps only the
// outcomes of writes and edits (see idemCache.dropReads): with the default limits, 256 keys
// of about 700 bytes at most, some 11 MiB for all of them.
const maxIdleMemories = 64

// memory returns the idempotency memory of sc for a new grant with limits l, creating it if
// there is none, and forgets the memories of scopes without a live grant whose outcomes have
// all expired (or the oldest, past maxIdleMemories). A memory takes the key bounds of the
// grant that created it. The caller holds s.mu.
func (s *Server) memory(sc scope, l tooladapter.Limits, now time.Time) *idemCache {
	m := s.memories[sc]
	if m == nil {
		m = newIdemCache(l)
		s.memories[sc] = m
	}
	m.grants++
	var idle []scope
	for k, c := range s.memories {
		if c.grants > 0 {
			continue
		}
		if c.idle(now) {
			delete(s.memories, k)
			continue
		}
		idle = append(idle, k)
	}
	if len(idle) > maxIdleMemories {
		slices.SortFunc(idle, func(a, b scope) int {
			return s.memories[a].lastExpiry().Compare(s.memories[b].lastExpiry())
		})
		for _, k := range idle[:len(idle)-maxIdleMemories] {
			delete(s.memories, k)
		}
	}
	return m
}

func (s *Server) endGrant(g *grant) {
	g.mu.Lock()
	g.revoked = true
	c := g.conn
	g.mu.Unlock()
	if c != nil {
		c.cancel()
		c.nc.Close()
	}
}

// adminConn serves admin requests, one response line per request line. Each request must
// arrive within AdminLineTimeout of connecting or of the last answer; a connection that is
// late, or that the pool evicts while it waits, is told why (line_timeout,
// connection_evicted) and closed.
func (s *Server) adminConn(nc *net.UnixConn, slot *ownersock.Slot) {
	defer nc.Close()
	lines := ownersock.NewLineDeadline(nc, s.limits.AdminLineTimeout, s.limits.AdminLineTimeout)
	rd := ndjson.NewReader(lines, maxAdminLineBytes)
	for {
		line, err := rd.Next()
		var resp AdminResponse
		last := false
		var fe *ndjson.FrameError
		var te *ownersock.LineTimeoutError
		switch {
		case err == nil && !slot.Hold(), err != nil && slot.Evicted():
			return // evictAdmin told the client and closed the connection
		case errors.As(err, &te):
			s.admins.Warn("line_timeout", slot.PID(), "connection flood: admin connections closed for not sending a request in time")
			resp.Error = protocol.Retryable(CodeLineTimeout, "%s", te.Error()).With("timeoutMs", te.Limit.Milliseconds())
			last = true
		case errors.As(err, &fe):
			resp.Error = protocol.Errorf(CodeInvalidRequest, "request line refused (%s)", fe.Code)
		case err != nil:
			return
		default:
			if req, e := DecodeAdminRequest(line); e != nil {
				resp.Error = e
			} else if data, e := s.handleAdmin(req); e != nil {
				// Not resp.Data, resp.Error = …: a handler's typed nil data would be a non-nil
				// interface and answer a refusal with "data":null beside its error.
				resp.Error = e
			} else {
				resp.Data = data
			}
		}
		resp.OK = resp.Error == nil
		b, merr := ndjson.Marshal(&resp)
		if merr != nil {
			b, _ = ndjson.Marshal(&AdminResponse{Error: protocol.Errorf("internal_error", "response is not serializable")})
		}
		timeout := writeTimeout
		if last {
			timeout = time.Second // a refused connection is told at once or not at all
		}
		_ = nc.SetWriteDeadline(time.Now().Add(timeout))
		_, werr := nc.Write(b)
		if werr != nil || last {
			return
		}
		// The next deadline starts before the slot is idle again: an eviction from then on
		// is not undone by it.
		lines.Restart()
		if err == nil {
			slot.Unhold()
		}
	}
}

// evictAdmin tells an idle admin connection that it makes room for another, and closes it.
// It runs on the accept goroutine, so the answer gets one write attempt that does not wait;
// the connection is idle, so nothing else is writing to it.
func (s *Server) evictAdmin(nc *net.UnixConn) {
	b, err := ndjson.Marshal(&AdminResponse{Error: protocol.Retryable(CodeConnectionEvicted,
		"idle admin connection closed to admit another; reconnect to continue").
		With("maxAdminConnections", s.limits.MaxAdmin).With("maxConnectionsPerPeer", s.admins.PerPeer())})
	if w, werr := trywrite.New(nc); err == nil && werr == nil {
		_, _ = w.Write(b)
	}
	_ = nc.Close()
}

// evictUnbound closes an unbound serving connection to make room for another; before bind
// nothing is written.
func evictUnbound(nc *net.UnixConn) { _ = nc.Close() }

// errEvicted marks a bind line read by a connection the pool had just evicted.
var errEvicted = errors.New("connection evicted")

func (s *Server) handleAdmin(r *AdminRequest) (any, *protocol.Error) {
	switch r.Op {
	case OpGrant:
		return s.Grant(r)
	case OpGrants:
		return map[string]any{"grants": s.Grants()}, nil
	case OpRevokeGrant:
		return s.RevokeGrant(*r.GrantID)
	}
	return nil, protocol.Errorf(CodeInvalidRequest, "unknown op")
}

// Grant mints a grant and returns its descriptor, the only value that ever carries the handle.
func (s *Server) Grant(r *AdminRequest) (json.RawMessage, *protocol.Error) {
	d, h, e := s.mint(r)
	if e != nil {
		return nil, e
	}
	l := d.Limits
	root, err := fsops.OpenOptions(*r.Root, fsops.Options{MaxResponseBytes: dataBudget(d, l)})
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, protocol.Errorf(CodeRootInvalid, "root is not a directory that can be opened: %v", err)
	}
	id := newGrantID()
	if r.GrantID != nil {
		id = *r.GrantID
	}
	g := &grant{
		id: id, handle: h, secret: []byte(d.Binding.CapabilityHandle), root: root,
		identity: tooladapter.Identity{AdapterID: d.AdapterID, AdapterVersion: d.AdapterVersion,
			HostInstanceID: d.Binding.HostInstanceID, SessionID: d.Binding.SessionID, Generation: d.Binding.Generation},
		ops: d.Operations, limits: l, created: time.Now(),
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		root.Close()
		return nil, protocol.Errorf(CodeServerClosing, "airlock-fs is shutting down")
	case s.grants[g.id] != nil:
		s.mu.Unlock()
		root.Close()
		return nil, protocol.Errorf(CodeGrantExists, "a live grant has this grantId")
	case len(s.grants) >= MaxGrants:
		s.mu.Unlock()
		root.Close()
		return nil, protocol.Errorf(CodeGrantCapacity, "airlock-fs holds %d grants already; revoke some", MaxGrants)
	}
	g.idem = s.memory(scopeOf(g), l, time.Now())
	s.grants[g.id] = g
	s.mu.Unlock()
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, protocol.Errorf(CodeInvalidRequest, "descriptor is not serializable")
	}
	s.log.Info("grant created", "grant", g.id, "root", root.Name(), "host", g.identity.HostInstanceID,
		"session", g.identity.SessionID, "generation", g.identity.Generation, "operations", g.ops)
	return raw, nil
}

// dataBudget is the fsops response budget of a grant: maxResponseBytes less the largest
// result frame around the data (longest request id and idempotency key).
func dataBudget(d *descriptor, l tooladapter.Limits) int {
	data := json.RawMessage(`{"matches":[],"truncated":false}`)
	f := &tooladapter.Frame{Kind: tooladapter.KindResult, Identity: tooladapter.Identity{
		AdapterID: d.AdapterID, AdapterVersion: d.AdapterVersion, HostInstanceID: d.Binding.HostInstanceID,
		SessionID: d.Binding.SessionID, Generation: d.Binding.Generation},
		RequestID: string(bytes.Repeat([]byte("r"), tooladapter.MaxRequestIDLen)), IdempotencyKey: string(bytes.Repeat([]byte("k"), tooladapter.MaxIdempotencyKeyLen)),
		Operation: tooladapter.OpSearch, OK: true, Data: data}
	b, e := tooladapter.EncodeFrame(f, 0)
	if e != nil {
		return 1
	}
	return max(1, int(l.MaxResponseBytes)-(len(b)-len(data)))
}

// Grants lists the live grants, without handles.
func (s *Server) Grants() []GrantInfo {
	s.mu.Lock()
	gs := make([]*grant, 0, len(s.grants))
	for _, g := range s.grants {
		gs = append(gs, g)
	}
	s.mu.Unlock()
	out := make([]GrantInfo, 0, len(gs))
	for _, g := range gs {
		out = append(out, g.info())
	}
	slices.SortFunc(out, func(a, b GrantInfo) int {
		return cmp.Or(strings.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.GrantID, b.GrantID))
	})
	return out
}

// RevokeGrant ends a grant: its connection is closed and its root released.
func (s *Server) RevokeGrant(id string) (map[string]any, *protocol.Error) {
	s.mu.Lock()
	g := s.grants[id]
	delete(s.grants, id)
	if g != nil {
		if g.idem.grants--; g.idem.grants == 0 {
			g.idem.dropReads()
		}
	}
	s.mu.Unlock()
	if g == nil {
		return nil, protocol.Errorf(CodeGrantNotFound, "no live grant has this id")
	}
	g.mu.Lock()
	connected := g.conn != nil
	g.mu.Unlock()
	s.endGrant(g)
	s.wg.Add(1)
	go func() {
		// Root.Close waits for operations in flight, which the cancellation is ending.
		defer s.wg.Done()
		g.root.Close()
	}()
	s.log.Info("grant revoked", "grant", g.id, "wasConnected", connected)
	return map[string]any{"grantId": id, "wasConnected": connected}, nil
}
