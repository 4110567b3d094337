package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/roomhost"
	"github.com/airlockhq/airlock/internal/session"
	"github.com/airlockhq/airlock/internal/web"
)

// Limits bound what one client can make the server hold.
type Limits struct {
	MaxConnections int // concurrent client connections
	// MaxConnectionsPerPeer bounds the connections of one peer process (SO_PEERCRED pid); it is
	// capped at MaxConnections.
	MaxConnectionsPerPeer int
	MaxInFlight           int // commands in flight on one connection
	MaxLineBytes          int // one inbound line, without its LF
	MaxEventBytes         int // one outbound event, LF included
	MaxResponseBytes      int // one outbound response, LF included
	MaxOutboundBytes      int // bytes queued for one connection
	// FirstLineTimeout bounds the wait for a connection's first complete command line, from
	// accept; LineTimeout bounds any line from its first byte to its LF.
	FirstLineTimeout time.Duration
	LineTimeout      time.Duration
	// MaxAttachments bounds the session attachments of all connections, 0 meaning half of
	// MaxConnections; it must stay below MaxConnections, since an attached connection is busy
	// and the pool never evicts it. MaxAttachmentsPerSession bounds one session's. At a bound
	// an attachment of the process holding the most makes room (session.Manager.Attach).
	MaxAttachments           int
	MaxAttachmentsPerSession int
	// ControlConnections is the control band beyond MaxConnections (ownersock.Pool), and
	// ControlConnectionsPerPeer one process's share of it; 0 connections disables it.
	ControlConnections        int
	ControlConnectionsPerPeer int
}

// DefaultLimits are the limits of the original protocol implementation, and the flood limits
// of issue 16: a client writes its command as soon as it connects, and a line of a MiB takes
// milliseconds over a local socket, so seconds are generous; a quarter of the connections per
// process leaves room for three others however one behaves.
//
// The attachment bounds and the control band are issue 24.3's: several processes, each
// within its share, could attach on every connection. Eight attachments per session are
// more than a session has watchers (a harness, airlock session attach, an MCP bridge), and
// half the connections attached leaves the other half for commands. The control band is the
// one path that needs no regular connection at all: eight connections, two per process, so
// that even four processes that take it cannot close it to a fifth.
var DefaultLimits = Limits{
	MaxConnections:        64,
	MaxConnectionsPerPeer: 16,
	MaxInFlight:           64,
	MaxLineBytes:          1 << 20,
	MaxEventBytes:         1 << 20,
	MaxResponseBytes:      1 << 20,
	MaxOutboundBytes:      4 << 20,
	FirstLineTimeout:      5 * time.Second,
	LineTimeout:           10 * time.Second,

	MaxAttachmentsPerSession:  8,
	ControlConnections:        8,
	ControlConnectionsPerPeer: 2,
}

// Attachments returns the effective attachment bounds: in total (MaxAttachments, or half of
// MaxConnections, at least 1) and per session (capped at the total).
func (l Limits) Attachments() (total, perSession int) {
	total = l.MaxAttachments
	if total <= 0 {
		total = max(1, l.MaxConnections/2)
	}
	return total, min(l.MaxAttachmentsPerSession, total)
}

// minRecordBytes is the smallest response or event limit accepted. It is what the records that
// replace an oversized one need in the worst case: a session id of 256 four-byte characters
// (1 KiB), a request id of 128 (512 bytes) and the rest of the envelope. With it, an
// outbound_record_too_large answer and an eventDropped event always fit.
const minRecordBytes = 2048

