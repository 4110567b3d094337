package mcp

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// This file holds what the drainer answers itself: a line the SDK's stdio connection cannot
// read as a message ends the connection there (its reader stops at the first error, and the
// requests it is running are cancelled unanswered), so such a line never reaches it. It gets a
// JSON-RPC error with id null, as JSON-RPC 2.0 says (§5.1: -32700 for a line that is not JSON,
// -32600 for JSON that is not a request object), and serving goes on, as the reference MCP
// servers go on past a bad line. It also holds the failure server's answers (ServeFailure),
// where no line reaches the SDK.

// sdkMaxDepth is the nesting of objects and arrays that the SDK's decoder accepts (its
// internal/json's defaultMaxDepth): a batch nested deeper is refused whole.
const sdkMaxDepth = 1000

// check reports why the SDK's connection would refuse line (trimmed, not empty), which would
// end the session: the JSON-RPC code and message to answer it with, or 0 when the SDK reads
// it. A single message is read by the SDK's own decoder (jsonrpc.DecodeMessage); a batch as
// the SDK's connection reads one, with the few refusals that depend on what it read before.
// FuzzCheckLine holds it to the SDK's connection.
func (d *drainer) check(line []byte) (int, string) {
	if !json.Valid(line) {
		// The SDK reads stdin with encoding/json's decoder, whose error this is.
		err := json.Unmarshal(line, new(json.RawMessage))
		return jsonrpc.CodeParseError, "Parse error: " + err.Error()
	}
	if line[0] == '[' {
		return d.checkBatch(line)
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		return jsonrpc.CodeInvalidRequest, "Invalid Request: " + err.Error()
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && d.inUse(idKeyOf(req.ID)) {
		return jsonrpc.CodeInvalidRequest, "Invalid Request: " + inUseMessage(idKeyOf(req.ID))
	}
	return 0, ""
}

// inUse reports whether a request of id key k was read and its response is still to come:
// one not answered yet, or one notifications/cancelled settled whose SDK response is still
// to be dropped. The SDK's connection keeps such a request's id until it has its response,
// and a request that comes with that id meanwhile it neither runs nor answers (it logs it),
// so check answers it instead (TestRequestIDInUseIsAnswered): a client piping requests that
// all say "id":1 waited for the drain deadline, whose answer said the call might still take
// effect. Only the reader calls check and pend, so a key found free stays free until pended.
func (d *drainer) inUse(k string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending[k] > 0 || d.dropping[k] > 0
}

// inUseMessage is check's answer to a request with the id of one still in flight.
func inUseMessage(k string) string {
	return "id " + string(appendID(nil, k)) + " is in use by a request not answered yet"
}

// checkBatch is check of a JSON array. The SDK's connection ends the session on a batch that
// is empty, nested too deep or has an element that is not a message; on any batch once the
// session's revision is 2025-06-18 or later, which have no batches (noBatches); and on one
// with a request id that it or an earlier batch still waiting for its answers has (batched).
// A batch with a notification is refused too: the SDK keys a batch's requests by id and a
// notification has none, so it never answered such a batch, and a second one ended the
// session.
func (d *drainer) checkBatch(line []byte) (int, string) {
	invalid := func(why string) (int, string) { return jsonrpc.CodeInvalidRequest, "Invalid Request: " + why }
	if d.noBatches {
		return invalid("JSON-RPC batches are not supported in protocol revision 2025-06-18 and later")
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(line, &batch); err != nil {
		return invalid(err.Error())
	}
	if len(batch) == 0 {
		return invalid("an empty batch")
	}
	if deeper(line, sdkMaxDepth) {
		return invalid("the batch nests deeper than " + strconv.Itoa(sdkMaxDepth))
	}
	var keys []string
	for _, raw := range batch {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return invalid(err.Error())
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			continue // a response
		}
		if !req.IsCall() {
			return invalid("a notification in a batch")
		}
		k := idKeyOf(req.ID)
		if slices.Contains(keys, k) {
			return invalid("a request id repeated in the batch")
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		if d.inUse(k) && !d.batched[k] {
			return invalid(inUseMessage(k))
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		if d.batched[k] {
			return invalid("a request id of an earlier batch not answered yet")
		}
	}
	if d.batched == nil {
		d.batched = map[string]bool{}
	}
	for _, k := range keys {
		d.batched[k] = true
	}
	return 0, ""
}

// unbatch forgets the batched requests of the responses keys, once written: the SDK forgets
// them when it has their responses, before.
func (d *drainer) unbatch(keys []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		delete(d.batched, k)
	}
}

// batchRevision reports whether a session begun by an initialize of revision v has batches:
// the SDK's connection takes them under the revision it agrees on when that is older than
// 2025-06-18, which it does when it supports v (2025-03-26, 2024-11-05); otherwise it agrees on
// its latest session revision.
func batchRevision(v string) bool {
	return v < "2025-06-18" && slices.Contains(sdk.SupportedProtocolVersions(), v)
}

// deeper reports whether data, well-formed JSON, nests objects and arrays deeper than max, as
// the SDK's decoder counts: brackets outside strings.
func deeper(data []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > max {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// idKeyOf is idKey of a request id as the SDK decoded it.
func idKeyOf(id jsonrpc.ID) string {
	if s, ok := id.Raw().(string); ok {
		return "s" + s
	}
	n, _ := id.Raw().(int64)
	return "n" + strconv.FormatInt(n, 10)
}

// reply writes an error response with id null (a line's whose id could not be read).
func (d *drainer) reply(code int, msg string) {
	line := append(appendErrorResponse(nil, code, msg), '\n')
	d.wmu.Lock()
	defer d.wmu.Unlock()
	_, _ = d.out.Write(line) // a stdout gone fails the SDK's next write too
}

// appendErrorResponse appends an error response with id null.
func appendErrorResponse(dst []byte, code int, msg string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":null,"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, `,"message":`...)
	dst = ndjson.AppendString(dst, msg)
	return append(dst, "}}"...)
}

// refuseLine answers line (trimmed, not empty) in a failure server (ServeFailure): each
// request in it, alone or in a batch, gets the failure; a line that is not JSON, or a message
// that is not a JSON-RPC message, is answered as check answers it; a notification or a
// response gets nothing.
func (d *drainer) refuseLine(line []byte) {
	var out []byte
	switch {
	case !json.Valid(line):
		code, msg := d.check(line)
		out = appendErrorResponse(out, code, msg)
	case line[0] == '[':
		var batch []json.RawMessage
		if json.Unmarshal(line, &batch) != nil || len(batch) == 0 {
			out = appendErrorResponse(out, jsonrpc.CodeInvalidRequest, "Invalid Request: an empty batch")
			break
		}
		out = append(out, '[')
		for _, raw := range batch {
			n := len(out)
			if n > 1 {
				out = append(out, ',')
			}
			m := len(out)
			if out = d.refusal(out, raw); len(out) == m {
				out = out[:n] // nothing to answer: no comma either
			}
		}
		if len(out) == 1 {
			return // notifications and responses only
		}
		out = append(out, ']')
	default:
		if out = d.refusal(out, line); len(out) == 0 {
			return
		}
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	_, _ = d.out.Write(append(out, '\n'))
}

// refusal appends the failure server's answer to one message, if it gets one.
func (d *drainer) refusal(dst, raw []byte) []byte {
	msg, err := jsonrpc.DecodeMessage(raw)
	if err != nil {
		return appendErrorResponse(dst, jsonrpc.CodeInvalidRequest, "Invalid Request: "+err.Error())
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return dst
	}
	dst = append(dst, responsePrefix...)
	dst = appendID(dst, idKeyOf(req.ID))
	return append(dst, d.refuse...)
}

// appendID appends the request id of id key k as the SDK writes it.
func appendID(dst []byte, k string) []byte {
	if k[0] == 's' {
		return ndjson.AppendString(dst, k[1:])
	}
	return append(dst, k[1:]...)
}
