package toolclient

// This file owns what arrives from the adapter: the read loop, the checks every inbound line
// passes (handle screen, strict decoding, this binding's identity) and the dispatch of results
// and abort acknowledgements to their requests.

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// readError maps a failed read to the connection's failure code.
func (c *Conn) readError(err error) *protocol.Error {
	var fe *ndjson.FrameError
	switch {
	case errors.As(err, &fe):
		return protocol.Retryable(tooladapter.CodeProtocolInvalid, "tool adapter sent an unframeable line (%s)", fe.Code).With(tooladapter.DetailReason, fe.Code)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return protocol.Retryable(tooladapter.CodeConnectionClosed, "tool adapter closed the connection")
	}
	return protocol.Retryable(tooladapter.CodeConnectionFailed, "tool adapter connection failed")
}

// inbound checks one line from the adapter: the handle must not appear in it (checked on the
// raw bytes, before anything parses them), it must decode as a frame, and it must carry this
// binding's identity.
//
// The frame's Data is a slice of line, not a copy: line is the reader's buffer, valid until the
// next read, and a result's done runs on the reader before that (see Start), so the up to
// several MiB of a result are not copied once more on their way to the caller.
func (c *Conn) inbound(line []byte) (*tooladapter.Frame, *protocol.Error) {
	if c.screen.Reflected(line) {
		return nil, protocol.Retryable(tooladapter.CodeSecretReflected, "tool adapter reflected the capability handle")
	}
	f, e := tooladapter.DecodeBoundFrame(line, c.id)
	if e != nil {
		e.Retryable = true
		return nil, e
	}
	switch {
	case f.AdapterID != c.id.AdapterID:
		return nil, fieldError(tooladapter.CodeIdentityMismatch, "adapterId", "frame is from another adapter")
	case f.AdapterVersion != c.id.AdapterVersion:
		return nil, fieldError(tooladapter.CodeIdentityMismatch, "adapterVersion", "frame is from another adapter version")
	case f.HostInstanceID != c.id.HostInstanceID:
		return nil, fieldError(tooladapter.CodeBindingMismatch, "hostInstanceId", "frame is bound to another host instance")
	case f.SessionID != c.id.SessionID:
		return nil, fieldError(tooladapter.CodeBindingMismatch, "sessionId", "frame is bound to another session")
	case f.Generation != c.id.Generation:
		return nil, fieldError(tooladapter.CodeBindingMismatch, "generation", "frame is bound to another generation")
	}
	return f, nil
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	for {
		line, err := c.rd.Next()
		var e *protocol.Error
		if err != nil {
			e = c.readError(err)
		} else {
			var f *tooladapter.Frame
			if f, e = c.inbound(line); e == nil {
				c.mu.Lock()
				e = c.dispatch(f)
				c.unlock() // a result's completion runs here, on the reader goroutine
			}
		}
		if e != nil {
			c.mu.Lock()
			c.fail(e)
			c.unlock()
			return
		}
	}
}

// dispatch handles one valid inbound frame of this binding. c.mu is held.
func (c *Conn) dispatch(f *tooladapter.Frame) *protocol.Error {
	if c.state != stateOpen {
		return nil // pending work has already ended; only the checks in inbound still apply
	}
	now := time.Now()
	switch f.Kind {
	case tooladapter.KindRevoked:
		return nil
	case tooladapter.KindBound:
		return protocol.Retryable(tooladapter.CodeProtocolInvalid, "tool adapter sent a second bound")
	case tooladapter.KindBind, tooladapter.KindInvoke, tooladapter.KindAbort, tooladapter.KindRevoke:
		return protocol.Retryable(tooladapter.CodeProtocolInvalid, "tool adapter sent a daemon-only %s frame", f.Kind)
	case tooladapter.KindAborted:
		if !c.aborts.ack(f.TargetRequestID, f.RequestID, now) {
			return protocol.Retryable(tooladapter.CodeResponseMismatch, "aborted does not match an abort in flight")
		}
		return nil
	case tooladapter.KindResult:
		cl := c.active[f.RequestID]
		if cl == nil || !cl.written {
			if c.aborts.result(f.RequestID, f.IdempotencyKey, f.Operation, now) {
				return nil // late result of an aborted request: dropped
			}
			return protocol.Retryable(tooladapter.CodeResponseMismatch, "result does not match a request in flight")
		}
		if cl.key != f.IdempotencyKey || cl.op != f.Operation {
			return protocol.Retryable(tooladapter.CodeResponseMismatch, "result does not match its request's idempotency key or operation")
		}
		if f.OK {
			c.finish(cl, now, f.Data, nil, outCompleted, true)
			return nil
		}
		c.finish(cl, now, nil, adapterError(f.Error), outFailed, true)
		return nil
	}
	return protocol.Retryable(tooladapter.CodeProtocolInvalid, "unexpected frame")
}

// adapterError turns an adapter's error body into the caller's error: the code passes if it is
// a well-formed code, the message never does.
func adapterError(b *tooladapter.ErrorBody) *protocol.Error {
	code := b.Code
	if !tooladapter.ValidAdapterCode(code) {
		code = tooladapter.CodeAdapterError
	}
	return (&protocol.Error{Code: code, Message: "host tool adapter request failed", Retryable: b.Retryable}).
		With(detailOrigin, originAdapter)
}