// Validate checks that the limits are usable together.
func (l Limits) Validate() error {
	switch {
	case l.MaxConnections < 1:
		return errors.New("max connections must be at least 1")
	case l.MaxConnectionsPerPeer < 1:
		return errors.New("max connections per peer must be at least 1")
	case l.MaxAttachments < 0 || l.MaxAttachmentsPerSession < 1:
		return errors.New("max attachments must not be negative, and max attachments per session must be at least 1")
	case l.MaxAttachments > 0 && l.MaxAttachments >= l.MaxConnections && l.MaxConnections > 1:
		return errors.New("max attachments must be below max connections, so that attachments never hold every connection")
	case l.ControlConnections < 0 || l.ControlConnections > 0 && l.ControlConnectionsPerPeer < 1:
		return errors.New("control connections must not be negative, and their per-peer share must be at least 1")
	case l.FirstLineTimeout <= 0 || l.LineTimeout <= 0:
		return errors.New("the first-line and line timeouts must be positive")
	case l.MaxInFlight < 1:
		return errors.New("max in-flight requests per connection must be at least 1")
	case l.MaxLineBytes < 1024:
		return errors.New("max line bytes must be at least 1024")
	case l.MaxEventBytes < minRecordBytes || l.MaxResponseBytes < minRecordBytes:
		return fmt.Errorf("max event and response bytes must be at least %d", minRecordBytes)
	case l.MaxEventBytes > l.MaxOutboundBytes || l.MaxResponseBytes > l.MaxOutboundBytes:
		return errors.New("max event and response bytes must not exceed max outbound bytes per connection")
	}
	return nil
}

// Server accepts owner connections and dispatches their commands.
type Server struct {
	hostID   string
	ownerUID int
	limits   Limits
	wire     protocol.Limits // limits as handshake and status report them
	log      *slog.Logger
	sessions *session.Manager
	adapters *adapterHost
	// gate is the one gate every effect passes (gate.go).
	gate *gate.Gate
	// audit is the audit journal (audit.go); nil without Config.Audit. Set before the
	// socket accepts and never changed.
	audit *auditLog
	// approvals is the one approval queue, the gate's approver (approvals.go); onApproval
	// and approvalFeed are told of its events.
	approvals    *approval.Queue
	onApproval   func(approval.Event)
	approvalFeed approvalFeed
	// rooms is the room service once it runs (nil before, and without one).
	rooms atomic.Pointer[roomhost.Service]
	// node is the fabric node while the room service starts (waiting for the fabric to
	// form), so that fabricStatus answers before the service runs; nil otherwise.
	node atomic.Pointer[bus.Server]
	// roomsFailed is why the configured room service did not start (nil while it starts or
	// runs, and without one); the room operations' refusals say it.
	roomsFailed atomic.Pointer[error]
	// withdrawMu orders withdrawals against the room service's installation in rooms;
	// withdrawnEarly are the capabilities withdrawn while a configured service was not
	// installed yet (roomsPending), which startRooms withdraws from it before installing it.
	withdrawMu     sync.Mutex
	roomsPending   bool
	withdrawnEarly []string
	// web is the operator's web page while it serves (nil without one).
	web     atomic.Pointer[web.Server]
	host    func(v2 bool) protocol.HostSnapshot
	hook    func(*protocol.Command)
	version string

	ctx    context.Context // cancelled at shutdown: handlers stop waiting
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loop and connections

	pool *ownersock.Pool // admission: the connection limit, the per-peer share, eviction

	mu    sync.Mutex
	conns map[*conn]struct{}

	fsys *managedFS // the airlock-fs airlockd runs (managedfs.go)
	// proposals are the agents' adapter proposals (proposals.go).
	proposals *proposals
	owned     owners // connection-scoped generations by connection (lifetime.go)

	metricsMu sync.Mutex
	metrics   map[string]uint64

	// prom are the Prometheus collectors (metrics.go); nil without Config.Metrics. Set
	// before the socket accepts, never changed.
	prom *metrics.Metrics
}

