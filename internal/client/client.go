// Package client speaks the daemon protocol to airlockd over its owner socket. The CLI, the
// tests and the benchmarks use it; it multiplexes concurrent calls on one connection.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/protocol"
)

// MaxLineBytes bounds one line read from the daemon. It is above the daemon's default record
// limits (1 MiB) so that a daemon configured for larger records can still be read.
const MaxLineBytes = 8 << 20

// eventBuffer is how many events wait for the reader of Events before the connection stops
// reading; the daemon's own outbound bound then applies.
const eventBuffer = 256

// noticeWait bounds how long a call whose write failed waits for the reader to reach the end
// of the connection, where the daemon's notice of why it closed it (if any) is: the rest of a
// few lines already in the socket's buffer, read at once.
const noticeWait = time.Second

// ErrClosed is returned by calls on a closed client or after the daemon closed the connection.
var ErrClosed = errors.New("client: connection closed")

// ErrProtocol is wrapped, together with ErrClosed, by the error of a connection the client ended
// because the daemon sent something that is not the protocol: an unframeable line, a line that
// is not JSON, or a response that cannot be decoded. It lets a caller tell a peer that is not an
// airlock daemon from one that went away (airlock probe exits differently for the two).
var ErrProtocol = errors.New("client: daemon broke the protocol")

// Response is a daemon response with its data still raw.
type Response struct {
	ProtocolVersion string          `json:"protocolVersion"`
	Kind            string          `json:"kind"`
	RequestID       string          `json:"requestId"`
	HostInstanceID  string          `json:"hostInstanceId"`
	SessionID       string          `json:"sessionId,omitempty"`
	Sequence        *uint64         `json:"sequence,omitempty"`
	OK              bool            `json:"ok"`
	Data            json.RawMessage `json:"data,omitempty"`
	Error           *protocol.Error `json:"error,omitempty"`
}

// Err returns the response's error, or nil when it succeeded.
func (r *Response) Err() error {
	if r.OK {
		return nil
	}
	if r.Error == nil {
		return &protocol.Error{Code: protocol.CodeInternal, Message: "daemon answered ok:false without an error"}
	}
	return r.Error
}

// lineMembers is a line from the daemon split into the members of a Response by one walk
// (ndjson.DecodeAliased: slices of the line, which also refuses duplicate keys). The walk is
// about ten times as fast as encoding/json's two passes over a response's data (its syntax
// check, then skipping the member), which for a large fs.read answer were most of the
// client's time; only the small members then go through encoding/json.
type lineMembers struct {
	ProtocolVersion json.RawMessage `json:"protocolVersion"`
	Kind            json.RawMessage `json:"kind"`
	RequestID       json.RawMessage `json:"requestId"`
	HostInstanceID  json.RawMessage `json:"hostInstanceId"`
	SessionID       json.RawMessage `json:"sessionId"`
	Sequence        json.RawMessage `json:"sequence"`
	OK              json.RawMessage `json:"ok"`
	Data            json.RawMessage `json:"data"`
	Error           json.RawMessage `json:"error"`
}

// decode fills r as json.Unmarshal of the whole line would: each member present is decoded
// into its field, and the data is copied out of the line as it stands.
func (m *lineMembers) decode(r *Response) error {
	for _, f := range []struct {
		raw json.RawMessage
		s   *string
	}{
		{m.ProtocolVersion, &r.ProtocolVersion}, {m.Kind, &r.Kind}, {m.RequestID, &r.RequestID},
		{m.HostInstanceID, &r.HostInstanceID}, {m.SessionID, &r.SessionID},
	} {
		if f.raw == nil {
			continue
		}
		if t, ok := ndjson.PlainString(f.raw); ok {
			*f.s = t
		} else if err := json.Unmarshal(f.raw, f.s); err != nil {
			return err
		}
	}
	switch string(m.OK) {
	case "":
	case "true":
		r.OK = true
	case "false":
		r.OK = false
	default:
		if err := json.Unmarshal(m.OK, &r.OK); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		raw json.RawMessage
		v   any
	}{{m.Sequence, &r.Sequence}, {m.Error, &r.Error}} {
		if f.raw == nil {
			continue
		}
		if err := json.Unmarshal(f.raw, f.v); err != nil {
			return err
		}
	}
	if m.Data != nil {
		r.Data = bytes.Clone(m.Data)
	}
	return nil
}

// Decode decodes the response data into v, or returns the response's error.
func (r *Response) Decode(v any) error {
	if err := r.Err(); err != nil {
		return err
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		return fmt.Errorf("client: decode %s data: %w", r.RequestID, err)
	}
	return nil
}

