package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// StdinDrainTimeout bounds how long a stdio session, once stdin has closed, waits for the
// requests it has read to be answered. It is airlock-fs's default request deadline (30 s,
// from admission) and 10 s for the hops around it, so that a call read just before stdin
// closed is answered with its own outcome under a default grant; a call that runs longer (a
// grant with a longer deadline, an action of up to two minutes, a wedged daemon) is answered
// with a JSON-RPC error saying the server stopped waiting, so a stuck call cannot keep the
// process alive.
const StdinDrainTimeout = 40 * time.Second

// CodeDrainTimeout is the JSON-RPC error code of a request still unanswered when
// StdinDrainTimeout passed after stdin closed: the server's internal error, since the call
// itself did not fail (it may still take effect).
const CodeDrainTimeout = -32603

// methodListen is the request of a stateless-revision (2026-07-28) client's notification
// stream (SEP-2575), which the server answers only when the stream ends.
const methodListen = "subscriptions/listen"

// StdioTransport returns the transport of a session on stdin and stdout that answers every
// request it reads. The go-sdk's stdio connection treats the end of stdin as the end of the
// session: requests still queued or running then are cancelled and their responses refused,
// so `printf '<initialize>\n<tools/list>\n<tools/call>\n' | airlock mcp …` answered only
// initialize. Here the end of stdin reaches the SDK only once every request read (a message
// with a method and an id, not cancelled by notifications/cancelled, and not a
// subscriptions/listen stream, which lasts as long as the session) has had its response
// written, or StdinDrainTimeout (drain, when positive) has passed, when each one still
// unanswered is answered CodeDrainTimeout and a late response to it is dropped.
//
// Requests are tracked on the bytes, below the SDK's connection, so that the connection
// stays the SDK's own (it learns the negotiated protocol revision, which decides whether a
// batch is allowed). A line reaches the SDK once its newline is read (or stdin ends), as MCP's
// stdio transport delimits messages, without the spaces around it. A line the SDK's
// connection cannot read as a message, on which it would end the session, does not reach it:
// it is answered with a JSON-RPC error with id null, -32700 or -32600 (check), and serving
// goes on. A line over maxLine (the SDK's DefaultMaxLineLength when not positive) ends the
// session, as the end of stdin does, with ErrLineTooLarge: the rest of it, which may never
// end, is not read, so the stream cannot be read in step again. It is answered -32600 with
// id null, and the requests read before it are answered first, within the drain.
func StdioTransport(in io.ReadCloser, out io.Writer, maxLine int, drain time.Duration) sdk.Transport {
	return newDrainer(in, out, maxLine, drain).transport()
}

// ServeFailure answers an MCP client on stdio for a server that cannot serve: every request
// read from in, initialize first, gets the JSON-RPC error failure, until in ends or ctx ends
// (which closes in, ending a read of a pipe or a socket read through the runtime's poller).
// Notifications and responses get nothing; a line that is not JSON, or not a JSON-RPC
// message, or over maxLine, is answered as StdioTransport answers it. No SDK session runs:
// under 2025-11-25 and before, the go-sdk server answers a request other than initialize,
// until an initialize has succeeded, with its own error ("method … is invalid during session
// initialization"), ahead of any middleware, so only initialize got the failure.
func ServeFailure(ctx context.Context, in io.ReadCloser, out io.Writer, maxLine int, failure *jsonrpc.Error) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // as the SDK writes
	if err := enc.Encode(failure); err != nil {
		return err
	}
	d := newDrainer(in, out, maxLine, 0)
	d.refuse = append(append([]byte(`,"error":`), bytes.TrimSpace(body.Bytes())...), '}')
	stop := context.AfterFunc(ctx, func() { drainReader{d}.Close() })
	defer stop()
	_, err := io.Copy(io.Discard, drainReader{d})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// ErrLineTooLarge ends a stdio session (StdioTransport, ServeStdio) whose client sent a line
// over the bound.
var ErrLineTooLarge = errors.New("a line on stdin exceeds the message bound")

