package bus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/busport"
)

// Bounds of a connection.
const (
	// connectTimeout bounds dialling a server and its handshake.
	connectTimeout = 5 * time.Second
	// drainTimeout bounds Close's drain: handlers still running after it are abandoned to
	// their own deadlines and the connection closes anyway.
	drainTimeout = 10 * time.Second
	// pendingMessages and pendingBytes bound what one Serve subscription buffers while its
	// handlers are busy; past them the server drops messages for it and their callers time
	// out.
	pendingMessages = 1024
	pendingBytes    = 8 << 20
	// queueGroup makes a subject served by several subscriptions (one host's old and new
	// connection) deliver each request once.
	queueGroup = "airlock"
	// rearmAfter is how long after a request arrived its answer is sent with a re-arm first
	// (Conn.respondMsg).
	rearmAfter = time.Second
)

// RearmToken ends the subject, in a connection's own inbox, of the messages it sends itself
// to be allowed to answer a request again (Conn.respondMsg).
const RearmToken = "rearm"

// DialConfig configures a connection.
type DialConfig struct {
	// Server, when set, connects in process to that embedded server; URL is then ignored.
	Server *Server
	// URL is a server's client URL (nats://host:port), such as another daemon's ClientURL.
	URL string
	// Name names the connection on the server (a host id, for monitoring).
	Name string
	// InboxPrefix prefixes this connection's reply subjects; empty means _INBOX. A prefix
	// per host lets broker permissions confine each host's replies to it.
	InboxPrefix string
	// MaxPayload bounds one payload, reply or value; zero means DefaultMaxPayload. The
	// server's own limit applies when smaller.
	MaxPayload int
	// Replicas is how many copies of a bucket this connection creates keeps; zero means 1.
	Replicas int
	// Nkey, when set, authenticates the connection as that nkey user (Fabric.DialConfig).
	Nkey nkeys.KeyPair
	// TLS, when set, is required of a URL connection and verifies the server with it.
	TLS *tls.Config
	// JetStreamDomain, when set, reaches JetStream under that domain (a leaf node's hosts
	// use their hub's).
	JetStreamDomain string
	// Pinned keeps a URL connection on URL: it reconnects there and never to the other
	// nodes the cluster advertises. Unpinned, a connection fails over to another node.
	Pinned bool
	// Reconnected, when set, is called each time the connection is up again after it lost
	// its server, once its subscriptions are restored there. It runs on the connection's
	// callback goroutine and must not block.
	Reconnected func()
}

// Conn is a connection to a NATS server implementing busport.Conn.
type Conn struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	maxPayload int
	replicas   int
	// rearm is the subject in this connection's inbox that it sends itself a request's
	// reply subject on, before a late answer; rearmAfter is how late (tests change it).
	rearm      string
	rearmAfter time.Duration
	closed     chan struct{}
	closeOnce  sync.Once
	refusals   atomic.Uint64

	lostMu sync.Mutex
	lost   chan struct{} // closed while the connection is down (Lost)

	mu   sync.Mutex // guards subs
	subs map[busport.Subscription]struct{}

	// replies routes the replies of StartRequestMsg: one subscription to a private inbox
	// prefix, made on first use, and the requests waiting, by token.
	replyMu  sync.Mutex // guards the fields below
	replySub *nats.Subscription
	replyTo  string // the inbox prefix, with its trailing dot
	nextTok  uint64
	waiting  map[string]*waitingReply
}

// waitingReply is a request of StartRequestMsg waiting for its reply.
type waitingReply struct {
	done func(busport.Msg, error)
	stop func() bool // stops the context's AfterFunc
}

var _ busport.Conn = (*Conn)(nil)