// Command is what Call sends. Zero-valued identity members are left out.
type Command struct {
	Operation      string
	SessionID      string
	Generation     *int64
	IdempotencyKey string
	// Client is the envelope's client member (2.x): the name of the MCP client the command
	// is made for; airlock mcp sets it so that the daemon's gate knows the call's actor.
	Client string
	// Payload is encoded as encoding/json encodes it; nil sends {}. A json.RawMessage goes
	// as it is, compacted, which spares a caller that has the payload's bytes already a
	// second encoding.
	Payload any
	// RequestID is generated when empty.
	RequestID string
}

// Client is a connection to the daemon. Its methods are safe for concurrent use.
//
// A Client reconnects once, within one Call, when the daemon closed its connection while it was
// idle: evicted to admit another connection (connection_evicted, when the process holds its
// share of the daemon's connections or the daemon is full), or closed because no first line
// arrived in time (line_timeout with firstLine). Both are retryable, and in both the daemon
// provably processed none of the requests that were unanswered when its notice came: it evicts
// only a connection with no command in flight and no session attached, and refuses every line
// read after the eviction without running it; a connection without a first line ran nothing.
// Such requests, and a request written after the notice, are sent again on a new connection,
// so a non-idempotent command is never run twice. A connection that ended any other way (the
// daemon stopped or restarted, a refusal for capacity, a broken protocol) is not reconnected:
// whether a request in flight ran is unknown, and the call fails with the cause. A DialRaw
// client never reconnects.
type Client struct {
	socket  string
	raw     bool // every inbound line goes to events, unparsed; see DialRaw
	version string
	prefix  string
	seq     atomic.Uint64

	redial chan struct{} // a one-slot lock held while a reconnect dials

	// maxLine, when above 0, is the daemon's bound on an inbound line (its handshake's
	// limits.maxLineBytes, SetMaxLineBytes): Call refuses a longer command without sending it.
	maxLine atomic.Int64

	mu     sync.Mutex
	cur    *link // the connection calls go out on
	closed bool  // Close was called: no more reconnects
}

// link is one connection to the daemon, with its reader and the calls that wait on it.
type link struct {
	nc     net.Conn
	raw    bool
	events chan json.RawMessage
	done   chan struct{} // closed when the reader has stopped

	writeMu sync.Mutex

	mu      sync.Mutex
	pending map[string]chan *Response
	notice  *protocol.Error // the daemon's last line, when it was an error answering no call of ours
	err     error           // set when the reader stops
}

// Dial connects to the daemon's socket. Calls use protocol version "2.0" unless SetVersion
// changes it.
func Dial(ctx context.Context, socket string) (*Client, error) {
	return dial(ctx, socket, false)
}

// DialRaw connects for a scripted exchange (airlock raw): the caller writes whole lines with
// WriteLine, and every line the daemon sends, responses included, reaches Events unparsed, in
// order and without being dropped. Call fails on such a client, and it never reconnects.
func DialRaw(ctx context.Context, socket string) (*Client, error) {
	return dial(ctx, socket, true)
}

func dial(ctx context.Context, socket string, raw bool) (*Client, error) {
	var b [6]byte
	rand.Read(b[:])
	c := &Client{
		socket:  socket,
		raw:     raw,
		version: protocol.Version2,
		prefix:  "cli-" + hex.EncodeToString(b[:]) + "-",
		redial:  make(chan struct{}, 1),
	}
	l, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	c.cur = l
	return c, nil
}

// euid is this process's effective uid, the only owner a daemon may have. Tests replace it
// to play a server of another user.
var euid = os.Geteuid

// open connects a new link and starts its reader.
func (c *Client) open(ctx context.Context) (*link, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return nil, err
	}
	// Nothing is sent to a server of another user, whatever the socket's path.
	if err := ownersock.CheckPeer(nc.(*net.UnixConn), euid()); err != nil {
		nc.Close()
		return nil, fmt.Errorf("client: %s is not this user's daemon: %w", c.socket, err)
	}
	l := &link{
		nc:      nc,
		raw:     c.raw,
		events:  make(chan json.RawMessage, eventBuffer),
		done:    make(chan struct{}),
		pending: make(map[string]chan *Response),
	}
	go l.readLoop()
	return l, nil
}

// link returns the current connection.
func (c *Client) link() *link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// reconnect replaces the ended link old with a new connection, unless another call already
// did (then it returns that one) or the client is closed.
func (c *Client) reconnect(ctx context.Context, old *link) (*link, error) {
	select {
	case c.redial <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.redial }()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if c.cur != old {
		l := c.cur
		c.mu.Unlock()
		return l, nil
	}
	c.mu.Unlock()
	l, err := c.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: reconnect: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		l.nc.Close()
		<-l.done
		return nil, ErrClosed
	}
	c.cur = l
	return l, nil
}