// serve accepts connections until the listener closes. A failed accept is retried after a
// pause rather than ending the loop: the owner socket outlives a descriptor shortage
// (TestOwnerSocketSurvivesDescriptorExhaustion).
func (s *Server) serve(ln *ownersock.Socket) {
	defer s.wg.Done()
	var pause time.Duration
	for {
		nc, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = ownersock.AcceptRetry(pause)
			s.log.Error("accept failed", "err", err, "retryIn", pause)
			select {
			case <-time.After(pause):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		pause = 0
		s.admit(nc)
	}
}

// admit checks a new connection's peer, then admits it to the pool and serves it. At capacity
// the pool makes room by evicting an idle connection (no command in flight, no attachment):
// one of the same peer when it holds its share, else one of the peer holding the most. When
// every connection is busy, the new one goes to the control band, where it may run only the
// control operations (protocol.ControlOperation); when the band is busy too, or the peer
// holds its share, it is refused with connection_capacity.
//
// The band, rather than a second socket, is how probe, status, drain and close always get
// through (issue 24.3): every client already knows the one socket, the band costs nothing
// while the host is not saturated, and a band connection can never become busy for long
// (it cannot attach, nor call an adapter), so that its own bound and per-peer share keep any
// set of processes from holding it.
func (s *Server) admit(nc *net.UnixConn) {
	cred, err := ownersock.PeerCred(nc)
	if err != nil || cred.UID != s.ownerUID {
		s.log.Warn("refused connection from another user", "peerUid", cred.UID, "err", err)
		s.count("connectionsRefusedPeer")
		nc.Close()
		return
	}
	c := newConn(s, nc, s.log)
	slot, evicted, err := s.pool.Admit(cred.PID, c.evict)
	if err != nil {
		c.cancel(nil)
		s.count("connectionsRefusedCapacity")
		s.pool.Warn("refused", cred.PID, "connection refused: every connection is busy")
		s.refuseCapacity(nc, err.(*ownersock.CapacityError))
		return
	}
	if evicted {
		s.pool.Warn("evicted", cred.PID, "connection flood: idle connections evicted to admit new ones")
	}
	if slot.Control() {
		s.count("connectionsAcceptedControl")
		s.pool.Warn("control", cred.PID, "connection flood: every connection is busy; a connection admitted to the control band")
	}
	c.slot = slot
	c.peer = gate.NewPeer(cred.PID)
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.count("connectionsAccepted")
	go func() {
		defer s.wg.Done()
		c.serve()
		slot.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
}

// refuseCapacity tells a client over the connection limit or its process's share why, then
// closes.
func (s *Server) refuseCapacity(nc *net.UnixConn, ce *ownersock.CapacityError) {
	e := protocol.Retryable(protocol.CodeConnectionCapacity, "the host serves at most %d connections, all busy", s.limits.MaxConnections)
	switch {
	case ce.Control && ce.PerPeer:
		e = protocol.Retryable(protocol.CodeConnectionCapacity, "every connection is busy, and this process holds %d busy control connections, its share", ce.Limit).
			With("controlConnectionsPerPeer", ce.Limit)
	case ce.Control:
		e = protocol.Retryable(protocol.CodeConnectionCapacity, "the host serves at most %d connections and %d control connections, all busy", s.limits.MaxConnections, ce.Limit).
			With("controlConnections", ce.Limit)
	case ce.PerPeer:
		e = protocol.Retryable(protocol.CodeConnectionCapacity, "this process holds %d busy connections, its share", ce.Limit).
			With("maxConnectionsPerPeer", ce.Limit)
	}
	line := s.encodeResponse(&protocol.Response{
		ProtocolVersion: protocol.Version1,
		Kind:            protocol.KindResponse,
		RequestID:       "invalid-" + newID(),
		HostInstanceID:  s.hostID,
		Error:           e.With("maxConnections", s.limits.MaxConnections),
	})
	nc.SetWriteDeadline(deadlineSoon())
	nc.Write(line)
	nc.Close()
}

// connections returns the number of open client connections.
func (s *Server) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// stopConns makes every connection stop reading and answer what it has in flight.
func (s *Server) stopConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.stop()
	}
}

// killConns drops every connection at once.
func (s *Server) killConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.mu.Lock()
		c.failLocked()
		c.mu.Unlock()
	}
}