// Dial connects as cfg says.
func Dial(cfg DialConfig) (*Conn, error) {
	c := &Conn{closed: make(chan struct{}), lost: make(chan struct{}), replicas: max(cfg.Replicas, 1), subs: make(map[busport.Subscription]struct{})}
	c.maxPayload = cfg.MaxPayload
	if c.maxPayload == 0 {
		c.maxPayload = DefaultMaxPayload
	}
	if c.maxPayload < 1024 {
		return nil, fmt.Errorf("%w: max payload %d below 1 KiB", ErrConfig, c.maxPayload)
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(connectTimeout),
		nats.DrainTimeout(drainTimeout),
		nats.MaxReconnects(-1),
		nats.ClosedHandler(func(*nats.Conn) {
			c.setLost(true)
			close(c.closed)
		}),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { c.setLost(true) }),
		nats.ReconnectHandler(func(*nats.Conn) {
			c.setLost(false)
			if cfg.Reconnected != nil {
				cfg.Reconnected()
			}
		}),
		// Errors of asynchronous work (a slow subscription dropping messages, a message the
		// broker refused) surface as timeouts of the callers concerned; the default handler
		// would print them. Refusals are counted for status and tests.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				c.refusals.Add(1)
			}
		}),
	}
	if cfg.Nkey != nil {
		kp := cfg.Nkey
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("%w: nkey: %v", ErrConfig, err)
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	if cfg.Pinned {
		opts = append(opts, nats.IgnoreDiscoveredServers())
	}
	if cfg.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	url := cfg.URL
	if cfg.Server != nil {
		opts = append(opts, nats.InProcessServer(cfg.Server.ns))
		url = ""
	} else if url == "" {
		return nil, fmt.Errorf("%w: neither a server nor a URL", ErrConfig)
	}
	nc, err := connect(cfg.Server, url, opts)
	if err != nil {
		return nil, fmt.Errorf("bus: connect: %w", err)
	}
	if limit := int(nc.MaxPayload()); limit < c.maxPayload {
		c.maxPayload = limit
	}
	var js jetstream.JetStream
	if cfg.JetStreamDomain != "" {
		js, err = jetstream.NewWithDomain(nc, cfg.JetStreamDomain)
	} else {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	c.nc, c.js = nc, js
	prefix := cfg.InboxPrefix
	if prefix == "" {
		prefix = nats.InboxPrefix[:len(nats.InboxPrefix)-1]
	}
	c.rearm, c.rearmAfter = prefix+"."+RearmToken, rearmAfter
	if _, err := nc.Subscribe(c.rearm, func(*nats.Msg) {}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: subscribe: %w", err)
	}
	return c, nil
}

// connect dials url, or srv in process. An in-process client is created while no reload of
// srv's options (SetUsers) runs: nats-server v2.15.3 reads the options a reload replaces while
// it registers an in-process client, unlocked (the race detector reported it in
// TestRoomsRepairedAfterTheBucketsAreDeleted), so the two are ordered by srv.mu here.
func connect(srv *Server, url string, opts []nats.Option) (*nats.Conn, error) {
	if srv == nil {
		return nats.Connect(url, opts...)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return nats.Connect(url, opts...)
}

// Refusals is how many of this connection's publications and subscriptions the broker has
// refused for want of permission (HostPermissions). A refused request times out.
func (c *Conn) Refusals() uint64 { return c.refusals.Load() }

// Connected reports whether the connection is up: false while it has lost its server and
// tries to reconnect, and once it is closed. A host whose connection is down reaches no other
// host.
func (c *Conn) Connected() bool { return c.nc.IsConnected() }

// Lost implements busport.Conn: the channel is closed when the connection loses its server
// or closes, already closed while it is down, and a new one is handed out once it is up
// again.
func (c *Conn) Lost() <-chan struct{} {
	c.lostMu.Lock()
	defer c.lostMu.Unlock()
	return c.lost
}

// setLost records that the connection went down (closing Lost's channel) or came back up
// (a new channel).
func (c *Conn) setLost(down bool) {
	c.lostMu.Lock()
	defer c.lostMu.Unlock()
	select {
	case <-c.lost:
		if !down {
			c.lost = make(chan struct{})
		}
	default:
		if down {
			close(c.lost)
		}
	}
}

// MaxPayload implements busport.Conn.
func (c *Conn) MaxPayload() int { return c.maxPayload }

// Request implements busport.Conn.
func (c *Conn) Request(ctx context.Context, subject string, payload []byte) ([]byte, error) {
	if len(payload) > c.maxPayload {
		return nil, fmt.Errorf("request of %d bytes: %w", len(payload), busport.ErrTooLarge)
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil, fmt.Errorf("bus: request without a deadline")
	}
	m, err := c.nc.RequestWithContext(ctx, subject, payload)
	if err != nil {
		return nil, mapError(err)
	}
	if len(m.Data) > c.maxPayload {
		return nil, fmt.Errorf("reply of %d bytes: %w", len(m.Data), busport.ErrTooLarge)
	}
	return m.Data, nil
}

// RequestMsg implements busport.Conn.
func (c *Conn) RequestMsg(ctx context.Context, subject string, m busport.Msg) (busport.Msg, error) {
	if n := msgBytes(m.Header, m.Data); n > c.maxPayload {
		return busport.Msg{}, fmt.Errorf("request of %d bytes: %w", n, busport.ErrTooLarge)
	}
	if _, ok := ctx.Deadline(); !ok {
		return busport.Msg{}, fmt.Errorf("bus: request without a deadline")
	}
	r, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Header: nats.Header(m.Header), Data: m.Data})
	if err != nil {
		return busport.Msg{}, mapError(err)
	}
	if n := msgBytes(r.Header, r.Data); n > c.maxPayload {
		return busport.Msg{}, fmt.Errorf("reply of %d bytes: %w", n, busport.ErrTooLarge)
	}
	return busport.Msg{Header: r.Header, Data: r.Data}, nil
}

