package server

// This file owns what goes to the daemon: the serialized frame write, error bodies, the result
// frame built around its data as encoded, and answer, which replaces a result that does not fit
// maxResponseBytes or would carry the capability handle.

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// send writes one frame; it reports false (and closes the connection) when the write fails.
// The socket nearly always takes a whole frame at once, so the first attempt does not wait and
// sets no deadline (a deadline is a timer); what it leaves is written with writeTimeout.
func (c *conn) send(b []byte) bool {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.broken {
		return false
	}
	n, err := c.direct.Write(b)
	if err == nil && n < len(b) {
		_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err = c.nc.Write(b[n:])
		// Cleared again: the next frame's first attempt sets no deadline, and a past one
		// fails it.
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		c.broken = true
		_ = c.nc.Close()
		return false
	}
	return true
}

func errBody(e *protocol.Error) *tooladapter.ErrorBody {
	msg := e.Message
	if msg == "" {
		msg = e.Code
	}
	if utf8.RuneCountInString(msg) > tooladapter.MaxErrorMessageLen {
		msg = string([]rune(msg)[:tooladapter.MaxErrorMessageLen])
	}
	return &tooladapter.ErrorBody{Code: e.Code, Message: msg, Retryable: e.Retryable}
}

// resultTail is the rest of the template frame resultHead encodes.
const resultTail = `,"requestId":"r","idempotencyKey":"k","operation":"fs.stat","ok":true,"data":{"type":"file","size":0}}` + "\n"

// resultHead returns the part of a successful result frame for id that precedes its requestId,
// cut from tooladapter.EncodeFrame's own encoding of a template result, or nil if that
// encoding does not end as expected.
func resultHead(id tooladapter.Identity) []byte {
	b, e := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindResult, Identity: id, RequestID: "r",
		IdempotencyKey: "k", Operation: tooladapter.OpStat, OK: true, Data: json.RawMessage(`{"type":"file","size":0}`)}, 0)
	if e != nil || !bytes.HasSuffix(b, []byte(resultTail)) {
		return nil
	}
	return b[:len(b)-len(resultTail)]
}

// resultFrame encodes the successful result frame of r around data, byte for byte what
// tooladapter.EncodeFrame writes (TestResultFrameMatchesEncodeFrame), without its second
// decoding and re-encoding of data: see appendResultHead. data is the compact encoding execute
// made and checked. It reports ok false when the frame must go through EncodeFrame instead.
func (c *conn) resultFrame(r *request, data []byte) (b []byte, ok bool) {
	b, ok = c.appendResultHead(nil, r, len(data))
	if !ok {
		return nil, false
	}
	b = append(b, data...)
	return append(b, "}\n"...), true
}

// appendResultHead appends the start of r's successful result frame, up to its data, with room
// for dataSize more bytes and the frame's end ("}\n"): the identity part is c.head; the request
// id and idempotency key passed the protocol's check when the invoke was decoded and are made
// of characters JSON never escapes (checked again here). It reports ok false, and appends
// nothing, when the frame must go through EncodeFrame instead.
func (c *conn) appendResultHead(b []byte, r *request, dataSize int) ([]byte, bool) {
	if c.head == nil || !plainToken(r.id) || !plainToken(r.key) || !plainToken(r.op) {
		return b, false
	}
	const fixed = len(`,"requestId":"","idempotencyKey":"","operation":"","ok":true,"data":}`) + 1
	b = slices.Grow(b, len(c.head)+len(r.id)+len(r.key)+len(r.op)+dataSize+fixed)
	b = append(b, c.head...)
	b = append(b, `,"requestId":"`...)
	b = append(b, r.id...)
	b = append(b, `","idempotencyKey":"`...)
	b = append(b, r.key...)
	b = append(b, `","operation":"`...)
	b = append(b, r.op...)
	b = append(b, `","ok":true,"data":`...)
	return b, true
}

// plainToken reports whether s is non-empty and made of the wire identifier characters
// [A-Za-z0-9._:-], which JSON never escapes.
func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return s != ""
}

// answer sends r's result frame. A result that does not fit maxResponseBytes, or fails the
// shared result check, is replaced by an error result. It reports false when the write failed.
func (c *conn) answer(r *request, res outcome) bool {
	f := &tooladapter.Frame{Kind: tooladapter.KindResult, Identity: c.g.identity, RequestID: r.id,
		IdempotencyKey: r.key, Operation: r.op, OK: res.err == nil, Data: res.data, Error: res.err}
	var (
		b  []byte
		e  *protocol.Error
		ok bool
	)
	if res.err == nil {
		if res.owner == r {
			b, ok = res.frame, true
		} else {
			b, ok = c.resultFrame(r, res.data)
		}
		if ok && len(b) > c.maxOut {
			e = protocol.Errorf(tooladapter.CodeRequestTooLarge, "frame of %d bytes exceeds the limit of %d", len(b), c.maxOut)
		}
	}
	if !ok {
		b, e = tooladapter.EncodeFrame(f, c.maxOut)
	}
	if e == nil && tooladapter.ContainsSecret(b, c.g.secret) {
		// Base64url characters are never escaped in JSON, so the raw bytes are the only form
		// the handle can take in a frame this adapter encodes.
		e = protocol.Errorf(CodeHandleInResult, "result contains the capability handle")
	}
	if e != nil {
		f.OK, f.Data = false, nil
		f.Error = &tooladapter.ErrorBody{Code: fsops.CodeTooLarge, Message: "result exceeds maxResponseBytes"}
		switch e.Code {
		case tooladapter.CodeRequestTooLarge:
		case CodeHandleInResult:
			f.Error = &tooladapter.ErrorBody{Code: CodeHandleInResult, Message: "result would contain the capability handle"}
		default:
			f.Error = &tooladapter.ErrorBody{Code: CodeInternal, Message: "result failed the protocol's result check"}
			c.s.log.Error("invalid result", "grant", c.g.id, "operation", r.op, "field", e.Details[tooladapter.DetailField])
		}
		if b, e = tooladapter.EncodeFrame(f, c.maxOut); e != nil {
			c.s.log.Error("error result does not fit maxResponseBytes; closing", "grant", c.g.id)
			_ = c.nc.Close()
			return false
		}
	}
	return c.send(b)
}
