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
// Idempotency keys are remembered per grant (see docs/airlock-fs.md).
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
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// adminIdleTimeout closes an admin connection that sends nothing for this long; the CLI sends
// its one request at once.
const adminIdleTimeout = 30 * time.Second

// maxConns bounds the open connections of both sockets: one per grant, and room for binds and
// admin requests in progress.
const maxConns = MaxGrants + 64

// Config configures a Server.
type Config struct {
	Socket      string // serving socket: absolute, canonical, at most 100 bytes
	AdminSocket string // admin socket
	// Version is the build version; AdapterVersion turns it into the adapterVersion.
	Version string
	// Logger receives operator logs: grant ids, roots, sessions, codes; never a handle.
	Logger *slog.Logger
}

// Server is a running airlock-fs.
type Server struct {
	cfg     Config
	log     *slog.Logger
	version string
	uid     int
	serving *ownersock.Socket
	admin   *ownersock.Socket
	wg      sync.WaitGroup

	// mu guards the fields below.
	mu     sync.Mutex
	closed bool
	grants map[string]*grant     // by grant id
	conns  map[net.Conn]struct{} // every accepted connection, closed by Close
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
		grants: make(map[string]*grant), conns: make(map[net.Conn]struct{})}
	var err error
	if s.serving, err = ownersock.Listen(cfg.Socket, s.uid); err != nil {
		return nil, err
	}
	if s.admin, err = ownersock.Listen(cfg.AdminSocket, s.uid); err != nil {
		s.serving.Close()
		return nil, err
	}
	s.wg.Add(2)
	go s.accept(s.serving, s.serveConn)
	go s.accept(s.admin, s.adminConn)
	log.Info("airlock-fs serving", "socket", cfg.Socket, "adminSocket", cfg.AdminSocket, "adapterVersion", s.version)
	return s, nil
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

// accept serves ln until it is closed; each connection runs in its own goroutine.
func (s *Server) accept(ln *ownersock.Socket, handle func(*net.UnixConn)) {
	defer s.wg.Done()
	for {
		nc, err := ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("accept failed", "err", err)
				time.Sleep(10 * time.Millisecond) // EMFILE and friends: do not spin
				continue
			}
			return
		}
		if uid, err := ownersock.PeerUID(nc); err != nil || uid != s.uid {
			s.log.Warn("connection from another user refused", "peerUid", uid)
			nc.Close()
			continue
		}
		s.mu.Lock()
		if s.closed || len(s.conns) >= maxConns {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			handle(nc)
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

// adminConn serves admin requests, one response line per request line.
func (s *Server) adminConn(nc *net.UnixConn) {
	defer nc.Close()
	rd := ndjson.NewReader(nc, maxAdminLineBytes)
	for {
		_ = nc.SetReadDeadline(time.Now().Add(adminIdleTimeout))
		line, err := rd.Next()
		var resp AdminResponse
		if err != nil {
			var fe *ndjson.FrameError
			if !errors.As(err, &fe) {
				return
			}
			resp.Error = protocol.Errorf(CodeInvalidRequest, "request line refused (%s)", fe.Code)
		} else if req, e := DecodeAdminRequest(line); e != nil {
			resp.Error = e
		} else {
			resp.Data, resp.Error = s.handleAdmin(req)
		}
		resp.OK = resp.Error == nil
		b, merr := ndjson.Marshal(&resp)
		if merr != nil {
			b, _ = ndjson.Marshal(&AdminResponse{Error: protocol.Errorf("internal_error", "response is not serializable")})
		}
		_ = nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := nc.Write(b); err != nil {
			return
		}
	}
}

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
	g := &grant{
		id: newGrantID(), handle: h, secret: []byte(d.Binding.CapabilityHandle), root: root,
		identity: tooladapter.Identity{AdapterID: d.AdapterID, AdapterVersion: d.AdapterVersion,
			HostInstanceID: d.Binding.HostInstanceID, SessionID: d.Binding.SessionID, Generation: d.Binding.Generation},
		ops: d.Operations, limits: l, created: time.Now(), idem: newIdemCache(l),
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		root.Close()
		return nil, protocol.Errorf(CodeServerClosing, "airlock-fs is shutting down")
	case len(s.grants) >= MaxGrants:
		s.mu.Unlock()
		root.Close()
		return nil, protocol.Errorf(CodeGrantCapacity, "airlock-fs holds %d grants already; revoke some", MaxGrants)
	}
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
