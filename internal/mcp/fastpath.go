package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// The stdio fast path answers the calls an agent makes most, fs_read, fs_stat, fs_list,
// fs_write and fs_edit, without the go-sdk server: a tools/call line read from stdin is
// walked once (ndjson, no copy), sent to airlockd as invokeTool like any other call, and its
// response is written to stdout from the daemon's bytes: the adapter's result is the
// structuredContent as it came (the daemon checked it against the operation's result schema,
// compact), and a read's text is the result's content member, a JSON string already, spliced
// as it is. Through the SDK the same call decoded the request about ten times (each through a
// new 32 KiB buffer) and encoded the result three times over (result, response, message,
// compacting the nested JSON at each level): about half of a stat's time in airlock mcp and
// most of a 1 MiB read's (docs/mcp.md, "Benchmark").
//
// It takes only a call whose answer it can give exactly as the SDK would, and leaves every
// other line to the SDK, unchanged and in order:
//
//   - one JSON object of exactly jsonrpc "2.0", an id that is an integer or a string without
//     escapes, method "tools/call" and params of exactly name, arguments (an object) and
//     _meta, with no repeated or case-variant key;
//   - a tool listed now whose operation is fs.read, fs.stat, fs.list, fs.write or fs.edit,
//     keyed as through the SDK (invokeKeyed: a read gets a fresh idempotency key, a write
//     or an edit the key of its session, tool and arguments), and no idempotency key in
//     _meta;
//   - a session the SDK has begun: an initialize (2025 revisions) answered, and a request
//     _meta without the 2026-07-28 protocol version; or a request of the stateless revision
//     whose _meta is byte for byte one the SDK has already accepted on this connection (it
//     answered a call carrying it with a result), so that the SDK alone decides what a
//     _meta of that revision may hold, once a call of that revision has begun the session (a
//     server/discover begins none: see discoverSession). As the SDK does, a result names the server in its
//     _meta when the request is of the stateless revision, and is marked resultType
//     "complete" when the session began with it (TestFastPathAnswersAsTheSDK found the
//     difference).
//
// A cancelled call (notifications/cancelled) is aborted in the daemon and gets no answer, as
// through the SDK. The fast path is stdio's only: over Streamable HTTP the SDK's handler
// answers every call.
type fastPath struct {
	b *Bridge
	// serverInfo is the server's Implementation as a stateless-revision result's _meta
	// carries it.
	serverInfo json.RawMessage
	ss         *sdk.ServerSession // set once, by ServeStdio, before lines are read
	w          io.Writer          // the drainer's writer: responses counted, late ones dropped
	ctx        context.Context    // ended when the session ends
	end        context.CancelFunc // ends ctx
	wg         sync.WaitGroup     // the workers
	// jobs hands a call to a worker waiting for one; idle counts the workers waiting.
	jobs chan fastJob
	idle atomic.Int32

	mu       sync.Mutex
	ready    bool                          // ss is set, and stop has not begun
	inflight map[string]context.CancelFunc // id key → the call's cancel
	pending  map[string]string             // id key → _meta of a call the SDK handles
	accepted []string                      // _meta the SDK accepted, newest last
}

// Bounds of what the fast path remembers of the SDK's calls: a client sends one _meta on
// every call of a connection (the go-sdk and the TypeScript SDK do), so a handful is plenty.
const (
	maxPendingMeta  = 64
	maxAcceptedMeta = 4
	maxFastIDLen    = 128
	// maxIdleWorkers bounds the workers that wait for the next call. A call run on a new
	// goroutine grew its stack from the smallest size to what encoding a command and a
	// response takes, copying it several times: about a tenth of airlock mcp's CPU on a
	// stat. A worker keeps its stack from call to call.
	maxIdleWorkers = 16
)

