// Package busport is the contract between the room layer and the message bus that carries it:
// request/reply, subject handlers with bounded concurrency, and key/value buckets with watches.
// It holds interfaces and plain values only. Package room speaks through these interfaces and
// knows nothing of NATS; package bus implements them on NATS and is the only NATS code. Where a
// deployment puts the bus (one embedded server, a cluster, a leaf node), which broker user a
// host connects as and how many replicas a bucket keeps are the implementation's configuration,
// so none of it appears here.
//
// The bus moves bytes and holds no authority: nothing a Conn delivers is trusted because of
// where it came from. Everything the room layer acts on is signed by a host key and verified
// above this contract.
package busport

import (
	"context"
	"errors"
	"time"
)

// Errors an implementation returns, wrapped, for the conditions its callers branch on.
var (
	// ErrNoResponders: a request found no handler on its subject.
	ErrNoResponders = errors.New("bus: no responders")
	// ErrTimeout: a request got no reply before its context's deadline.
	ErrTimeout = errors.New("bus: timeout")
	// ErrTooLarge: a payload, reply or value exceeds the connection's limit.
	ErrTooLarge = errors.New("bus: payload too large")
	// ErrNotFound: a bucket has no live entry under the key.
	ErrNotFound = errors.New("bus: key not found")
	// ErrConflict: a Create found the key present, or an Update found a later revision.
	ErrConflict = errors.New("bus: revision conflict")
	// ErrClosed: the connection is closed or draining.
	ErrClosed = errors.New("bus: connection closed")
)

// Conn is one host's connection to the bus. It is safe for concurrent use.
type Conn interface {
	// Request sends payload to subject and waits for one reply, until ctx ends (ErrTimeout
	// when its deadline passes). The reply goes to a private inbox of this connection only.
	Request(ctx context.Context, subject string, payload []byte) ([]byte, error)
	// Serve calls h for each request on subject (which may hold the wildcards * and >), with
	// at most limit calls of h.Serve running at once. Requests of one subject are delivered
	// to one subscriber per Serve call, so a host may serve a subject from a second
	// connection while it replaces the first.
	Serve(subject string, limit int, h Handler) (Subscription, error)
	// Bucket opens the key/value bucket cfg names, creating it when it does not exist.
	Bucket(ctx context.Context, cfg BucketConfig) (Bucket, error)
	// MaxPayload is the largest payload, reply or value this connection sends or accepts.
	MaxPayload() int
	// RequestMsg is Request with header fields: m's header travels with its data, and the
	// reply's header comes back with the reply's data. The limit of MaxPayload applies to
	// the data and header together.
	RequestMsg(ctx context.Context, subject string, m Msg) (Msg, error)
	// StartRequestMsg is RequestMsg without the wait: done receives exactly what RequestMsg
	// would return, exactly once — on the connection's reply goroutine, on a goroutine that
	// ends the request when ctx does, or before StartRequestMsg returns when the request
	// cannot be sent. done must not block. ctx must have a deadline.
	StartRequestMsg(ctx context.Context, subject string, m Msg, done func(Msg, error))
	// ServeMsg is Serve for a handler of requests with header fields.
	ServeMsg(subject string, limit int, h MsgHandler) (Subscription, error)
	// Connected reports whether the connection is up: false while it has lost its server
	// and tries to reconnect, and once it is closed.
	Connected() bool
	// Lost returns a channel that is closed when the connection loses its server or closes
	// (at once while it is down): a caller waiting on the bus for something the loss makes
	// hopeless (a request's reply already sent into the lost connection waits out its
	// deadline otherwise) can end the wait. After a reconnect, Lost returns a new channel.
	Lost() <-chan struct{}
}

// Msg is a payload with header fields, for a protocol that keeps a fixed envelope of short
// fields out of its payload: the bus carries the header as it is, and reading a field is a
// map lookup instead of a decode of the payload. Header maps a field name (case-sensitive)
// to its values, in order; a name repeated on the wire has several. Values hold no CR or LF.
type Msg struct {
	Header map[string][]string
	Data   []byte
}

// MsgHandler answers requests with header fields delivered by Conn.ServeMsg. Unlike a
// Handler it may answer after it returns: ServeMsg runs on the delivery goroutine, one
// request at a time, and must not block; it calls respond exactly once, from any goroutine,
// before or after it returns, and hands whatever waits to a goroutine of its own. A request
// holds one of the limit slots until respond is called, ctx ends when the subscription
// stops, and Stop returns once respond was called for every request delivered. A reply with
// neither header nor data sends none. OverloadedMsg has Handler.Overloaded's contract.
type MsgHandler interface {
	ServeMsg(ctx context.Context, subject string, m Msg, respond func(Msg))
	OverloadedMsg(subject string, m Msg) Msg
}

// Handler answers requests delivered by Conn.Serve.
type Handler interface {
	// Serve answers one request; the returned bytes are the reply (nil sends none). ctx ends
	// when the subscription stops. Serve may block, within the caller's own deadlines.
	Serve(ctx context.Context, subject string, payload []byte) []byte
	// Overloaded answers a request that arrived while limit calls of Serve were running. It
	// runs on the delivery goroutine and must not block.
	Overloaded(subject string, payload []byte) []byte
}

// Subscription is a running Serve or Watch.
type Subscription interface {
	// Stop ends delivery and returns once no callback of the subscription is running. It is
	// idempotent.
	Stop() error
}

// BucketConfig names a key/value bucket and how long its entries live.
type BucketConfig struct {
	// Name is the bucket's name: letters, digits, '-' and '_'.
	Name string
	// TTL, when positive, expires an entry that has not been written for that long; watchers
	// see the expiry as a deletion. Zero keeps entries until they are deleted.
	TTL time.Duration
	// MaxValueBytes bounds one value; zero means the connection's MaxPayload.
	MaxValueBytes int
}

// Entry is one key's value at one revision. Deleted entries (from Watch) have no value.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
	Deleted  bool
}

// Bucket is a key/value bucket. Keys are tokens of letters, digits, '-', '_' and '=' joined
// by dots. It is safe for concurrent use.
type Bucket interface {
	// Get returns key's current entry, or ErrNotFound.
	Get(ctx context.Context, key string) (Entry, error)
	// Put writes value under key and returns the new revision.
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	// Create writes value under key only if the key has no live entry (else ErrConflict).
	Create(ctx context.Context, key string, value []byte) (uint64, error)
	// Update writes value under key only if its current revision is revision (else
	// ErrConflict).
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	// Delete removes key's entry; deleting an absent key is not an error.
	Delete(ctx context.Context, key string) error
	// Watch calls fn, one call at a time, for every live entry whose key matches pattern
	// (which may hold * and >) before it returns, then for every later change, deletions
	// and expiries included, until the subscription stops.
	Watch(ctx context.Context, pattern string, fn func(Entry)) (Subscription, error)
}