func newDrainer(in io.ReadCloser, out io.Writer, maxLine int, drain time.Duration) *drainer {
	if drain <= 0 {
		drain = StdinDrainTimeout
	}
	if maxLine <= 0 {
		maxLine = sdk.DefaultMaxLineLength
	}
	return &drainer{in: in, out: out, maxLine: maxLine, drain: drain, pending: map[string]int{}, expired: map[string]bool{},
		changed: make(chan struct{}, 1), closed: make(chan struct{})}
}

// transport is the SDK's transport on the drainer's reader and writer.
func (d *drainer) transport() sdk.Transport {
	// The SDK's bound is the drainer's and the newline before a line, which its reader may
	// count with it: the drainer gives it no longer line.
	return &sdk.IOTransport{Reader: drainReader{d}, Writer: drainWriter{d}, MaxLineLength: d.maxLine + 1}
}

// drainer tracks the requests read from in until their responses are written to out.
type drainer struct {
	in      io.ReadCloser
	out     io.Writer
	maxLine int
	drain   time.Duration
	// fast, when set, takes the tools/call lines it answers itself out of what the SDK
	// reads (ServeStdio).
	fast *fastPath
	// discover, when set, takes the server/discover requests out of what the SDK reads and
	// answers them in a session of their own (ServeStdio).
	discover *discoverSession
	// refuse, when set, is what follows the id in the answer to every request: the error
	// member and the end of the response (ServeFailure). Nothing reaches the SDK then.
	refuse []byte

	// Only Read touches these. line is the unfinished line read so far, held back from the
	// SDK until it ends (so that the fast path sees every line whole), and at most maxLine
	// long. give is what the SDK is to read next: whole lines, in order, less those the fast
	// path took; chunk is stdin's read buffer.
	line  []byte
	give  []byte
	gbuf  []byte // give's backing array
	chunk []byte
	// end is stdin's error (io.EOF at its end), or ErrLineTooLarge. Read reports it once the
	// SDK has read every line before it, and those lines' requests are answered (waited).
	end    error
	waited bool
	// noBatches is set once an initialize read names a revision whose session the SDK's
	// connection ends on a batch (check).
	noBatches bool

	wmu sync.Mutex // serializes writes to out; taken before mu
	// outGone is set, under wmu, once out's reader has gone (watchOut): what is written
	// after it is dropped, as nobody can read it, and a write would end the process with
	// SIGPIPE.
	outGone bool

	mu      sync.Mutex     // guards the fields below
	pending map[string]int // id key → requests of that id read and not answered
	expired map[string]bool
	// dropping counts, by id key, the requests cancelled by notifications/cancelled whose
	// SDK response is still to come and is not to be written.
	dropping map[string]int
	batched  map[string]bool // id key → a request of a batch given to the SDK, not answered
	changed  chan struct{}   // signalled when pending shrinks

	closeOnce sync.Once
	closed    chan struct{}
}

type drainReader struct{ d *drainer }

// stdinChunk is how much Read asks of stdin at once.
const stdinChunk = 64 << 10

// Read gives the SDK the lines read from stdin, noting the requests of each; the lines the
// fast path takes are left out. At the end of stdin (or on a read error) it waits for the
// requests read to be answered before it reports it.
//
// It waits only once the SDK has read every line before the end: the SDK's decoder asks for
// more only when it has decoded (and handed its connection) every whole line it has, so each
// request waited for is one the SDK has. A last line without its newline, given with the end,
// was waited for before the SDK had it: it was answered only by the drain deadline.
func (r drainReader) Read(p []byte) (int, error) {
	d := r.d
	for {
		if len(d.give) > 0 {
			n := copy(p, d.give)
			d.give = d.give[n:]
			return n, nil
		}
		if d.end != nil {
			if !d.waited {
				d.wait()
				d.waited = true
			}
			return 0, d.end
		}
		if d.chunk == nil {
			d.chunk = make([]byte, stdinChunk)
		}
		d.gbuf = d.gbuf[:0]
		n, err := d.in.Read(d.chunk)
		d.scan(d.chunk[:n])
		if err != nil && d.end == nil {
			if len(d.line) > 0 {
				d.whole(d.line) // a last line without its newline, a message too
			}
			d.line = d.line[:0]
			d.end = err
		}
		d.give = d.gbuf
	}
}

