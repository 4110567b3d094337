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
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// MaxLineBytes bounds one line read from the daemon. It is above the daemon's default record
// limits (1 MiB) so that a daemon configured for larger records can still be read.
const MaxLineBytes = 8 << 20

// eventBuffer is how many events wait for the reader of Events before the connection stops
// reading; the daemon's own outbound bound then applies.
const eventBuffer = 256

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
		v   any
	}{
		{m.ProtocolVersion, &r.ProtocolVersion}, {m.Kind, &r.Kind}, {m.RequestID, &r.RequestID},
		{m.HostInstanceID, &r.HostInstanceID}, {m.SessionID, &r.SessionID}, {m.Sequence, &r.Sequence},
		{m.OK, &r.OK}, {m.Error, &r.Error},
	} {
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
	Payload        any // nil sends {}
	// RequestID is generated when empty.
	RequestID string
}

// Client is one connection to the daemon. Its methods are safe for concurrent use.
type Client struct {
	nc      net.Conn
	raw     bool // every inbound line goes to events, unparsed; see DialRaw
	version string
	prefix  string
	seq     atomic.Uint64
	events  chan json.RawMessage

	writeMu sync.Mutex

	mu      sync.Mutex
	pending map[string]chan *Response
	err     error // set when the reader stops
	done    chan struct{}
}

// Dial connects to the daemon's socket. Calls use protocol version "2.0" unless SetVersion
// changes it.
func Dial(ctx context.Context, socket string) (*Client, error) {
	return dial(ctx, socket, false)
}

// DialRaw connects for a scripted exchange (airlock raw): the caller writes whole lines with
// WriteLine, and every line the daemon sends, responses included, reaches Events unparsed, in
// order and without being dropped. Call fails on such a client.
func DialRaw(ctx context.Context, socket string) (*Client, error) {
	return dial(ctx, socket, true)
}

func dial(ctx context.Context, socket string, raw bool) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	var b [6]byte
	rand.Read(b[:])
	c := &Client{
		nc:      nc,
		raw:     raw,
		version: protocol.Version2,
		prefix:  "cli-" + hex.EncodeToString(b[:]) + "-",
		events:  make(chan json.RawMessage, eventBuffer),
		pending: make(map[string]chan *Response),
		done:    make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

// SetVersion sets the protocolVersion of later calls. Call it before the first call.
func (c *Client) SetVersion(v string) { c.version = v }

// Events returns the events of attached sessions, as raw lines, and responses nobody waits for
// (dropped when the channel is full); on a DialRaw client, every line the daemon sends. The
// channel is closed when the connection ends.
func (c *Client) Events() <-chan json.RawMessage { return c.events }

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended: nil while it is open, else an error wrapping ErrClosed,
// and ErrProtocol too when the daemon broke the protocol. A call whose write failed reports
// only the write error; Err tells whether the daemon sent something unreadable first.
func (c *Client) Err() error { return c.readErr() }

// Close closes the connection. Pending calls fail with ErrClosed.
func (c *Client) Close() error {
	err := c.nc.Close()
	<-c.done
	return err
}

// Call sends one command and waits for its response. A transport failure is returned as an
// error; a daemon refusal is a Response whose Err is set.
func (c *Client) Call(ctx context.Context, cmd Command) (*Response, error) {
	if c.raw {
		return nil, errors.New("client: Call on a raw connection")
	}
	rid := cmd.RequestID
	if rid == "" {
		rid = c.prefix + strconv.FormatUint(c.seq.Add(1), 10)
	}
	payload := cmd.Payload
	if payload == nil {
		payload = struct{}{}
	}
	env := struct {
		ProtocolVersion string `json:"protocolVersion"`
		RequestID       string `json:"requestId"`
		Operation       string `json:"operation"`
		SessionID       string `json:"sessionId,omitempty"`
		Generation      *int64 `json:"generation,omitempty"`
		IdempotencyKey  string `json:"idempotencyKey,omitempty"`
		Payload         any    `json:"payload"`
	}{c.version, rid, cmd.Operation, cmd.SessionID, cmd.Generation, cmd.IdempotencyKey, payload}
	line, err := ndjson.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("client: encode %s: %w", cmd.Operation, err)
	}
	ch := make(chan *Response, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	if _, dup := c.pending[rid]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("client: request id %q already pending", rid)
	}
	c.pending[rid] = ch
	c.mu.Unlock()

	if err := c.WriteLine(line); err != nil {
		c.forget(rid)
		return nil, err
	}
	select {
	case r := <-ch:
		if r == nil {
			return nil, c.readErr()
		}
		return r, nil
	case <-ctx.Done():
		c.forget(rid)
		return nil, ctx.Err()
	}
}

// WriteLine writes raw bytes, which must be whole LF-terminated lines. Responses to them arrive
// through Call only for request ids Call registered; use DialRaw for scripted exchanges.
func (c *Client) WriteLine(line []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.nc.Write(line); err != nil {
		return fmt.Errorf("client: write: %w", err)
	}
	return nil
}

func (c *Client) forget(rid string) {
	c.mu.Lock()
	delete(c.pending, rid)
	c.mu.Unlock()
}

func (c *Client) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) readLoop() {
	defer close(c.done)
	defer close(c.events)
	r := ndjson.NewReader(c.nc, MaxLineBytes)
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
		if c.raw {
			c.events <- append(json.RawMessage(nil), line...)
			continue
		}
		var m lineMembers
		if ndjson.DecodeAliased(line, &m, ndjson.Open) != nil {
			err = fmt.Errorf("%w: malformed JSON", ErrProtocol)
			break
		}
		var kind string
		if m.Kind != nil && json.Unmarshal(m.Kind, &kind) == nil && kind == protocol.KindEvent {
			c.events <- append(json.RawMessage(nil), line...)
			continue
		}
		var resp Response
		if err = m.decode(&resp); err != nil {
			err = fmt.Errorf("%w: malformed response: %v", ErrProtocol, err)
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.RequestID]
		delete(c.pending, resp.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- &resp
		} else {
			// An answer nobody waits for: a refusal of a line that had no usable id, or a
			// call whose context ended. Surface it as an unsolicited response.
			select {
			case c.events <- append(json.RawMessage(nil), line...):
			default:
			}
		}
	}
	c.nc.Close()
	c.mu.Lock()
	if err == nil || errors.Is(err, net.ErrClosed) {
		err = ErrClosed
	} else {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	c.err = err
	for rid, ch := range c.pending {
		close(ch)
		delete(c.pending, rid)
	}
	c.mu.Unlock()
}