// fastJob is one call the fast path runs.
type fastJob struct {
	ctx        context.Context // the call's, cancelled by notifications/cancelled
	key        string          // the drainer's key of id
	id         []byte          // the request id, to echo
	spec       toolSpec
	clientName string
	args       json.RawMessage
	serverInfo json.RawMessage // the _meta naming the server, for a stateless request
	complete   bool            // mark the result resultType "complete"
}

// fastRequest is a tools/call line as the fast path takes it: closed, so that a member it
// does not know sends the line to the SDK.
type fastRequest struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type fastParams struct {
	Name      json.RawMessage `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Meta      json.RawMessage `json:"_meta"`
}

// fastMeta is what the fast path reads of a request's _meta; other members are the SDK's
// (and, for a stateless request, decided by it through the accepted list).
type fastMeta struct {
	ProtocolVersion json.RawMessage `json:"io.modelcontextprotocol/protocolVersion"`
	IdempotencyKey  json.RawMessage `json:"io.airlock/idempotencyKey"`
	ClientInfo      json.RawMessage `json:"io.modelcontextprotocol/clientInfo"`
}

// fastCall is a tools/call line as the fast path reads it.
type fastCall struct {
	key       string          // the drainer's key of id
	id        json.RawMessage // as it came, to echo
	name      string
	args      json.RawMessage // compact, {} when absent
	meta      json.RawMessage // as it came, or nil
	stateless bool            // _meta names the 2026-07-28 revision or a later one
	// client is the clientInfo of _meta, nil when it has none (the one given at
	// initialize is the session's).
	client *sdk.Implementation
}

// parseFast reads line as a call the fast path may take, or reports false. It checks the
// line's form only; take checks it against the session and the tools.
func parseFast(line []byte) (fastCall, bool) {
	line = bytes.TrimSpace(line)
	if len(line) < 2 || line[0] != '{' || !bytes.Contains(line, []byte(`"tools/call"`)) {
		return fastCall{}, false
	}
	var req fastRequest
	var p fastParams
	if ndjson.DecodeAliased(line, &req, ndjson.Closed) != nil || string(req.JSONRPC) != `"2.0"` ||
		string(req.Method) != `"tools/call"` || len(req.Params) == 0 || req.Params[0] != '{' ||
		ndjson.DecodeAliased(req.Params, &p, ndjson.Closed) != nil {
		return fastCall{}, false
	}
	c := fastCall{id: req.ID, meta: p.Meta}
	var ok bool
	if c.key, ok = fastID(req.ID); !ok {
		return fastCall{}, false
	}
	if c.name, ok = ndjson.PlainString(p.Name); !ok {
		return fastCall{}, false
	}
	if len(p.Meta) > 0 {
		var m fastMeta
		if p.Meta[0] != '{' || ndjson.DecodeAliased(p.Meta, &m, ndjson.Open) != nil || len(m.IdempotencyKey) > 0 {
			return fastCall{}, false
		}
		if len(m.ProtocolVersion) > 0 {
			var v string
			if json.Unmarshal(m.ProtocolVersion, &v) != nil {
				return fastCall{}, false
			}
			c.stateless = v >= "2026-07-28" // as the SDK tells the revisions apart
		}
		if len(m.ClientInfo) > 0 && string(m.ClientInfo) != "null" {
			// Read strictly, as the SDK's decoder reads it (case-sensitive keys: encoding/json
			// would take "Name" for "name", which the SDK does not); anything else is the
			// SDK's to answer, or to take as no name.
			var info struct {
				Name json.RawMessage `json:"name"`
			}
			var name string
			if ndjson.DecodeAliased(m.ClientInfo, &info, ndjson.Open) != nil || json.Unmarshal(info.Name, &name) != nil {
				return fastCall{}, false
			}
			c.client = &sdk.Implementation{Name: name}
		}
	}
	if len(p.Arguments) > 0 && p.Arguments[0] != '{' {
		return fastCall{}, false // null or not an object: the SDK's answer
	}
	args, err := objectArguments(p.Arguments)
	if err != nil {
		return fastCall{}, false
	}
	c.args = args
	return c, true
}

// take starts the call of one whole line read from stdin and reports true, or reports false
// and leaves the line to the SDK. It keeps nothing of line.
func (f *fastPath) take(d *drainer, line []byte) bool {
	c, ok := parseFast(line)
	if !ok || d.inUse(c.key) {
		return false // a request id in use: check answers it
	}
	f.mu.Lock()
	ok = f.ready && (!c.stateless || f.isAccepted(c.meta))
	f.mu.Unlock()
	if !ok {
		return false
	}
	ip := f.ss.InitializeParams()
	if ip == nil || (!c.stateless && ip.ProtocolVersion >= "2026-07-28") {
		// Not begun, or a session of the stateless revision sent a call without its _meta:
		// the SDK's to answer.
		return false
	}
	s, ok := f.b.fastSpec(c.name)
	if !ok {
		return false
	}
	ctx, cancel := context.WithCancel(f.ctx)
	f.mu.Lock()
	if _, dup := f.inflight[c.key]; dup || !f.ready {
		f.mu.Unlock()
		cancel()
		return false
	}
	f.inflight[c.key] = cancel
	f.wg.Add(1) // the call, until a worker has it; stop waits for it
	f.mu.Unlock()
	d.pend(c.key)
	f.b.fastCalls.Add(1)
	// The SDK marks a tool result complete (resultType) by the revision the session began
	// with, and names the server in its _meta when the request is of the stateless revision.
	client := c.client
	if client == nil {
		client = ip.ClientInfo
	}
	j := fastJob{ctx: ctx, key: c.key, id: bytes.Clone(c.id), spec: s, clientName: clientNameOf(client),
		args: c.args, complete: ip.ProtocolVersion >= "2026-07-28"}
	if c.stateless {
		j.serverInfo = f.serverInfo
	}
	select {
	case f.jobs <- j:
		f.wg.Done() // counted as its worker
	default:
		go f.work(j)
	}
	return true
}

// work runs j, and then the calls handed to it while it waits, until the session ends or
// maxIdleWorkers others wait already.
func (f *fastPath) work(j fastJob) {
	defer f.wg.Done()
	for {
		f.run(j)
		if f.idle.Add(1) > maxIdleWorkers {
			f.idle.Add(-1)
			return
		}
		select {
		case j = <-f.jobs:
			f.idle.Add(-1)
		case <-f.ctx.Done():
			f.idle.Add(-1)
			return
		}
	}
}

// run makes one call and writes its response, or nothing when it was cancelled.
func (f *fastPath) run(j fastJob) {
	defer f.finish(j.key)
	// A write is keyed as the SDK's handler keys it (callFS), so that its retry, by either
	// door, is the same call; a read gets a key of its own.
	fp := ""
	if writes(j.spec.operation) {
		fp = callFingerprint(f.ss.ID(), j.spec.tool.Name, j.args, "")
	}
	data, failed, err := f.b.invokeKeyed(j.ctx, j.spec.operation, fp, j.clientName, j.args)
	if err != nil {
		return // cancelled: the SDK answers a cancelled call with nothing, and so does this
	}
	var out []byte
	if failed == nil {
		// A read's answer holds its text twice, a listing's about one and a half times:
		// the buffer comes from the pool of large line buffers, back once written.
		out, failed = appendFastResult(ndjson.GetBuffer(2*len(data)+512), j.id, j.spec.operation, data, j.serverInfo, j.complete)
	}
	if failed != nil {
		out, err = appendFastError(nil, j.id, failed, j.serverInfo, j.complete)
		if err != nil {
			f.b.log.Error("tool result not encodable", "tool", j.spec.tool.Name, "err", err)
			return
		}
	}
	if j.ctx.Err() != nil {
		return // cancelled while the answer was made
	}
	if _, err := f.w.Write(out); err != nil {
		f.b.log.Debug("stdout write failed", "err", err)
	}
	ndjson.PutBuffer(out)
}

// finish forgets a call that ended.
func (f *fastPath) finish(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.inflight[key]; ok {
		c()
		delete(f.inflight, key)
	}
}

// cancel cancels the call of id key k, if the fast path runs it (notifications/cancelled),
// and reports whether it does.
func (f *fastPath) cancel(k string) bool {
	f.mu.Lock()
	c := f.inflight[k]
	f.mu.Unlock()
	if c != nil {
		c()
	}
	return c != nil
}

// sdkCall notes the _meta of a call the SDK handles, to learn whether the SDK accepts it.
func (f *fastPath) sdkCall(k string, meta []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isAccepted(meta) || len(f.pending) >= maxPendingMeta {
		return
	}
	f.pending[k] = string(meta)
}

// answered notes the SDK's response line to the call of id key k, when it had a _meta
// pending: a result accepts that _meta. The line is read outside the lock: an SDK answer may
// be megabytes.
func (f *fastPath) answered(k string, line []byte) {
	f.mu.Lock()
	meta, ok := f.pending[k]
	delete(f.pending, k)
	f.mu.Unlock()
	if !ok {
		return
	}
	var r struct {
		Result json.RawMessage `json:"result"`
	}
	if ndjson.DecodeAliased(bytes.TrimSpace(line), &r, ndjson.Open) != nil || len(r.Result) == 0 || r.Result[0] != '{' {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isAccepted([]byte(meta)) {
		return
	}
	if len(f.accepted) == maxAcceptedMeta {
		f.accepted = f.accepted[1:]
	}
	f.accepted = append(f.accepted, meta)
}

// isAccepted reports whether meta is one the SDK accepted; f.mu is held.
func (f *fastPath) isAccepted(meta []byte) bool {
	for _, m := range f.accepted {
		if m == string(meta) {
			return true
		}
	}
	return false
}

// stop cancels the calls still running and waits for them and for the workers to end.
func (f *fastPath) stop() {
	f.mu.Lock()
	f.ready = false // take starts no more calls
	f.mu.Unlock()
	f.end()
	f.wg.Wait()
}

// fastSpec returns the tool name names when the fast path may call it.
func (b *Bridge) fastSpec(name string) (toolSpec, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.specs[name]
	if !ok || b.closed || s.kind != kindFS {
		return toolSpec{}, false
	}
	switch s.operation {
	case tooladapter.OpRead, tooladapter.OpStat, tooladapter.OpList, tooladapter.OpWrite, tooladapter.OpEdit:
		return s, true
	}
	return toolSpec{}, false
}

// fastID returns the drainer's key of a request id the fast path echoes as it came: an
// integer of at most 15 digits (which every JSON reader reads exactly) or a string without
// escapes.
func fastID(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || len(raw) > maxFastIDLen {
		return "", false
	}
	if raw[0] == '"' {
		s, ok := ndjson.PlainString(raw)
		if !ok {
			return "", false
		}
		return "s" + s, true
	}
	digits := raw
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(digits) > 1) {
		return "", false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return idKey(raw)
}

// appendFastResult appends the response to request id of a successful fs operation op whose
// adapter result is data: the text content (a read's content, a listing's lines, otherwise
// the result itself) and data as structuredContent, as callFS gives them to the SDK; with
// serverInfo, the _meta that names the server, and with complete, resultType "complete". It
// returns an error result instead when data is not the operation's result.
func appendFastResult(dst, id []byte, op string, data, serverInfo json.RawMessage, complete bool) ([]byte, *sdk.CallToolResult) {
	dst = append(dst, responsePrefix...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":{`...)
	if serverInfo != nil {
		dst = append(dst, `"_meta":{"`+sdk.MetaKeyServerInfo+`":`...)
		dst = append(dst, serverInfo...)
		dst = append(dst, "},"...)
	}
	dst = append(dst, `"content":[{"type":"text","text":`...)
	switch op {
	case tooladapter.OpRead:
		// The content member is a JSON string already, checked by the daemon: it is the
		// text as it is, escapes and all.
		// Members of json.RawMessage only: DecodeAliased walks the result once and slices it,
		// where a typed member would make it decode (and copy) the whole text again.
		var r struct {
			Content   json.RawMessage `json:"content"`
			BytesRead json.RawMessage `json:"bytesRead"`
			EOF       json.RawMessage `json:"eof"`
		}
		if ndjson.DecodeAliased(data, &r, ndjson.Open) != nil || len(r.Content) < 2 || r.Content[0] != '"' {
			return nil, errUnreadable()
		}
		if string(r.EOF) == "true" {
			dst = append(dst, r.Content...)
			break
		}
		n, err := strconv.ParseInt(string(r.BytesRead), 10, 64)
		if err != nil {
			return nil, errUnreadable()
		}
		// The note goes inside the string, before its closing quote, escaped as the SDK's
		// encoder escapes it.
		dst = append(dst, r.Content[:len(r.Content)-1]...)
		note := ndjson.AppendString(nil, readNote(n))
		dst = append(dst, note[1:]...)
	case tooladapter.OpList:
		text, ok := listText(data)
		if !ok {
			return nil, errUnreadable()
		}
		dst = ndjson.AppendString(dst, text)
	default:
		dst = ndjson.AppendString(dst, string(data))
	}
	dst = append(dst, `}],"structuredContent":`...)
	dst = append(dst, data...)
	if complete {
		dst = append(dst, `,"resultType":"complete"`...)
	}
	return append(dst, "}}\n"...), nil
}