// Close closes stdin and ends a wait for answers.
func (r drainReader) Close() error {
	r.d.closeOnce.Do(func() { close(r.d.closed) })
	return r.d.in.Close()
}

// scan splits b into lines, continuing the unfinished one, and takes each whole one (whole).
// A line over maxLine ends the reading there: it is answered -32600 (id null) and end is set
// to ErrLineTooLarge, without reading it to its end, which may be never.
func (d *drainer) scan(b []byte) {
	for len(b) > 0 && d.end == nil {
		i := bytes.IndexByte(b, '\n')
		n := len(b)
		if i >= 0 {
			n = i
		}
		if d.maxLine > 0 && len(d.line)+n > d.maxLine {
			d.reply(jsonrpc.CodeInvalidRequest, "Invalid Request: a line over "+strconv.Itoa(d.maxLine)+" bytes; the session ends")
			d.end = fmt.Errorf("%w of %d bytes", ErrLineTooLarge, d.maxLine)
			d.line = d.line[:0]
			return
		}
		if i < 0 {
			d.line = append(d.line, b...)
			return
		}
		line := b[:i] // the whole line is in b: no copy
		if len(d.line) > 0 {
			d.line = append(d.line, line...)
			line = d.line
		}
		d.whole(line)
		d.line, b = d.line[:0], b[i+1:]
	}
}

// whole takes one whole line read from stdin: the fast path's, if it takes it; else the SDK's
// to read, its requests noted, when the SDK's connection reads it as a message; else answered
// here (check), since the SDK's connection ends the session on a line it cannot read, and
// cancels the requests it is running then. A blank line is nothing.
func (d *drainer) whole(line []byte) {
	if d.fast != nil && d.fast.take(d, line) {
		return
	}
	line = bytes.TrimSpace(line) // the SDK's reader refuses a space after the value
	if len(line) == 0 {
		return
	}
	if d.refuse != nil {
		d.refuseLine(line)
		return
	}
	if code, msg := d.check(line); code != 0 {
		d.reply(code, msg)
		return
	}
	d.note(line)
	if d.discover != nil && d.discover.take(line) {
		return
	}
	d.gbuf = append(append(d.gbuf, line...), '\n')
}

// message is what the drainer reads of a JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method json.RawMessage `json:"method"`
	Params json.RawMessage `json:"params"`
}

// decodeMessage reads raw's members, strictly by the walk (no copy) or, for a message the walk
// refuses (a repeated or case-variant key), as encoding/json reads it into a map, which is
// closer to what the SDK does: member names match exactly, as in the SDK's case-sensitive
// decoder (a struct would take "Id" for "id"), and the last of repeated ones wins.
func decodeMessage(raw []byte, m *message) bool {
	if ndjson.DecodeAliased(raw, m, ndjson.Open) == nil {
		return true
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil || members == nil {
		return false
	}
	*m = message{ID: members["id"], Method: members["method"], Params: members["params"]}
	return true
}

// note records the requests of one line read, and forgets those it cancels.
func (d *drainer) note(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	if line[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(line, &batch) != nil {
			return
		}
		for _, m := range batch {
			d.note(m)
		}
		return
	}
	var m message
	if line[0] != '{' || !decodeMessage(line, &m) || len(m.Method) == 0 {
		return
	}
	var method string
	if json.Unmarshal(m.Method, &method) != nil {
		return
	}
	if method == "notifications/cancelled" {
		// The MCP server sends no response to a cancelled request: the request is settled
		// here, and the SDK's response to it, which its connection writes whatever the
		// handler returns, is dropped (drainWriter). The fast path writes none itself.
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(m.Params, &p) == nil {
			if k, ok := idKey(p.RequestID); ok {
				d.cancelled(k, d.fast != nil && d.fast.cancel(k))
			}
		}
		return
	}
	if method == "initialize" {
		// Member names match exactly, as in the SDK's decoder; a revision unread is none.
		var p map[string]json.RawMessage
		var v string
		if json.Unmarshal(m.Params, &p) != nil || json.Unmarshal(p["protocolVersion"], &v) != nil || !batchRevision(v) {
			d.noBatches = true
		}
	}
	if method == methodListen {
		// A subscriptions/listen stream is answered only when it ends, and it ends with the
		// session: waiting for its answer at the end of stdin held the process until the
		// drain deadline, or until the client killed it (the TypeScript SDK's stdio client
		// sends SIGTERM 2 s after it closed stdin).
		return
	}
	if k, ok := idKey(m.ID); ok {
		d.pend(k)
		if d.fast != nil && len(m.Params) > 0 {
			var p struct {
				Meta json.RawMessage `json:"_meta"`
			}
			if ndjson.DecodeAliased(m.Params, &p, ndjson.Open) == nil && len(p.Meta) > 0 {
				d.fast.sdkCall(k, p.Meta)
			}
		}
	}
}

// pend counts one request of id key k read and not answered.
func (d *drainer) pend(k string) {
	d.mu.Lock()
	d.pending[k]++
	d.mu.Unlock()
}

// idKey returns the key of a JSON-RPC id as the SDK answers it: a number as an integer (the
// SDK reads 1 and 1.0 as one id), a string as its decoded text. Null and absent ids are no
// request's.
func idKey(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return "s" + s, true
	case 'n', 't', 'f', '{', '[':
		return "", false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return "", false
	}
	return "n" + strconv.FormatInt(int64(f), 10), true
}

