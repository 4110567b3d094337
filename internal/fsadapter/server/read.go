package server

// This file owns what the reader goroutine does with each line after bind: the dispatch by
// kind, the strict decoding of an invoke's payload, its admission (joined to a running request
// or replayed by idempotency key, refused for capacity, handed to a worker or run inline) and
// the handling of abort.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// frame handles one inbound line after bind. It reports false when the connection must close.
func (c *conn) frame(line []byte) bool {
	f, e := tooladapter.DecodeFrame(line)
	if e != nil {
		if field, _ := e.Details[tooladapter.DetailField].(string); strings.HasPrefix(field, "payload") {
			// A well-formed invoke whose payload the shared parser refuses: answer it with
			// this adapter's own validation error instead of dropping the connection.
			if f := invokeWithoutPayload(line); f != nil && f.Identity == c.g.identity {
				return c.invoke(f)
			}
		}
		c.s.log.Warn("protocol violation; closing", "grant", c.g.id, "code", e.Code, "field", e.Details[tooladapter.DetailField])
		return false
	}
	if f.Identity != c.g.identity {
		c.s.log.Warn("frame identity mismatch; closing", "grant", c.g.id)
		return false
	}
	switch f.Kind {
	case tooladapter.KindInvoke:
		return c.invoke(f)
	case tooladapter.KindAbort:
		c.abort(f)
		return true
	case tooladapter.KindRevoke:
		if b, e := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindRevoked, Identity: c.g.identity}, c.maxOut); e == nil {
			c.send(b)
		}
		c.s.log.Info("revoked by the daemon", "grant", c.g.id)
		return false
	}
	c.s.log.Warn("unexpected frame; closing", "grant", c.g.id, "kind", string(f.Kind))
	return false
}

// invokeWithoutPayload re-reads an invoke line whose payload failed validation: with the
// payload replaced by a valid placeholder it must be a valid invoke frame, and then the original
// payload is put back for the adapter's own checks. It returns nil for anything else.
func invokeWithoutPayload(line []byte) *tooladapter.Frame {
	var m map[string]json.RawMessage
	if ndjson.Decode(line, &m, ndjson.Closed) != nil {
		return nil
	}
	var op string
	if json.Unmarshal(m["operation"], &op) != nil {
		return nil
	}
	placeholder, ok := map[string]string{
		tooladapter.OpList: `{"path":"."}`, tooladapter.OpStat: `{"path":"."}`, tooladapter.OpRead: `{"path":"."}`,
		tooladapter.OpSearch: `{"path":".","query":"x"}`, tooladapter.OpWrite: `{"path":"x","content":""}`,
		tooladapter.OpEdit: `{"path":"x","edits":[{"oldText":"x","newText":""}]}`,
	}[op]
	payload, present := m["payload"]
	if !ok || !present {
		return nil
	}
	m["payload"] = json.RawMessage(placeholder)
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	f, e := tooladapter.DecodeFrame(b)
	if e != nil || f.Kind != tooladapter.KindInvoke {
		return nil
	}
	f.Payload = payload
	return f
}

// decodeArgs decodes an invoke payload into its fsops payload type, strictly.
func decodeArgs(op string, raw json.RawMessage) (any, *protocol.Error) {
	var v any
	switch op {
	case tooladapter.OpList:
		v = &fsops.ListPayload{}
	case tooladapter.OpStat:
		v = &fsops.StatPayload{}
	case tooladapter.OpRead:
		v = &fsops.ReadPayload{}
	case tooladapter.OpSearch:
		v = &fsops.SearchPayload{}
	case tooladapter.OpWrite:
		v = &fsops.WritePayload{}
	case tooladapter.OpEdit:
		v = &fsops.EditPayload{}
	default:
		return nil, protocol.Errorf(CodeOperationDenied, "operation is not a tool operation")
	}
	if err := ndjson.Decode(raw, v, ndjson.Closed); err != nil {
		e := protocol.Errorf(fsops.CodeInvalidArgument, "payload is not a valid %s payload", op)
		var de *ndjson.DecodeError
		if errors.As(err, &de) && de.Path != "" {
			e = e.With(fsops.DetailField, de.Path)
		}
		return nil, e
	}
	return v, nil
}

// fingerprint identifies the semantic request: the operation and the payload re-encoded from
// its typed form, so that member order and spacing do not matter. A fingerprint is only ever
// compared with another of this process.
func fingerprint(op string, args any) [32]byte {
	enc, _ := json.Marshal(args) // plain structs of strings, numbers and bools
	return sha256.Sum256(append(append([]byte(op), 0), enc...))
}

