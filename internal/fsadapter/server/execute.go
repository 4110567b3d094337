package server

// This file owns a request's run and end: the workers, the execution of an operation and the
// check of its result, the clock's expiry, and complete, which records the outcome for replay,
// answers the requests joined to it and gives the worker the next queued one.

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// tick runs when the clock fires: every request whose requestTimeoutMs has passed since its
// admission is cancelled with errTimedOut (its worker answers request_timeout; a queued one
// when a worker takes it).
func (c *conn) tick() {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	c.clock.Expire(time.Now(), func(r *request) { r.cancel(errTimedOut) })
}

// work runs r, then each queued request in turn, then waits for a request handed to it, until
// the connection ends. Requests are handed over only by the reader goroutine, before it ends
// the connection, so a worker that sees the end and then finds ready empty leaves nothing
// behind: every admitted request gets its result (canceled, once the connection ended).
func (c *conn) work(r *request) {
	defer c.wg.Done()
	for {
		for r != nil {
			res := c.execute(r)
			r = c.complete(r, res, true)
		}
		select {
		case r = <-c.ready:
		case <-c.ctx.Done():
			select {
			case r = <-c.ready:
			default:
				return
			}
		}
	}
}

// execute runs one operation under its context and encodes its data.
func (c *conn) execute(r *request) outcome {
	if e := ctxError(r.ctx); e != nil {
		return outcome{err: e}
	}
	if h := dispatchHook.Load(); h != nil {
		(*h)(r.ctx, r.op)
	}
	root := c.g.root
	var (
		v    any
		perr *protocol.Error
	)
	switch a := r.args.(type) {
	case *fsops.ListPayload:
		v, perr = root.List(r.ctx, *a)
	case *fsops.StatPayload:
		v, perr = root.Stat(r.ctx, *a)
	case *fsops.ReadPayload:
		v, perr = root.Read(r.ctx, *a)
	case *fsops.SearchPayload:
		v, perr = root.Search(r.ctx, *a)
	case *fsops.WritePayload:
		v, perr = root.Write(r.ctx, *a)
	case *fsops.EditPayload:
		v, perr = root.Edit(r.ctx, *a)
	}
	if perr != nil {
		if e := ctxError(r.ctx); e != nil && perr.Code == fsops.CodeCanceled {
			return outcome{err: e}
		}
		return outcome{err: errBody(perr)}
	}
	// The result frame is built around the data as it is encoded, so that the data (up to
	// 4 MiB of a read) is not copied again into its frame; frame is nil when the frame must
	// go through tooladapter.EncodeFrame (see resultFrame).
	var hint int
	switch v := v.(type) {
	case *fsops.ReadResult:
		hint = readSize(v)
	case *fsops.ListResult:
		hint = listSize(v)
	case *fsops.StatResult:
		hint = 128
	}
	var buf []byte
	if hint >= pooledFrameBytes {
		buf = ndjson.GetBuffer(len(c.head) + hint + 256)
	}
	frame, fast := c.appendResultHead(buf, r, hint)
	start := len(frame)
	switch v := v.(type) {
	case *fsops.ReadResult:
		frame = appendRead(frame, v)
	case *fsops.ListResult:
		frame = appendList(frame, v)
	default:
		buf := bytes.NewBuffer(frame)
		enc := json.NewEncoder(buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return outcome{err: &tooladapter.ErrorBody{Code: CodeInternal, Message: "result is not serializable"}}
		}
		frame = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	data := frame[start:len(frame):len(frame)]
	e := checkResult(r.op, v, data)
	if rr, ok := v.(*fsops.ReadResult); ok {
		rr.Release() // encoded and checked: the frame holds the content now
	}
	if e != nil {
		c.s.log.Error("invalid result", "grant", c.g.id, "operation", r.op, "field", e.Details[tooladapter.DetailField])
		return outcome{err: &tooladapter.ErrorBody{Code: CodeInternal, Message: "result failed the protocol's result check"}}
	}
	if buf != nil {
		buf = frame // the frame as it ended up, in the pooled buffer unless it outgrew it
	}
	if !fast {
		return outcome{data: data, buf: buf}
	}
	return outcome{data: data, frame: append(frame, "}\n"...), owner: r, buf: buf}
}

// pooledFrameBytes is the estimated result size from which a result frame (that of a large
// read) is built in a pooled buffer: a fresh buffer of megabytes costs more to allocate and
// clear than the read itself. Such an outcome is not remembered for replay (see idemCache).
const pooledFrameBytes = 1 << 20

// checkResult runs the protocol's result check (tooladapter.ValidateResult) on data, the
// encoding of v, once per outcome, before it is written. A read's content — up to 4 MiB of
// text that decoding would only copy — is checked by its length, the check's one rule for it,
// and the rest of the read by the protocol's check of the same result with empty content. A
// listing is checked as the values it was encoded from (tooladapter.ValidateListEntries, the
// same rules): decoding its own encoding again took longer than listing the directory.
func checkResult(op string, v any, data []byte) *protocol.Error {
	if lr, ok := v.(*fsops.ListResult); ok && op == tooladapter.OpList {
		if lr.Entries == nil { // encoded as null, which the protocol's check names
			return tooladapter.ValidateResult(op, data)
		}
		return tooladapter.ValidateListEntries(len(lr.Entries), func(i int) (string, string, int64, string) {
			e := &lr.Entries[i]
			return e.Name, e.Type, e.Size, e.ModifiedAt
		})
	}
	rr, ok := v.(*fsops.ReadResult)
	if !ok {
		return tooladapter.ValidateResult(op, data)
	}
	if len(rr.Content) > tooladapter.MaxContentBytes {
		return protocol.Errorf(tooladapter.CodeProtocolInvalid, "read content is too long").With(tooladapter.DetailField, "content")
	}
	skeleton := *rr
	skeleton.Content = ""
	var buf [128]byte
	return tooladapter.ValidateResult(op, appendRead(buf[:0], &skeleton))
}

// ctxError maps a finished request context to its error body: the timeout from admission, or
// an abort (or the connection ending), both retryable.
func ctxError(ctx context.Context) *tooladapter.ErrorBody {
	switch {
	case ctx.Err() == nil:
		return nil
	case context.Cause(ctx) == errTimedOut:
		return &tooladapter.ErrorBody{Code: CodeRequestTimeout, Message: "request timed out", Retryable: true}
	}
	return &tooladapter.ErrorBody{Code: fsops.CodeCanceled, Message: "request was aborted", Retryable: true}
}

// complete ends r with res: its idempotency entry records the outcome (or forgets the key),
// requests that joined it are answered too, and a worker gets the next queued request, if
// any, to run next; else it is counted idle. The reader goroutine (worker false) ran r inline,
// which it does only when nothing else runs or waits, and admits nothing meanwhile, so the
// queue is empty.
func (c *conn) complete(r *request, res outcome, worker bool) *request {
	g := c.g
	g.mu.Lock()
	r.cancel(nil)
	c.clock.Remove(&r.live)
	r.state = reqDone
	delete(c.reqs, r.id)
	kept := res // remembered and replayed without r's own frame
	kept.frame, kept.owner = nil, nil
	waiters := g.idem.settle(r.entry, kept, time.Now())
	for _, w := range waiters {
		w.state = reqDone
		delete(w.c.reqs, w.id)
	}
	var next *request
	if worker && len(c.queue) > 0 {
		next = c.queue[0]
		c.queue = c.queue[1:]
		next.state = reqActive
	} else {
		c.active--
		if worker {
			c.idle++ // this worker waits in work once r is answered
		}
	}
	g.mu.Unlock()
	c.answer(r, res)
	for _, w := range waiters {
		w.c.answer(w, kept)
	}
	if res.buf != nil {
		ndjson.PutBuffer(res.buf) // answered, and not remembered
	}
	return next
}