// appendFastError appends the response to request id whose result is the error result res,
// encoded by the SDK's own encoder of a result; with serverInfo and complete as for
// appendFastResult.
func appendFastError(dst, id []byte, res *sdk.CallToolResult, serverInfo json.RawMessage, complete bool) ([]byte, error) {
	if serverInfo != nil {
		if res.Meta == nil {
			res.Meta = sdk.Meta{}
		}
		res.Meta[sdk.MetaKeyServerInfo] = serverInfo
	}
	body, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	if len(body) < 2 || body[len(body)-1] != '}' {
		return nil, errors.New("mcp: a tool result encodes to no object")
	}
	dst = append(dst, responsePrefix...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	if complete {
		dst = append(dst, body[:len(body)-1]...)
		dst = append(dst, `,"resultType":"complete"}`...)
	} else {
		dst = append(dst, body...)
	}
	return append(dst, "}\n"...), nil
}

// ServeStdio runs one MCP session on stdin and stdout, as StdioTransport does, with the fast
// path answering the fs calls it can (see fastPath) and server/discover answered in a session
// of its own (see discoverSession), until the client disconnects or ctx ends. A call the fast path runs when the session ends is cancelled, and ServeStdio returns
// once it has ended.
func (b *Bridge) ServeStdio(ctx context.Context, in io.ReadCloser, out io.Writer, maxLine int, drain time.Duration) error {
	impl, err := json.Marshal(b.impl)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	f := &fastPath{b: b, serverInfo: impl, ctx: fctx, end: cancel, jobs: make(chan fastJob),
		inflight: map[string]context.CancelFunc{}, pending: map[string]string{}}
	d := newDrainer(in, out, maxLine, drain)
	d.fast = f
	f.w = drainWriter{d}
	d.discover = &discoverSession{srv: b.srv, ctx: ctx, w: drainWriter{d}}
	ss, err := b.srv.Connect(ctx, d.transport(), nil)
	if err != nil {
		return err
	}
	defer d.discover.close()
	f.mu.Lock()
	f.ss, f.ready = ss, true
	f.mu.Unlock()
	defer f.stop()
	closed := make(chan error, 1)
	go func() { closed <- ss.Wait() }()
	select {
	case <-ctx.Done():
		ss.Close()
		<-closed
		return ctx.Err()
	case err := <-closed:
		return err
	}
}