// StartRequestMsg implements busport.Conn. The reply comes to a subject under this
// connection's own inbox prefix, as RequestMsg's does; the request ends at ctx's end.
func (c *Conn) StartRequestMsg(ctx context.Context, subject string, m busport.Msg, done func(busport.Msg, error)) {
	if n := msgBytes(m.Header, m.Data); n > c.maxPayload {
		done(busport.Msg{}, fmt.Errorf("request of %d bytes: %w", n, busport.ErrTooLarge))
		return
	}
	if _, ok := ctx.Deadline(); !ok {
		done(busport.Msg{}, fmt.Errorf("bus: request without a deadline"))
		return
	}
	reply, err := c.await(ctx, done)
	if err != nil {
		done(busport.Msg{}, mapError(err))
		return
	}
	if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: nats.Header(m.Header), Data: m.Data}); err != nil {
		if w := c.takeReply(reply); w != nil {
			w.stop()
			w.done(busport.Msg{}, mapError(err))
		}
	}
}

// await registers a request waiting for its reply and returns its reply subject. The
// request ends with ctx's error when ctx ends first.
func (c *Conn) await(ctx context.Context, done func(busport.Msg, error)) (string, error) {
	c.replyMu.Lock()
	defer c.replyMu.Unlock()
	if c.replySub == nil {
		prefix := c.nc.NewInbox() + "."
		sub, err := c.nc.Subscribe(prefix+"*", c.onReply)
		if err != nil {
			return "", err
		}
		c.replySub, c.replyTo, c.waiting = sub, prefix, make(map[string]*waitingReply)
	}
	c.nextTok++
	reply := c.replyTo + strconv.FormatUint(c.nextTok, 36)
	w := &waitingReply{done: done}
	c.waiting[reply] = w
	w.stop = context.AfterFunc(ctx, func() {
		if w := c.takeReply(reply); w != nil {
			w.done(busport.Msg{}, mapError(ctx.Err()))
		}
	})
	return reply, nil
}

// takeReply removes and returns the request waiting on reply, nil if it has ended.
func (c *Conn) takeReply(reply string) *waitingReply {
	c.replyMu.Lock()
	defer c.replyMu.Unlock()
	w := c.waiting[reply]
	delete(c.waiting, reply)
	return w
}