// answered forgets one request of id key k.
func (d *drainer) answered(k string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending[k] == 0 {
		return
	}
	if d.pending[k]--; d.pending[k] == 0 {
		delete(d.pending, k)
	}
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// cancelled settles a request of id key k that notifications/cancelled cancelled, if one is
// unanswered: it is no longer waited for, and unless the fast path runs it (fast), the next
// response to k the SDK writes is dropped. A request already answered is left alone: its
// response is out. It holds the write lock, so that a response being written either goes
// first (and the request is no longer unanswered) or is dropped.
func (d *drainer) cancelled(k string, fast bool) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.mu.Lock()
	unanswered := d.pending[k] > 0
	if unanswered && !fast {
		if d.dropping == nil {
			d.dropping = map[string]int{}
		}
		d.dropping[k]++
	}
	d.mu.Unlock()
	if unanswered {
		d.answered(k)
	}
}

// wait returns once no request read is unanswered, after answering those left when the drain
// deadline passes, or once the reader is closed, or once stdout's reader has gone: a client
// that exited closed both ends, and the requests it left can be answered to no one, so the
// session ends at once and cancels them (TestDirClientGoneEndsItsCalls). It waited for them
// until the drain deadline, so that a call waiting for the operator's approval could still
// be approved and take effect for a client long gone, and then died of SIGPIPE writing the
// deadline's answers.
func (d *drainer) wait() {
	t := time.NewTimer(d.drain)
	defer t.Stop()
	gone, stop := d.watchOut()
	defer stop()
	for {
		d.mu.Lock()
		n := len(d.pending)
		d.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-d.changed:
		case <-d.closed:
			return
		case <-gone:
			return
		case <-t.C:
			d.expire()
			return
		}
	}
}

// outGonePoll is how often wait looks whether stdout's reader has gone: a poll(2) that does
// not block, a few times a second for at most the drain deadline, only once stdin has ended.
// A client that exits is seen within it.
const outGonePoll = 100 * time.Millisecond

// watchOut returns a channel closed once out, a pipe or a socket, has no reader left (poll
// reports POLLERR or POLLHUP), and sets outGone then; stop ends the watch and waits for it.
// An out without a file descriptor, or one that never hangs up (a regular file), is never
// gone.
func (d *drainer) watchOut() (gone <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	sc, ok := d.out.(syscall.Conn)
	if !ok {
		return ch, func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return ch, func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(outGonePoll)
		defer tick.Stop()
		for {
			if hungUp(rc) {
				d.wmu.Lock()
				d.outGone = true
				d.wmu.Unlock()
				close(ch)
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return ch, func() {
		close(done)
		wg.Wait()
	}
}

// hungUp reports whether the file descriptor of rc has no reader left: poll(2) without
// waiting and without asking for any event, which still reports POLLERR (a pipe without a
// reader) and POLLHUP (a socket whose peer closed, a terminal hung up).
func hungUp(rc syscall.RawConn) bool {
	var hup bool
	err := rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd)}}
		n, err := unix.Poll(p, 0)
		hup = err == nil && n > 0 && p[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
	})
	return err == nil && hup
}