// SetVersion sets the protocolVersion of later calls. Call it before the first call.
func (c *Client) SetVersion(v string) { c.version = v }

// Events returns the events of attached sessions, as raw lines, and responses nobody waits for
// (dropped when the channel is full); on a DialRaw client, every line the daemon sends. The
// channel is closed when the current connection ends; after a reconnect (see Client), Events
// returns the new connection's. A connection with a session attached is never evicted.
func (c *Client) Events() <-chan json.RawMessage { return c.link().events }

// Done is closed when the current connection has ended (see Events).
func (c *Client) Done() <-chan struct{} { return c.link().done }

// Err returns why the current connection ended: nil while it is open, else an error wrapping
// ErrClosed, and ErrProtocol too when the daemon broke the protocol. When the daemon said why it
// closed the connection (connection_evicted, connection_capacity, line_timeout…), the message
// carries its code. A call whose write failed reports the same error once the connection has
// ended, or the write error.
func (c *Client) Err() error { return c.link().readErr() }

// Close closes the connection. Pending calls fail with ErrClosed, and later calls too.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	l := c.cur
	c.mu.Unlock()
	err := l.nc.Close()
	<-l.done
	return err
}

// SetMaxLineBytes makes Call refuse, with a *LineTooLongError and without sending it, a command
// whose line (without its LF) is longer than n bytes: the daemon's bound (its handshake's
// limits.maxLineBytes), past which it would close the connection, failing every call on it.
// 0 (the default) sends every command.
func (c *Client) SetMaxLineBytes(n int64) { c.maxLine.Store(n) }

// LineTooLongError is a command that Call did not send because its line is longer than the
// daemon reads (SetMaxLineBytes). The connection stays open.
type LineTooLongError struct {
	Operation string
	Bytes     int   // the line's length, without its LF
	Limit     int64 // the daemon's bound
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("client: %s: a command of %d bytes, over the daemon's line bound of %d bytes", e.Operation, e.Bytes, e.Limit)
}

// Call sends one command and waits for its response. A transport failure is returned as an
// error; a daemon refusal is a Response whose Err is set. When the daemon evicted the
// connection, the command is sent again on a new one if it was provably not run (see Client).
func (c *Client) Call(ctx context.Context, cmd Command) (*Response, error) {
	if c.raw {
		return nil, errors.New("client: Call on a raw connection")
	}
	rid := cmd.RequestID
	if rid == "" {
		rid = c.prefix + strconv.FormatUint(c.seq.Add(1), 10)
	}
	line, err := appendCommand(make([]byte, 0, 256), c.version, rid, cmd)
	if err != nil {
		return nil, fmt.Errorf("client: encode %s: %w", cmd.Operation, err)
	}
	if limit := c.maxLine.Load(); limit > 0 && int64(len(line)-1) > limit {
		return nil, &LineTooLongError{Operation: cmd.Operation, Bytes: len(line) - 1, Limit: limit}
	}
	l := c.link()
	r, err := l.call(ctx, rid, line)
	if err == nil || !l.idleClosed() || ctx.Err() != nil {
		return r, err
	}
	nl, rerr := c.reconnect(ctx, l)
	if rerr != nil {
		return nil, fmt.Errorf("%w (%v)", err, rerr)
	}
	return nl.call(ctx, rid, line)
}

// appendCommand appends the line of cmd, with protocol version and request id rid: the
// envelope's members written one by one, as encoding/json wrote them (its reflection over the
// envelope was about 5% of airlock mcp's CPU on a stat), the payload as Command says.
func appendCommand(dst []byte, version, rid string, cmd Command) ([]byte, error) {
	member := func(name, v string) {
		dst = append(dst, `,"`...)
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		dst = ndjson.AppendString(dst, v)
	}
	dst = append(dst, `{"protocolVersion":`...)
	dst = ndjson.AppendString(dst, version)
	member("requestId", rid)
	member("operation", cmd.Operation)
	if cmd.SessionID != "" {
		member("sessionId", cmd.SessionID)
	}
	if cmd.Generation != nil {
		dst = append(dst, `,"generation":`...)
		dst = strconv.AppendInt(dst, *cmd.Generation, 10)
	}
	if cmd.IdempotencyKey != "" {
		member("idempotencyKey", cmd.IdempotencyKey)
	}
	if cmd.Client != "" {
		member("client", cmd.Client)
	}
	dst = append(dst, `,"payload":`...)
	switch p := cmd.Payload.(type) {
	case nil:
		dst = append(dst, "{}"...)
	case json.RawMessage:
		if p == nil {
			dst = append(dst, "null"...)
			break
		}
		var err error
		if dst, err = ndjson.AppendCompact(dst, p); err != nil {
			return nil, err
		}
	default:
		b, err := ndjson.Marshal(p)
		if err != nil {
			return nil, err
		}
		dst = append(dst, bytes.TrimSuffix(b, []byte("\n"))...)
	}
	return append(dst, "}\n"...), nil
}