// invoke admits one invocation, answers it at once, or joins it to a running one with the same
// idempotency key. It reports false when the connection must close.
func (c *conn) invoke(f *tooladapter.Frame) bool {
	g := c.g
	r := &request{c: c, id: f.RequestID, key: f.IdempotencyKey, op: f.Operation}
	args, perr := decodeArgs(f.Operation, f.Payload)
	if perr == nil && !slices.Contains(g.ops, f.Operation) {
		perr = protocol.Errorf(CodeOperationDenied, "operation is not granted")
	}
	if perr != nil {
		// Malformed requests do not touch the idempotency memory: they have no effect.
		c.g.mu.Lock()
		_, dup := c.reqs[r.id]
		c.g.mu.Unlock()
		if dup {
			return c.violation("duplicate_request_id")
		}
		return c.answer(r, outcome{err: errBody(perr)})
	}
	r.args = args
	fp := fingerprint(f.Operation, args)
	now := time.Now()

	g.mu.Lock()
	if _, dup := c.reqs[r.id]; dup {
		g.mu.Unlock()
		return c.violation("duplicate_request_id")
	}
	l := g.limits
	verdict, res := g.idem.admit(g, r, fp, now, func() bool {
		return int64(c.active) < l.MaxConcurrentRequests || int64(len(c.queue)) < l.MaxQueuedRequests
	})
	var refusal *tooladapter.ErrorBody
	switch verdict {
	case admitConflict:
		refusal = &tooladapter.ErrorBody{Code: CodeIdempotencyConflict,
			Message: "idempotency key was used with another operation or payload", Retryable: false}
	case admitElsewhere:
		refusal = &tooladapter.ErrorBody{Code: CodeIdempotencyInFlight,
			Message: "idempotency key is still running under another grant of this session generation", Retryable: true}
	case admitQueueFull:
		refusal = &tooladapter.ErrorBody{Code: CodeQueueCapacity, Message: "adapter request queue is full", Retryable: true}
	case admitCapacity:
		refusal = &tooladapter.ErrorBody{Code: CodeIdempotencyCapacity,
			Message: "too many requests with distinct idempotency keys are running", Retryable: true}
	case admitReplay:
		g.mu.Unlock()
		return c.answer(r, res)
	case admitJoined:
		r.state = reqJoined
		c.reqs[r.id] = r
		g.mu.Unlock()
		return true
	}
	if refusal != nil {
		g.mu.Unlock()
		return c.answer(r, outcome{err: refusal})
	}
	r.admitted = now
	r.ctx, r.cancel = context.WithCancelCause(c.ctx)
	c.clock.Push(&r.live, r, now)
	c.reqs[r.id] = r
	if c.active == 0 && len(c.queue) == 0 && c.br.Buffered() == 0 && inline(r.args) {
		c.active++
		r.state = reqActive
		g.mu.Unlock()
		c.complete(r, c.execute(r), false)
		return true
	}
	if int64(c.active) < l.MaxConcurrentRequests {
		c.active++
		r.state = reqActive
		if c.idle > 0 {
			c.idle--
			c.ready <- r
		} else {
			c.wg.Add(1)
			go c.work(r)
		}
	} else {
		r.state = reqQueued
		c.queue = append(c.queue, r)
	}
	g.mu.Unlock()
	return true
}

// effectFree reports whether op changes nothing: its outcome may be forgotten to bound the
// idempotency memory (see maxRememberedReadBytes).
func effectFree(op string) bool {
	switch op {
	case tooladapter.OpList, tooladapter.OpStat, tooladapter.OpRead, tooladapter.OpSearch:
		return true
	}
	return false
}

// inline reports whether a request with the decoded payload args is short enough for the
// reader goroutine to run it instead of handing it to a worker: a stat (one open and fstat) or
// a read of at most inlineReadBytes. The reader does so only when nothing else of the
// connection runs, waits or has been read ahead (then workers run requests side by side).
// While it runs, the connection reads no frames, so an abort of it arrives after its result;
// the hand-off it saves, a wake-up of another thread, cost about as much as the stat itself.
func inline(args any) bool {
	switch a := args.(type) {
	case *fsops.StatPayload:
		return true
	case *fsops.ReadPayload:
		return a.MaxBytes != nil && *a.MaxBytes <= inlineReadBytes
	}
	return false
}

// inlineReadBytes is the largest fs.read the reader goroutine runs itself (see inline).
const inlineReadBytes = 64 << 10

func (c *conn) violation(reason string) bool {
	c.s.log.Warn("protocol violation; closing", "grant", c.g.id, "reason", reason)
	return false
}

// abort cancels the target of an abort frame and acknowledges it: aborted is true when the
// target was queued, running or joined, false when it is unknown or already answered. The
// target still gets exactly one result frame (retryable canceled, unless it finished first).
func (c *conn) abort(f *tooladapter.Frame) {
	g := c.g
	var cancelled []*request
	g.mu.Lock()
	r := c.reqs[f.TargetRequestID]
	aborted := r != nil
	if r != nil {
		switch r.state {
		case reqActive:
			r.cancel(nil) // the worker answers it
		case reqQueued:
			r.cancel(nil)
			c.clock.Remove(&r.live)
			r.state = reqDone
			c.queue = slices.DeleteFunc(c.queue, func(x *request) bool { return x == r })
			delete(c.reqs, r.id)
			cancelled = append(cancelled, r)
			for _, w := range g.idem.settle(r.entry, outcome{err: ctxError(r.ctx)}, time.Now()) {
				w.state = reqDone
				delete(w.c.reqs, w.id)
				cancelled = append(cancelled, w)
			}
		case reqJoined:
			g.idem.leave(r)
			r.state = reqDone
			delete(c.reqs, r.id)
			cancelled = append(cancelled, r)
		}
	}
	g.mu.Unlock()
	b, e := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindAborted, Identity: g.identity,
		RequestID: f.RequestID, TargetRequestID: f.TargetRequestID, Aborted: aborted}, c.maxOut)
	if e == nil {
		c.send(b)
	}
	body := &tooladapter.ErrorBody{Code: fsops.CodeCanceled, Message: "request was aborted", Retryable: true}
	for _, w := range cancelled {
		w.c.answer(w, outcome{err: body})
	}
}