// expire answers every request still pending with CodeDrainTimeout and drops what the SDK
// writes for them later. It holds the write lock throughout, so that a response the SDK is
// writing either goes first (and its request is no longer pending) or is dropped.
func (d *drainer) expire() {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.mu.Lock()
	var keys []string
	for k := range d.pending {
		keys = append(keys, k)
		d.expired[k] = true
	}
	clear(d.pending)
	d.mu.Unlock()
	for _, k := range keys {
		line := appendID([]byte(responsePrefix), k)
		line = append(line, `,"error":{"code":`+strconv.Itoa(CodeDrainTimeout)+
			`,"message":"airlock mcp: stdin closed and the call did not finish within `+d.drain.String()+
			`; it may still take effect"}}`+"\n"...)
		if _, err := d.out.Write(line); err != nil {
			return
		}
	}
}

type drainWriter struct{ d *drainer }

// Write writes one or more messages of the SDK to stdout, and notes the responses among them
// once written. A response to a request the drain deadline answered already, or to one
// cancelled by notifications/cancelled, is dropped.
func (w drainWriter) Write(p []byte) (int, error) {
	d := w.d
	var keys []string
	for rest := p; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		keys = responseKeys(line, keys)
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.outGone {
		return len(p), nil
	}
	d.mu.Lock()
	drop := len(keys) == 1 && (d.expired[keys[0]] || d.dropping[keys[0]] > 0)
	if drop {
		if d.expired[keys[0]] {
			delete(d.expired, keys[0])
		} else if d.dropping[keys[0]]--; d.dropping[keys[0]] == 0 {
			delete(d.dropping, keys[0])
		}
	}
	d.mu.Unlock()
	if drop {
		return len(p), nil
	}
	if d.fast != nil && len(keys) == 1 {
		// Before the write: a client that sends its next call with the same _meta as soon
		// as it reads this answer finds that _meta accepted already.
		d.fast.answered(keys[0], p)
	}
	n, err := d.out.Write(p)
	if err == nil {
		for _, k := range keys {
			d.answered(k)
		}
		d.unbatch(keys)
	}
	return n, err
}

func (w drainWriter) Close() error { return nil }

// responsePrefix is how the SDK's encoder begins every message with an id: a response is
// that, the id, and ,"result": or ,"error": (or the end, for one with neither); a request
// to the client goes on with ,"method":.
const responsePrefix = `{"jsonrpc":"2.0","id":`

// responseKeys appends the id keys of the responses in one written line: a response, or a
// batch of them. The SDK writes the members of a message in a fixed order, so the id of a
// response is found without reading its result; anything else is read in full.
func responseKeys(line []byte, keys []string) []string {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return keys
	}
	if rest, ok := bytes.CutPrefix(line, []byte(responsePrefix)); ok {
		i := 0
		for i < len(rest) && (rest[i] == '-' || rest[i] >= '0' && rest[i] <= '9') {
			i++
		}
		if i > 0 {
			if k, ok := idKey(rest[:i]); ok {
				after := rest[i:]
				if bytes.HasPrefix(after, []byte(`,"result":`)) || bytes.HasPrefix(after, []byte(`,"error":`)) || string(after) == "}" {
					return append(keys, k)
				}
				if bytes.HasPrefix(after, []byte(`,"method":`)) {
					return keys // a request to the client
				}
			}
		}
	}
	if line[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(line, &batch) == nil {
			for _, m := range batch {
				keys = responseKeys(m, keys)
			}
		}
		return keys
	}
	var m message
	// A message with an id and no method is a response (the SDK reads it so too).
	if line[0] != '{' || !decodeMessage(line, &m) || len(m.Method) > 0 {
		return keys
	}
	if k, ok := idKey(m.ID); ok {
		keys = append(keys, k)
	}
	return keys
}

var (
	_ io.ReadCloser  = drainReader{}
	_ io.WriteCloser = drainWriter{}
)