// call sends line, the command rid, on l and waits for its answer.
func (l *link) call(ctx context.Context, rid string, line []byte) (*Response, error) {
	ch := make(chan *Response, 1)
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	if _, dup := l.pending[rid]; dup {
		l.mu.Unlock()
		return nil, fmt.Errorf("client: request id %q already pending", rid)
	}
	l.pending[rid] = ch
	l.mu.Unlock()

	if err := l.write(line); err != nil {
		l.forget(rid)
		// The daemon may have said why before it closed: its notice is still to be read.
		// A failed write means the peer or Close ended the connection, so the reader ends
		// too; noticeWait only bounds that.
		t := time.NewTimer(noticeWait)
		defer t.Stop()
		select {
		case <-l.done:
			if l.notice != nil {
				return nil, l.readErr()
			}
		case <-ctx.Done():
		case <-t.C:
		}
		return nil, err
	}
	select {
	case r := <-ch:
		if r == nil {
			return nil, l.readErr()
		}
		return r, nil
	case <-ctx.Done():
		l.forget(rid)
		return nil, ctx.Err()
	}
}

// idleClosed reports whether l ended because the daemon closed it while it was idle (see
// Client): every request unanswered on it was not run.
func (l *link) idleClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil || l.notice == nil {
		return false
	}
	switch l.notice.Code {
	case protocol.CodeConnectionEvicted:
		return true
	case protocol.CodeLineTimeout:
		return l.notice.Details["firstLine"] == true
	}
	return false
}

// WriteLine writes raw bytes, which must be whole LF-terminated lines. Responses to them arrive
// through Call only for request ids Call registered; use DialRaw for scripted exchanges.
func (c *Client) WriteLine(line []byte) error { return c.link().write(line) }

func (l *link) write(line []byte) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if _, err := l.nc.Write(line); err != nil {
		return fmt.Errorf("client: write: %w", err)
	}
	return nil
}

func (l *link) forget(rid string) {
	l.mu.Lock()
	delete(l.pending, rid)
	l.mu.Unlock()
}

func (l *link) readErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *link) readLoop() {
	defer close(l.done)
	defer close(l.events)
	r := ndjson.NewReader(l.nc, MaxLineBytes)
	var err error
	for {
		var line []byte
		line, err = r.Next()
		if err != nil {
			var fe *ndjson.FrameError
			if errors.As(err, &fe) {
				err = fmt.Errorf("%w: %v", ErrProtocol, err)
			}
			break
		}
		if l.raw {
			l.events <- append(json.RawMessage(nil), line...)
			continue
		}
		var m lineMembers
		if ndjson.DecodeAliased(line, &m, ndjson.Open) != nil {
			err = fmt.Errorf("%w: malformed JSON", ErrProtocol)
			break
		}
		var kind string
		if m.Kind != nil && json.Unmarshal(m.Kind, &kind) == nil && kind == protocol.KindEvent {
			l.mu.Lock()
			l.notice = nil
			l.mu.Unlock()
			l.events <- append(json.RawMessage(nil), line...)
			continue
		}
		var resp Response
		if err = m.decode(&resp); err != nil {
			err = fmt.Errorf("%w: malformed response: %v", ErrProtocol, err)
			break
		}
		l.mu.Lock()
		ch := l.pending[resp.RequestID]
		delete(l.pending, resp.RequestID)
		// A refusal of no call of ours as the daemon's last line is its word on why it
		// closed the connection (connection_evicted, connection_capacity, line_timeout),
		// which the connection's error then carries; any later line clears it.
		l.notice = nil
		if ch == nil && resp.Error != nil {
			l.notice = resp.Error
		}
		l.mu.Unlock()
		if ch != nil {
			ch <- &resp
		} else {
			// An answer nobody waits for: a refusal of a line that had no usable id, or a
			// call whose context ended. Surface it as an unsolicited response.
			select {
			case l.events <- append(json.RawMessage(nil), line...):
			default:
			}
		}
	}
	l.nc.Close()
	l.mu.Lock()
	switch {
	case l.notice != nil && !errors.Is(err, ErrProtocol):
		// The daemon's code is named, not wrapped: a caller that branches on a daemon
		// refusal (*protocol.Error) must not mistake a closed connection for one.
		err = fmt.Errorf("%w by the daemon: %v", ErrClosed, l.notice)
	case err == nil || errors.Is(err, net.ErrClosed):
		err = ErrClosed
	default:
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	l.err = err
	for rid, ch := range l.pending {
		close(ch)
		delete(l.pending, rid)
	}
	l.mu.Unlock()
}