// onReply ends the request a reply answers, on the reply subscription's goroutine. A reply
// to a request that has ended is dropped.
func (c *Conn) onReply(m *nats.Msg) {
	w := c.takeReply(m.Subject)
	if w == nil {
		return
	}
	w.stop()
	switch {
	case len(m.Data) == 0 && m.Header.Get("Status") == "503":
		w.done(busport.Msg{}, fmt.Errorf("%w: %v", busport.ErrNoResponders, nats.ErrNoResponders))
	case msgBytes(m.Header, m.Data) > c.maxPayload:
		w.done(busport.Msg{}, fmt.Errorf("reply of %d bytes: %w", msgBytes(m.Header, m.Data), busport.ErrTooLarge))
	default:
		w.done(busport.Msg{Header: m.Header, Data: m.Data}, nil)
	}
}

// msgBytes is the size of a message's header block and data as the wire carries them
// ("NATS/1.0\r\n", a "name: value\r\n" line per value, a blank line).
func msgBytes(h map[string][]string, data []byte) int {
	n := len(data)
	if len(h) > 0 {
		n += len("NATS/1.0\r\n\r\n")
		for k, vs := range h {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
	}
	return n
}

// mapError maps nats.go's errors onto busport's.
func mapError(err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		// A JetStream publish that found no responders, after nats.go's own short retries,
		// comes back as ErrNoStreamResponse: no server serves the stream's subject now (in
		// a cluster, while the stream elects a leader).
		return fmt.Errorf("%w: %v", busport.ErrNoResponders, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%w: %v", busport.ErrTimeout, err)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDrainTimeout):
		return fmt.Errorf("%w: %v", busport.ErrClosed, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %v", busport.ErrTooLarge, err)
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: %v", busport.ErrNotFound, err)
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return fmt.Errorf("%w: %v", busport.ErrConflict, err)
	}
	return fmt.Errorf("bus: %w", err)
}

// Serve implements busport.Conn.
func (c *Conn) Serve(subject string, limit int, h busport.Handler) (busport.Subscription, error) {
	return c.serve(subject, limit, &serving{h: h})
}

// ServeMsg implements busport.Conn.
func (c *Conn) ServeMsg(subject string, limit int, h busport.MsgHandler) (busport.Subscription, error) {
	return c.serve(subject, limit, &serving{mh: h})
}

func (c *Conn) serve(subject string, limit int, s *serving) (busport.Subscription, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: serve limit %d", ErrConfig, limit)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.ctx, s.cancel, s.slots, s.maxPayload, s.conn = ctx, cancel, make(chan struct{}, limit), c.maxPayload, c
	sub, err := c.nc.QueueSubscribe(subject, queueGroup, s.deliver)
	if err != nil {
		cancel()
		return nil, mapError(err)
	}
	if err := sub.SetPendingLimits(pendingMessages, pendingBytes); err != nil {
		_ = sub.Unsubscribe()
		cancel()
		return nil, mapError(err)
	}
	// Once Serve returns the server routes the subject here: a request sent after it does
	// not find "no responders".
	if err := c.nc.FlushTimeout(connectTimeout); err != nil {
		_ = sub.Unsubscribe()
		cancel()
		return nil, mapError(err)
	}
	s.sub = sub
	if !c.track(s) {
		_ = s.Stop()
		return nil, fmt.Errorf("serve: %w", busport.ErrClosed)
	}
	return s, nil
}

// track records a running subscription for Close; false if the connection is closing.
func (c *Conn) track(s busport.Subscription) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs == nil {
		return false
	}
	c.subs[s] = struct{}{}
	return true
}

// untrack forgets a stopped subscription.
func (c *Conn) untrack(s busport.Subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, s)
}

// serving is one Serve subscription. Its handlers run on goroutines it owns; Stop waits for
// them.
type serving struct {
	h          busport.Handler    // one of h and mh is set
	mh         busport.MsgHandler // for ServeMsg
	ctx        context.Context
	cancel     context.CancelFunc
	slots      chan struct{}
	maxPayload int
	sub        *nats.Subscription
	conn       *Conn

	mu      sync.Mutex // guards stopped and wg.Add against Stop's Wait
	stopped bool
	wg      sync.WaitGroup
	once    sync.Once
}

