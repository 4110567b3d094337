package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/airlockhq/airlock/internal/busport"
)

// minMarkerTTL is the shortest life JetStream gives the marker it leaves when an entry
// expires; watchers see the marker as the entry's deletion.
const minMarkerTTL = time.Second

var bucketName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Bucket implements busport.Conn: a JetStream key/value bucket with one revision per key kept,
// in file storage, with the connection's replica count.
func (c *Conn) Bucket(ctx context.Context, cfg busport.BucketConfig) (busport.Bucket, error) {
	if !bucketName.MatchString(cfg.Name) {
		return nil, fmt.Errorf("%w: bucket name %q", ErrConfig, cfg.Name)
	}
	maxValue := cfg.MaxValueBytes
	if maxValue <= 0 || maxValue > c.maxPayload {
		maxValue = c.maxPayload
	}
	kc := jetstream.KeyValueConfig{
		Bucket:       cfg.Name,
		History:      1,
		MaxValueSize: int32(maxValue),
		Storage:      jetstream.FileStorage,
		Replicas:     c.replicas,
	}
	if cfg.TTL > 0 {
		kc.TTL = cfg.TTL
		kc.LimitMarkerTTL = max(cfg.TTL, minMarkerTTL)
	}
	kv, err := c.openKeyValue(ctx, kc)
	if err != nil {
		return nil, mapError(err)
	}
	return &bucket{kv: kv, conn: c, maxValue: maxValue}, nil
}

// openKeyValue binds to the bucket when it exists as kc says, creates it when it does not,
// and updates it otherwise. Binding first lets a host whose broker permissions allow creating
// the room buckets but not changing them (HostPermissions) open one another host created.
func (c *Conn) openKeyValue(ctx context.Context, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, kc.Bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		kv, err = c.js.CreateKeyValue(ctx, kc)
		if !errors.Is(err, jetstream.ErrBucketExists) {
			return kv, err
		}
		// Another host created it a moment ago: bind to it.
		kv, err = c.js.KeyValue(ctx, kc.Bucket)
		if err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	si := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	if si.Config.MaxAge == kc.TTL && si.Config.MaxMsgSize == kc.MaxValueSize && si.Config.Replicas == kc.Replicas &&
		si.Config.SubjectDeleteMarkerTTL == kc.LimitMarkerTTL && si.Config.MaxMsgsPerSubject == int64(kc.History) {
		return kv, nil
	}
	return c.js.CreateOrUpdateKeyValue(ctx, kc)
}

// bucket is one opened busport.Bucket.
type bucket struct {
	kv       jetstream.KeyValue
	conn     *Conn
	maxValue int
}

func (b *bucket) check(value []byte) error {
	if len(value) > b.maxValue {
		return fmt.Errorf("value of %d bytes: %w", len(value), busport.ErrTooLarge)
	}
	return nil
}

func (b *bucket) Get(ctx context.Context, key string) (busport.Entry, error) {
	e, err := b.kv.Get(ctx, key)
	if err != nil {
		return busport.Entry{}, mapError(err)
	}
	return busport.Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision()}, nil
}

func (b *bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := b.check(value); err != nil {
		return 0, err
	}
	rev, err := b.kv.Put(ctx, key, value)
	if err != nil {
		return 0, mapError(err)
	}
	return rev, nil
}

func (b *bucket) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := b.check(value); err != nil {
		return 0, err
	}
	rev, err := b.kv.Create(ctx, key, value)
	if err != nil {
		return 0, mapError(err)
	}
	return rev, nil
}

func (b *bucket) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	if err := b.check(value); err != nil {
		return 0, err
	}
	rev, err := b.kv.Update(ctx, key, value, revision)
	if err != nil {
		return 0, mapError(err)
	}
	return rev, nil
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	if err := b.kv.Delete(ctx, key); err != nil {
		return mapError(err)
	}
	return nil
}

// Watch implements busport.Bucket. The initial entries are delivered on the caller's
// goroutine; later ones on a goroutine the returned subscription owns.
func (b *bucket) Watch(ctx context.Context, pattern string, fn func(busport.Entry)) (busport.Subscription, error) {
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := b.kv.Watch(life, pattern)
	if err != nil {
		cancel()
		return nil, mapError(err)
	}
	ws := &watching{w: w, cancel: cancel, done: make(chan struct{}), conn: b.conn}
	// The watcher sends nil once the entries present at its start have been delivered.
initial:
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				break initial
			}
			if e == nil {
				break initial
			}
			fn(entryOf(e))
		case <-ctx.Done():
			cancel()
			_ = w.Stop()
			return nil, mapError(ctx.Err())
		}
	}
	go func() {
		defer close(ws.done)
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					fn(entryOf(e))
				}
			case <-life.Done():
				return
			}
		}
	}()
	if !b.conn.track(ws) {
		_ = ws.Stop()
		return nil, fmt.Errorf("watch: %w", busport.ErrClosed)
	}
	return ws, nil
}

func entryOf(e jetstream.KeyValueEntry) busport.Entry {
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		return busport.Entry{Key: e.Key(), Revision: e.Revision(), Deleted: true}
	}
	return busport.Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision()}
}

// watching is one running Watch.
type watching struct {
	w      jetstream.KeyWatcher
	cancel context.CancelFunc
	done   chan struct{}
	conn   *Conn
	once   sync.Once
}

// Stop ends the watch: no entry is delivered once it returns. Cancelling the watch's context
// unsubscribes it (nats.go's goroutine for that context does) and then deletes its consumer, a
// JetStream API call that waits up to 5 s for the answer that a cluster without a leader never
// gives: Stop does not wait for it (the last host of a fabric to stop waited 5 s per watch).
// The server drops the consumer itself after its inactivity threshold, and closing the
// connection ends the call at once.
func (ws *watching) Stop() error {
	ws.once.Do(func() {
		ws.cancel()
		<-ws.done
		ws.conn.untrack(ws)
	})
	return nil
}

// JetStream's error codes while a cluster forms (nats-server's JSClusterNoPeersErr and
// JSClusterNotAvailErr).
const (
	jsNoPeers      jetstream.ErrorCode = 10005
	jsNotAvailable jetstream.ErrorCode = 10008
)

// Forming reports whether err is JetStream's answer while a fabric's cluster forms or
// re-forms: no meta leader yet ("JetStream system temporarily unavailable", status 503) or
// fewer nodes up than a new bucket's replicas ("no suitable peers for placement"). The same
// operation succeeds once enough nodes are up, so a caller starting on a fabric retries it.
func Forming(err error) bool {
	var je jetstream.JetStreamError
	if !errors.As(err, &je) || je.APIError() == nil {
		return false
	}
	ae := je.APIError()
	return ae.Code == 503 || ae.ErrorCode == jsNoPeers || ae.ErrorCode == jsNotAvailable
}

// BucketsCreated returns, for each of names, when its bucket's stream was created, or the
// zero time for a bucket that does not exist (its stream was deleted, or never created). A
// bucket deleted and made again has another creation time, which is how a host that did not
// see it go learns that the records it wrote are gone. It reads each stream's info, which a
// host's broker permissions allow for the room buckets.
func (c *Conn) BucketsCreated(ctx context.Context, names ...string) ([]time.Time, error) {
	out := make([]time.Time, len(names))
	for i, n := range names {
		st, err := c.js.Stream(ctx, "KV_"+n)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return nil, mapError(err)
		default:
			out[i] = st.CachedInfo().Created
		}
	}
	return out, nil
}
