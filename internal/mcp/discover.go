package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// methodDiscover is the stateless revision's probe (SEP-2575): it names the revisions, the
// capabilities and the instructions, and begins nothing.
const methodDiscover = "server/discover"

// discoverSession answers stdio's server/discover requests in an SDK session of their own,
// beside the session that answers everything else (ServeStdio), as over Streamable HTTP,
// where a discover goes to the stateless handler and an initialize to the stateful one.
//
// On one connection the go-sdk takes a discover for the start of a stateless-revision
// session: it stores the discover's revision and capabilities as the session's
// InitializeParams (Server.discover, on a transport that serves 2026-07-28, as stdio does),
// which is what it reads to tell whether the session began. A client that probed and then
// chose 2025-11-25, as docs/mcp.md says it may, had its initialize refused (`duplicate
// "initialize" received`, code 0) and no session of that revision; and a discover after an
// initialize turned the session into a stateless one, which gets no unsolicited
// notifications/tools/list_changed. The SDK has no option to make a discover a mere probe, so
// it never reaches the session that serves the client's revision.
//
// The discover session is connected at the first discover, already marked as of the
// stateless revision, so that it is never taken for a session of 2025-11-25 that waits for
// unsolicited notifications. Its responses go through the drainer's writer, which counts
// them as it counts the other session's.
type discoverSession struct {
	srv *sdk.Server
	ctx context.Context
	w   io.WriteCloser // the drainer's writer

	mu     sync.Mutex
	in     *io.PipeWriter     // the session's stdin; nil until the first discover
	ss     *sdk.ServerSession // set with in
	closed bool
}

// take hands line (trimmed, one whole line the SDK can read) to the discover session and
// reports true when it is a server/discover request; otherwise, or once the discover
// session is closed, it reports false and the line is the main session's.
func (p *discoverSession) take(line []byte) bool {
	if !bytes.Contains(line, []byte(`"`+methodDiscover+`"`)) || !isDiscover(line) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.in == nil {
		r, w := io.Pipe()
		state := &sdk.ServerSessionState{InitializeParams: &sdk.InitializeParams{ProtocolVersion: statelessRevision},
			NegotiatedProtocolVersion: statelessRevision}
		ss, err := p.srv.Connect(p.ctx, &sdk.IOTransport{Reader: r, Writer: p.w}, &sdk.ServerSessionOptions{State: state})
		if err != nil {
			r.Close()
			return false
		}
		p.in, p.ss = w, ss
	}
	// The session's reader takes each line as it comes: the write does not wait on a reply.
	_, err := p.in.Write(append(bytes.Clone(line), '\n'))
	return err == nil
}

// close ends the discover session, once the main one has ended (every discover read has been
// answered by then, or given up on by the drain), and waits for it.
func (p *discoverSession) close() {
	p.mu.Lock()
	p.closed = true
	in, ss := p.in, p.ss
	p.mu.Unlock()
	if in == nil {
		return
	}
	in.Close()
	ss.Wait()
}

// isDiscover reports whether line is one server/discover request (not a notification, nor
// in a batch).
func isDiscover(line []byte) bool {
	var m message
	if len(line) == 0 || line[0] != '{' || !decodeMessage(line, &m) {
		return false
	}
	var method string
	if json.Unmarshal(m.Method, &method) != nil || method != methodDiscover {
		return false
	}
	_, ok := idKey(m.ID)
	return ok
}