// deliver runs on the subscription's delivery goroutine, one message at a time.
func (s *serving) deliver(m *nats.Msg) {
	if msgBytes(m.Header, m.Data) > s.maxPayload || m.Reply == "" {
		return
	}
	at := time.Now()
	select {
	case s.slots <- struct{}{}:
	default:
		if s.mh != nil {
			s.conn.respondMsg(m, at, s.mh.OverloadedMsg(m.Subject, busport.Msg{Header: m.Header, Data: m.Data}), s.maxPayload)
		} else {
			s.conn.respondMsg(m, at, busport.Msg{Data: s.h.Overloaded(m.Subject, m.Data)}, s.maxPayload)
		}
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.slots
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	if s.mh != nil {
		// The handler answers when it can, here or from a goroutine that ends the request.
		var once sync.Once
		s.mh.ServeMsg(s.ctx, m.Subject, busport.Msg{Header: m.Header, Data: m.Data}, func(r busport.Msg) {
			once.Do(func() {
				s.conn.respondMsg(m, at, r, s.maxPayload)
				<-s.slots
				s.wg.Done()
			})
		})
		return
	}
	go func() {
		defer s.wg.Done()
		defer func() { <-s.slots }()
		s.conn.respondMsg(m, at, busport.Msg{Data: s.h.Serve(s.ctx, m.Subject, m.Data)}, s.maxPayload)
	}()
}

// respondMsg sends the reply to request m, which arrived at at, within the bound; a larger one
// is not sent, and the caller times out, and a reply with neither header nor data is not sent.
//
// The broker lets a host answer a request once, within responseTTL, by recording the request's
// reply subject when it delivers the request; a reload of the server's users (a host that
// created, joined or left a room, an admission) forgets every such record of every
// connection, and a later answer is refused and lost. A call waiting for the provider's
// operator answers up to a minute later, so a room change of the provider's host meanwhile
// lost its result while the action ran. An answer later than rearmAfter is therefore preceded
// by a message that this connection sends itself, on its own inbox, with the request's reply
// subject: delivering it records the reply subject again, and the answer, which follows on
// the same connection, is allowed.
func (c *Conn) respondMsg(m *nats.Msg, at time.Time, reply busport.Msg, maxPayload int) {
	if (reply.Header == nil && reply.Data == nil) || msgBytes(reply.Header, reply.Data) > maxPayload {
		return
	}
	if time.Since(at) >= c.rearmAfter {
		_ = c.nc.PublishMsg(&nats.Msg{Subject: c.rearm, Reply: m.Reply})
	}
	_ = m.RespondMsg(&nats.Msg{Header: nats.Header(reply.Header), Data: reply.Data})
}

// Stop implements busport.Subscription: no new deliveries, running handlers' ctx cancelled,
// and it returns once they have returned.
func (s *serving) Stop() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		if e := s.sub.Unsubscribe(); e != nil && !errors.Is(e, nats.ErrConnectionClosed) && !errors.Is(e, nats.ErrBadSubscription) {
			err = mapError(e)
		} else if s.conn != nil && e == nil && s.conn.nc.IsConnected() {
			// Once Stop returns the server no longer routes the subject here, so a request
			// sent after it finds no responders instead of timing out. A connection that
			// lost its server has no route to withdraw: waiting connectTimeout for a flush
			// it cannot make would only hold its owner's stop.
			_ = s.conn.nc.FlushTimeout(connectTimeout)
		}
		s.cancel()
		s.wg.Wait()
		if s.conn != nil {
			s.conn.untrack(s)
		}
	})
	return err
}

// Close stops every Serve and Watch of the connection (running handlers see their ctx
// cancelled and their replies are still sent), then drains it: published messages are flushed
// within drainTimeout and the connection closes. A connection that has lost its server (it
// is reconnecting) is closed as it is: what it buffered has nowhere to go, and a drain of it
// would fail (nats: connection reconnecting). It is idempotent and returns once the
// connection is closed.
func (c *Conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		subs := c.subs
		c.subs = nil
		c.mu.Unlock()
		for s := range subs {
			_ = s.Stop()
		}
		if !c.nc.IsConnected() {
			c.nc.Close()
		} else if e := c.nc.Drain(); e != nil && !errors.Is(e, nats.ErrConnectionClosed) {
			c.nc.Close()
			err = mapError(e)
		}
		<-c.closed
	})
	return err
}
