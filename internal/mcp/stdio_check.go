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
// servers go on past a bad line.

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
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return jsonrpc.CodeInvalidRequest, "Invalid Request: " + err.Error()
	}
	return 0, ""
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
	line := append([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":`), strconv.Itoa(code)...)
	line = append(line, `,"message":`...)
	line = ndjson.AppendString(line, msg)
	line = append(line, "}}\n"...)
	d.wmu.Lock()
	defer d.wmu.Unlock()
	_, _ = d.out.Write(line) // a stdout gone fails the SDK's next write too
}