func (s *Server) count(name string) {
	s.metricsMu.Lock()
	s.metrics[name]++
	s.metricsMu.Unlock()
}

func (s *Server) metricsSnapshot(into map[string]uint64) {
	s.metricsMu.Lock()
	defer s.metricsMu.Unlock()
	for k, v := range s.metrics {
		into[k] = v
	}
}

// encodeResponse serializes a response within the response limit. A response that does not fit
// becomes outbound_record_too_large for the same request; one that cannot be serialized
// becomes outbound_not_serializable.
func (s *Server) encodeResponse(r *protocol.Response) []byte {
	line, _ := s.encodeReply(r)
	return line
}

// encodeReply is encodeResponse for a line the caller hands back with ndjson.PutBuffer once
// it is written, when pooled is true: a large tool result (a whole file read) is written into
// a pooled buffer instead of a fresh allocation of several MiB.
func (s *Server) encodeReply(r *protocol.Response) (line []byte, pooled bool) {
	var buf []byte
	if t, isTool := r.Data.(*protocol.CompactToolResult); isTool && t != nil {
		// A result is mostly its data: one buffer of about its size holds the line.
		size := 256 + len(r.RequestID) + len(r.HostInstanceID) + len(r.SessionID) + len(t.ToolCallID) + len(t.Operation) + len(t.Data)
		buf, pooled = ndjson.GetBuffer(size), size >= ndjson.MinPooledBytes
	} else {
		buf = make([]byte, 0, 2048)
	}
	line, ok := r.AppendLine(buf)
	var err error
	if !ok {
		if pooled {
			ndjson.PutBuffer(line)
			pooled = false
		}
		line, err = ndjson.Marshal(r)
	}
	if err != nil {
		s.log.Error("response not serializable", "operation", r.RequestID, "err", err)
		line = s.replaceResponse(r, protocol.Errorf(protocol.CodeOutboundNotSerializ, "response could not be serialized"))
	} else if n := len(line); n > s.limits.MaxResponseBytes {
		if pooled {
			ndjson.PutBuffer(line)
			pooled = false
		}
		s.count("responsesTooLarge")
		line = s.replaceResponse(r, protocol.Errorf(protocol.CodeOutboundTooLarge,
			"response of %d bytes exceeds the limit of %d", n, s.limits.MaxResponseBytes).
			With("maxBytes", s.limits.MaxResponseBytes))
	}
	return line, pooled
}

func (s *Server) replaceResponse(r *protocol.Response, e *protocol.Error) []byte {
	line, err := ndjson.Marshal(&protocol.Response{
		ProtocolVersion: r.ProtocolVersion,
		Kind:            protocol.KindResponse,
		RequestID:       r.RequestID,
		HostInstanceID:  r.HostInstanceID,
		SessionID:       r.SessionID,
		Error:           e,
	})
	if err != nil || len(line) > s.limits.MaxResponseBytes {
		return nil
	}
	return line
}

// encodeEvent serializes an event within the event limit. An event that does not fit is
// replaced, at the same sequence, by an eventDropped event naming it.
func (s *Server) encodeEvent(ev *protocol.Event) []byte {
	line, err := ndjson.Marshal(ev)
	if err == nil && len(line) <= s.limits.MaxEventBytes {
		return line
	}
	e := protocol.Errorf(protocol.CodeOutboundTooLarge, "event exceeds the limit of %d bytes", s.limits.MaxEventBytes).
		With("maxBytes", s.limits.MaxEventBytes)
	if err != nil {
		e = protocol.Errorf(protocol.CodeOutboundNotSerializ, "event could not be serialized")
	}
	dropped := *ev
	dropped.Event = protocol.EventEventDropped
	dropped.Data = protocol.EventDroppedData{OriginalEvent: ev.Event, Error: e}
	line, err = ndjson.Marshal(&dropped)
	if err != nil || len(line) > s.limits.MaxEventBytes {
		return nil
	}
	s.count("eventsReplaced")
	return line
}

// newID returns a random RFC 4122 version 4 UUID.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
