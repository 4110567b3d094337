package validate

// The tool-adapter harness behind `airlock validate tool-adapter`: a conformance run of the
// host tool-adapter protocol 1.0 against an adapter server already listening on its socket,
// with a grant whose root is a scratch directory the harness may populate.
//
// The harness is a test client, not the daemon: it writes and reads the frames itself
// (toolConn) so that it sees every raw line the adapter writes — for the identity, bounds and
// reflection checks — and so that it can send what the daemon's own checks never let through
// (the traversal corpus, aborts at will). Every adapter frame is checked with
// tooladapter.DecodeFrame, the daemon's decoder.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// Probe names of the tool-adapter harness, in report order. The happy-path probes are named
// after their operation (fs.list, …, fs.edit).
const (
	ProbeToolDescriptor  = "descriptor"
	ProbeToolBind        = "bind"
	ProbeToolBindRefused = "bind_refused"
	ProbeToolTraversal   = "traversal"
	ProbeToolBounds      = "bounds"
	ProbeToolIdempotency = "idempotency"
	ProbeToolAbort       = "abort"
	ProbeToolRevoke      = "revoke"
	ProbeToolIdentity    = "identity"
	ProbeToolFrames      = "frames"
	ProbeToolNoHandle    = "handle_not_reflected"
)

// ToolConfig is one run of the tool-adapter harness.
type ToolConfig struct {
	// Socket is the adapter's socket; empty means the descriptor's endpoint.path.
	Socket string
	// Descriptor is the grant's descriptor JSON, capability handle included.
	Descriptor []byte
	// Scratch is the directory the grant's root is: the harness creates its fixtures in a
	// fresh subdirectory of it and removes them at the end.
	Scratch string
	// Wait bounds each wait for a frame; zero means requestTimeoutMs plus two seconds.
	Wait time.Duration
}

// toolHarness is the state of one tool-adapter run.
type toolHarness struct {
	ctx    context.Context
	cfg    ToolConfig
	rep    *Report
	desc   *tooladapter.Descriptor
	handle []byte
	ident  tooladapter.Identity
	wait   time.Duration

	conn *toolConn
	run  string // this run's random id, in every requestId and idempotencyKey it sends
	seq  int

	base    string // the fixture directory, relative to the root
	baseAbs string
	outside string // a directory outside the root
	marker  string // the outside secret's content and name part
	needle  string

	identityProblems []string
	frameProblems    []string
	reflected        int
	sent             map[string]bool // requestIds of invokes and aborts written
	answered         map[string]bool // requestIds that got their result or aborted frame
}

// RunToolAdapter runs every tool-adapter probe against the adapter cfg names. It closes every
// connection it opened and removes its fixtures before it returns.
func RunToolAdapter(ctx context.Context, cfg ToolConfig) Report {
	var rep Report
	h := &toolHarness{ctx: ctx, cfg: cfg, rep: &rep, sent: map[string]bool{}, answered: map[string]bool{}}
	if err := h.setup(); err != nil {
		rep.add(Probe{Name: ProbeToolDescriptor, Detail: err.Error()})
		return rep
	}
	defer h.teardown()
	h.pass(ProbeToolDescriptor, "")
	if !h.probeBind() {
		for _, name := range h.laterProbes() {
			h.fail(name, "not run: no bound connection")
		}
		return rep
	}
	h.probeBindRefused()
	for _, op := range tooladapter.Operations {
		h.probeOperation(op)
	}
	h.probeTraversal()
	h.probeBounds()
	h.probeIdempotency()
	h.probeAbort()
	h.probeRevoke()
	h.result(ProbeToolIdentity, h.identityProblems, "")
	h.result(ProbeToolFrames, h.frameProblems, "")
	if h.reflected > 0 {
		h.fail(ProbeToolNoHandle, fmt.Sprintf("%d adapter frames contain the capability handle", h.reflected))
	} else {
		h.pass(ProbeToolNoHandle, "")
	}
	return rep
}

func (h *toolHarness) laterProbes() []string {
	names := append([]string{ProbeToolBindRefused}, tooladapter.Operations...)
	return append(names, ProbeToolTraversal, ProbeToolBounds, ProbeToolIdempotency, ProbeToolAbort,
		ProbeToolRevoke, ProbeToolIdentity, ProbeToolFrames, ProbeToolNoHandle)
}

func (h *toolHarness) pass(name, detail string) { h.add(Probe{Name: name, Pass: true, Detail: detail}) }
func (h *toolHarness) fail(name, detail string) { h.add(Probe{Name: name, Detail: detail}) }
func (h *toolHarness) skip(name, detail string) {
	h.add(Probe{Name: name, Pass: true, Skipped: true, Detail: detail})
}

// add records p. A detail never holds the handle, even if an adapter put it in an error code.
func (h *toolHarness) add(p Probe) {
	if len(h.handle) > 0 {
		p.Detail = strings.ReplaceAll(p.Detail, string(h.handle), "[redacted]")
	}
	h.rep.add(p)
}

func (h *toolHarness) result(name string, problems []string, note string) {
	if len(problems) == 0 {
		h.pass(name, note)
		return
	}
	if len(problems) > 8 {
		problems = append(problems[:8:8], fmt.Sprintf("and %d more", len(problems)-8))
	}
	h.fail(name, strings.Join(problems, "; "))
}

// setup parses the descriptor and creates the fixtures.
func (h *toolHarness) setup() error {
	var raw struct {
		Binding struct {
			HostInstanceID   string `json:"hostInstanceId"`
			SessionID        string `json:"sessionId"`
			Generation       int64  `json:"generation"`
			CapabilityHandle string `json:"capabilityHandle"`
		} `json:"binding"`
	}
	if err := json.Unmarshal(h.cfg.Descriptor, &raw); err != nil {
		return errors.New("the descriptor is not a JSON object")
	}
	b := raw.Binding
	d, e := tooladapter.ParseDescriptor(h.cfg.Descriptor, tooladapter.Binding{HostInstanceID: b.HostInstanceID, SessionID: b.SessionID, Generation: b.Generation})
	if e != nil {
		return fmt.Errorf("the descriptor is invalid: %s", e.Code)
	}
	h.desc, h.handle = d, []byte(b.CapabilityHandle)
	h.ident = tooladapter.Identity{AdapterID: d.AdapterID, AdapterVersion: d.AdapterVersion,
		HostInstanceID: b.HostInstanceID, SessionID: b.SessionID, Generation: b.Generation}
	if h.cfg.Socket == "" {
		h.cfg.Socket = d.Endpoint.Path
	}
	h.wait = h.cfg.Wait
	if h.wait <= 0 {
		h.wait = time.Duration(d.Limits.RequestTimeoutMs)*time.Millisecond + 2*time.Second
	}
	if h.cfg.Scratch == "" {
		return errors.New("no scratch directory")
	}
	if st, err := os.Stat(h.cfg.Scratch); err != nil || !st.IsDir() {
		return errors.New("the scratch directory is not a directory")
	}
	// A fresh tag per run: the fixtures, and every requestId and idempotencyKey, differ from
	// those of an earlier run against the same adapter process, which may remember keys per
	// grant for idempotencyTtlMs and must then answer a reused key with its first outcome.
	tag := randHex(6)
	h.run = tag
	h.marker = "airlock-outside-" + tag
	h.needle = "airlock-needle-" + tag
	h.base = "airlock-conformance-" + tag
	h.baseAbs = filepath.Join(h.cfg.Scratch, h.base)
	out, err := os.MkdirTemp("", "airlock-outside-")
	if err != nil {
		return err
	}
	h.outside = out
	return h.fixtures()
}

func (h *toolHarness) fixtures() error {
	b := h.baseAbs
	var errs []error
	mk := func(err error) { errs = append(errs, err) }
	mk(os.Mkdir(b, 0o700))
	mk(os.WriteFile(filepath.Join(h.outside, "secret-"+h.marker+".txt"), []byte(h.marker+"\n"), 0o600))
	mk(os.WriteFile(filepath.Join(b, "hello.txt"), []byte(helloText(h.needle)), 0o600))
	mk(os.Mkdir(filepath.Join(b, "dir"), 0o700))
	mk(os.WriteFile(filepath.Join(b, "dir", "inner.txt"), []byte("inner\n"), 0o600))
	mk(os.Mkdir(filepath.Join(b, "many"), 0o700))
	for i := range 5 {
		mk(os.WriteFile(filepath.Join(b, "many", fmt.Sprintf("e%d.txt", i)), []byte("e\n"), 0o600))
	}
	mk(os.WriteFile(filepath.Join(b, "window.txt"), []byte(windowText()), 0o600))
	big := min(int(h.desc.Limits.MaxResponseBytes)+4096, tooladapter.MaxContentBytes)
	mk(os.WriteFile(filepath.Join(b, "big.txt"), bytes.Repeat([]byte("a"), big), 0o600))
	mk(os.WriteFile(filepath.Join(b, "edit.txt"), []byte("alpha beta\n"), 0o600))
	mk(os.Symlink(h.outside, filepath.Join(b, "link-out")))
	mk(os.Symlink(filepath.Join(h.outside, "secret-"+h.marker+".txt"), filepath.Join(b, "link-file")))
	mk(os.Symlink("dir", filepath.Join(b, "link-in")))
	mk(os.Symlink("../..", filepath.Join(b, "link-up")))
	return errors.Join(errs...)
}

func (h *toolHarness) teardown() {
	if h.conn != nil {
		h.conn.close()
		h.conn = nil
	}
	if h.baseAbs != "" {
		os.RemoveAll(h.baseAbs)
	}
	if h.outside != "" {
		os.RemoveAll(h.outside)
	}
}

func helloText(needle string) string { return "hello conformance\nfind the " + needle + " here\n" }

func windowText() string {
	var sb strings.Builder
	for i := range 100 {
		sb.WriteByte(byte('A' + i%26))
	}
	return sb.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (h *toolHarness) rel(name string) string { return h.base + "/" + name }

// outFrame is a frame the harness writes. It is marshalled directly, not through
// tooladapter.EncodeFrame, because the traversal corpus needs invokes whose payloads the
// shared parser refuses.
type outFrame struct {
	ProtocolVersion  string              `json:"protocolVersion"`
	Kind             string              `json:"kind"`
	AdapterID        string              `json:"adapterId"`
	AdapterVersion   string              `json:"adapterVersion"`
	HostInstanceID   string              `json:"hostInstanceId"`
	SessionID        string              `json:"sessionId"`
	Generation       int64               `json:"generation"`
	CapabilityHandle string              `json:"capabilityHandle,omitempty"`
	Operations       []string            `json:"operations,omitempty"`
	Limits           *tooladapter.Limits `json:"limits,omitempty"`
	RequestID        string              `json:"requestId,omitempty"`
	TargetRequestID  string              `json:"targetRequestId,omitempty"`
	IdempotencyKey   string              `json:"idempotencyKey,omitempty"`
	Operation        string              `json:"operation,omitempty"`
	Payload          json.RawMessage     `json:"payload,omitempty"`
}

func (h *toolHarness) frame(kind tooladapter.Kind) *outFrame {
	id := h.ident
	return &outFrame{ProtocolVersion: tooladapter.ProtocolVersion, Kind: string(kind), AdapterID: id.AdapterID,
		AdapterVersion: id.AdapterVersion, HostInstanceID: id.HostInstanceID, SessionID: id.SessionID, Generation: id.Generation}
}

// inFrame is one line the adapter wrote; f is nil when it failed to decode.
type inFrame struct {
	raw []byte
	f   *tooladapter.Frame
}

type lineMsg struct {
	raw []byte
	err error
}

var errClosed = errors.New("the adapter closed the connection")

// toolConn is the harness's frame-level client: one reader goroutine delivers bounded lines.
type toolConn struct {
	h       *toolHarness
	c       net.Conn
	lines   chan lineMsg
	pending []*inFrame
	dead    error
}

func (h *toolHarness) dial() (*toolConn, error) {
	c, err := net.DialTimeout("unix", h.cfg.Socket, h.wait)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the adapter socket: %v", errors.Unwrap(err))
	}
	tc := &toolConn{h: h, c: c, lines: make(chan lineMsg, 16)}
	go tc.read(int(h.desc.Limits.MaxResponseBytes))
	return tc, nil
}

// read delivers each line up to max bytes (LF included), then the error that ends the stream.
func (tc *toolConn) read(max int) {
	defer close(tc.lines)
	br := bufio.NewReaderSize(tc.c, 64<<10)
	for {
		var line []byte
		for {
			chunk, err := br.ReadSlice('\n')
			line = append(line, chunk...)
			if len(line) > max {
				tc.lines <- lineMsg{err: fmt.Errorf("the adapter wrote a line over maxResponseBytes (%d)", max)}
				return
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if len(line) > 0 {
					tc.lines <- lineMsg{err: errors.New("the adapter wrote a line without LF")}
					return
				}
				tc.lines <- lineMsg{err: errClosed}
				return
			}
			break
		}
		tc.lines <- lineMsg{raw: bytes.TrimSuffix(line, []byte("\n"))}
	}
}

func (tc *toolConn) close() {
	tc.c.Close()
	for range tc.lines {
	}
}

func (tc *toolConn) send(f *outFrame) error {
	if f.RequestID != "" {
		tc.h.sent[f.RequestID] = true
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tc.c.SetWriteDeadline(time.Now().Add(tc.h.wait))
	if _, err := tc.c.Write(append(b, '\n')); err != nil {
		tc.dead = errClosed
		return errClosed
	}
	return nil
}

// observe checks one adapter line: reflection, decoding, kind and identity.
func (h *toolHarness) observe(raw []byte) *inFrame {
	if len(h.handle) > 0 && bytes.Contains(raw, h.handle) {
		h.reflected++
	}
	f, e := tooladapter.DecodeFrame(raw)
	if e != nil {
		field, _ := e.Details[tooladapter.DetailField].(string)
		h.frameProblems = append(h.frameProblems, fmt.Sprintf("a frame fails the daemon's decoder (field %q)", field))
		return &inFrame{raw: raw}
	}
	switch f.Kind {
	case tooladapter.KindBound, tooladapter.KindResult, tooladapter.KindAborted, tooladapter.KindRevoked:
	default:
		h.frameProblems = append(h.frameProblems, fmt.Sprintf("the adapter sent a %s frame", f.Kind))
	}
	if f.Kind == tooladapter.KindResult || f.Kind == tooladapter.KindAborted {
		switch {
		case !h.sent[f.RequestID]:
			h.frameProblems = append(h.frameProblems, fmt.Sprintf("a %s frame answers a request that was never sent", f.Kind))
		case h.answered[f.RequestID]:
			h.frameProblems = append(h.frameProblems, fmt.Sprintf("a second %s frame for one request", f.Kind))
		}
		h.answered[f.RequestID] = true
	}
	if f.Identity != h.ident {
		h.identityProblems = append(h.identityProblems, fmt.Sprintf("a %s frame carries another identity (%s)", f.Kind, identityDiff(f.Identity, h.ident)))
	}
	return &inFrame{raw: raw, f: f}
}

func identityDiff(got, want tooladapter.Identity) string {
	var d []string
	if got.AdapterID != want.AdapterID {
		d = append(d, "adapterId")
	}
	if got.AdapterVersion != want.AdapterVersion {
		d = append(d, "adapterVersion")
	}
	if got.HostInstanceID != want.HostInstanceID {
		d = append(d, "hostInstanceId")
	}
	if got.SessionID != want.SessionID {
		d = append(d, "sessionId")
	}
	if got.Generation != want.Generation {
		d = append(d, "generation")
	}
	return strings.Join(d, ", ")
}

// await returns the first frame match accepts, pending or new; frames it does not accept are
// kept for later waits. It fails when the connection ends or wait passes.
func (tc *toolConn) await(match func(*tooladapter.Frame) bool, wait time.Duration) (*inFrame, error) {
	for i, in := range tc.pending {
		if in.f != nil && match(in.f) {
			tc.pending = slices.Delete(tc.pending, i, i+1)
			return in, nil
		}
	}
	if tc.dead != nil {
		return nil, tc.dead
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-tc.h.ctx.Done():
			return nil, tc.h.ctx.Err()
		case <-timer.C:
			return nil, fmt.Errorf("no answer within %v", wait)
		case m, ok := <-tc.lines:
			if !ok {
				m.err = errClosed
			}
			if m.err != nil {
				tc.dead = m.err
				if m.err != errClosed {
					tc.h.frameProblems = append(tc.h.frameProblems, m.err.Error())
				}
				return nil, m.err
			}
			in := tc.h.observe(m.raw)
			if in.f != nil && match(in.f) {
				return in, nil
			}
			tc.pending = append(tc.pending, in)
		}
	}
}

// bind opens a connection and binds it; it returns the bound frame.
func (h *toolHarness) bind() (*toolConn, *tooladapter.Frame, error) {
	tc, err := h.dial()
	if err != nil {
		return nil, nil, err
	}
	f := h.frame(tooladapter.KindBind)
	f.CapabilityHandle = string(h.handle)
	f.Operations = h.desc.Operations
	l := h.desc.Limits
	f.Limits = &l
	if err := tc.send(f); err != nil {
		tc.close()
		return nil, nil, err
	}
	in, err := tc.await(func(*tooladapter.Frame) bool { return true }, h.wait)
	if err != nil {
		tc.close()
		return nil, nil, fmt.Errorf("%s: no bound frame: %v", h.bindText(), err)
	}
	if in.f == nil || in.f.Kind != tooladapter.KindBound {
		tc.close()
		return nil, nil, fmt.Errorf("%s: the first adapter frame is not a valid bound frame", h.bindText())
	}
	return tc, in.f, nil
}

// bindText renders the bind frame the harness sends, without the handle: the identity values
// come from the descriptor, and the adapter must accept exactly them.
func (h *toolHarness) bindText() string {
	id := h.ident
	return fmt.Sprintf("bind as adapterId %s, adapterVersion %s, hostInstanceId %s, sessionId %s, generation %d, operations %v",
		quote(id.AdapterID), quote(id.AdapterVersion), quote(id.HostInstanceID), quote(id.SessionID), id.Generation, h.desc.Operations)
}

func (h *toolHarness) probeBind() bool {
	tc, bound, err := h.bind()
	if err != nil {
		h.fail(ProbeToolBind, err.Error())
		return false
	}
	h.conn = tc
	var problems []string
	if !slices.Equal(bound.Operations, h.desc.Operations) {
		problems = append(problems, fmt.Sprintf("bound operations %v differ from the descriptor's %v (order included)", bound.Operations, h.desc.Operations))
	}
	if bound.Limits == nil {
		problems = append(problems, "bound carries no limits")
	} else {
		got, want := reflect.ValueOf(*bound.Limits), reflect.ValueOf(h.desc.Limits)
		for i := range got.NumField() {
			if got.Field(i).Int() != want.Field(i).Int() {
				tag := strings.Split(got.Type().Field(i).Tag.Get("json"), ",")[0]
				problems = append(problems, fmt.Sprintf("bound limit %s is %d, the descriptor's %d", tag, got.Field(i).Int(), want.Field(i).Int()))
			}
		}
	}
	h.result(ProbeToolBind, problems, "")
	return true
}

// probeBindRefused opens connections that must be closed without a byte written: a bind with
// another handle, and an invoke before any bind. A peer without the handle learns nothing.
func (h *toolHarness) probeBindRefused() {
	other := make([]byte, len(h.handle))
	for i := range other {
		other[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[randByte()%64]
	}
	bind := h.frame(tooladapter.KindBind)
	bind.CapabilityHandle = string(other)
	bind.Operations = h.desc.Operations
	l := h.desc.Limits
	bind.Limits = &l
	inv := h.frame(tooladapter.KindInvoke)
	inv.RequestID, inv.IdempotencyKey, inv.Operation = h.nextID("req"), h.nextID("key"), h.desc.Operations[0]
	inv.Payload = json.RawMessage(`{"path":"."}`)
	var problems []string
	for _, c := range []struct {
		what string
		f    *outFrame
	}{{"a bind with another handle", bind}, {"an invoke before bind", inv}} {
		tc, err := h.dial()
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if tc.send(c.f) == nil {
			select {
			case m := <-tc.lines:
				if m.err != errClosed {
					problems = append(problems, c.what+" was answered")
				}
			case <-time.After(h.wait):
				problems = append(problems, c.what+" left the connection open")
			case <-h.ctx.Done():
			}
		}
		tc.close()
	}
	h.result(ProbeToolBindRefused, problems, "")
}

func randByte() byte {
	var b [1]byte
	rand.Read(b[:])
	return b[0]
}

// live returns a bound connection, reconnecting when the last one ended.
func (h *toolHarness) live() (*toolConn, error) {
	if h.conn != nil && h.conn.dead == nil {
		return h.conn, nil
	}
	if h.conn != nil {
		h.conn.close()
		h.conn = nil
	}
	var err error
	for range 20 { // the adapter may take a moment to notice the last connection ended
		var tc *toolConn
		if tc, _, err = h.bind(); err == nil {
			h.conn = tc
			return tc, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("cannot bind again: %v", err)
}

// nextID returns a fresh requestId or idempotencyKey: prefix, the run's id and a sequence
// number, so that no two runs of the harness send the same one.
func (h *toolHarness) nextID(prefix string) string {
	h.seq++
	return fmt.Sprintf("%s-%s-%d", prefix, h.run, h.seq)
}

// maxSentText bounds the rendering of a request in a report.
const maxSentText = 240

// sentText renders a request as the harness sent it, the operation and its payload as compact
// JSON, for failure messages: an author must see which path and arguments failed.
func sentText(op string, payload any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if raw, ok := payload.(json.RawMessage); ok {
		buf.Write(raw)
	} else if enc.Encode(payload) != nil {
		return op
	}
	text := strings.TrimSpace(buf.String())
	if len(text) > maxSentText {
		cut := maxSentText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	return op + " " + text
}

// call sends one invoke and waits for its result; key "" means a fresh key.
func (h *toolHarness) call(op string, payload any, key string) (*tooladapter.Frame, error) {
	tc, err := h.live()
	if err != nil {
		return nil, fmt.Errorf("%s: not sent: %v", sentText(op, payload), err)
	}
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	id := h.nextID("req")
	if key == "" {
		key = h.nextID("key")
	}
	f := h.frame(tooladapter.KindInvoke)
	f.RequestID, f.IdempotencyKey, f.Operation, f.Payload = id, key, op, p
	if err := tc.send(f); err != nil {
		return nil, fmt.Errorf("%s: %v", sentText(op, payload), err)
	}
	in, err := tc.await(func(g *tooladapter.Frame) bool { return g.Kind == tooladapter.KindResult && g.RequestID == id }, h.wait)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", sentText(op, payload), err)
	}
	if in.f.Operation != op || in.f.IdempotencyKey != key {
		h.frameProblems = append(h.frameProblems, fmt.Sprintf("the result of %s does not echo its invoke's operation and idempotencyKey", sentText(op, payload)))
	}
	return in.f, nil
}

// callOK calls op and decodes the data of a successful result into v.
func (h *toolHarness) callOK(op string, payload any, v any) error {
	f, err := h.call(op, payload, "")
	if err != nil {
		return err
	}
	if !f.OK {
		if f.Error.Code == "not_found" {
			// Every path callOK sends exists: the harness created it beneath --scratch, which
			// an adapter over another data source does not serve.
			return fmt.Errorf("%s answered %s, but the harness created that path beneath --scratch, the grant's root",
				sentText(op, payload), describeFrame(f, nil))
		}
		return fmt.Errorf("%s answered %s", sentText(op, payload), describeFrame(f, nil))
	}
	if v != nil {
		if err := json.Unmarshal(f.Data, v); err != nil {
			return fmt.Errorf("%s: data: %v", sentText(op, payload), err)
		}
	}
	return nil
}

type (
	listData struct {
		Entries []struct {
			Name string `json:"name"`
			Type string `json:"type"`
			Size *int64 `json:"size"`
		} `json:"entries"`
		Truncated bool `json:"truncated"`
	}
	statData struct {
		Type string `json:"type"`
		Size int64  `json:"size"`
	}
	readData struct {
		Content   string `json:"content"`
		BytesRead int64  `json:"bytesRead"`
		EOF       bool   `json:"eof"`
	}
	searchData struct {
		Matches []struct {
			Path   string `json:"path"`
			Line   int64  `json:"line"`
			Column int64  `json:"column"`
			Text   string `json:"text"`
		} `json:"matches"`
		Truncated bool `json:"truncated"`
	}
	writeData struct {
		Created      bool   `json:"created"`
		BytesWritten int64  `json:"bytesWritten"`
		Digest       string `json:"digest"`
	}
	editData struct {
		Replacements int64  `json:"replacements"`
		Digest       string `json:"digest"`
	}
)

func sha(s string) string { s2 := sha256.Sum256([]byte(s)); return hex.EncodeToString(s2[:]) }

// probeOperation runs the happy path of one operation, or skips it when it is not granted.
// Every problem names the request it is about (sentText), path and arguments included.
func (h *toolHarness) probeOperation(op string) {
	if !h.desc.Grants(op) {
		h.skip(op, "not granted")
		return
	}
	hello := helloText(h.needle)
	var problems []string
	// check calls op with payload, decodes a success into v and, if that worked, runs verify,
	// whose problems are prefixed with the request.
	check := func(payload map[string]any, v any, verify func(bad func(format string, args ...any))) bool {
		if err := h.callOK(op, payload, v); err != nil {
			problems = append(problems, err.Error())
			return false
		}
		sent := sentText(op, payload)
		verify(func(format string, args ...any) { problems = append(problems, sent+": "+fmt.Sprintf(format, args...)) })
		return true
	}
	switch op {
	case tooladapter.OpList:
		var d listData
		check(map[string]any{"path": h.base, "maxEntries": 100}, &d, func(bad func(string, ...any)) {
			seen := map[string]string{}
			for _, e := range d.Entries {
				seen[e.Name] = e.Type
				if e.Name == "hello.txt" && e.Size != nil && *e.Size != int64(len(hello)) {
					bad("hello.txt listed with size %d, want %d", *e.Size, len(hello))
				}
			}
			for _, name := range []string{"dir", "hello.txt", "many", "window.txt"} {
				typ := map[string]string{"hello.txt": "file", "dir": "directory", "many": "directory", "window.txt": "file"}[name]
				if seen[name] != typ {
					bad("%s listed as %q, want %q (the harness created it under --scratch)", name, seen[name], typ)
				}
			}
			if d.Truncated {
				bad("a 10-entry directory listed as truncated")
			}
		})
	case tooladapter.OpStat:
		var d statData
		ok := check(map[string]any{"path": h.rel("hello.txt")}, &d, func(bad func(string, ...any)) {
			if d.Type != "file" || d.Size != int64(len(hello)) {
				bad("%s of %d bytes, want file of %d", d.Type, d.Size, len(hello))
			}
		})
		if ok {
			check(map[string]any{"path": "."}, &d, func(bad func(string, ...any)) {
				if d.Type != "directory" {
					bad("%s, want directory", d.Type)
				}
			})
		}
	case tooladapter.OpRead:
		var d readData
		check(map[string]any{"path": h.rel("hello.txt")}, &d, func(bad func(string, ...any)) {
			if d.Content != hello || d.BytesRead != int64(len(hello)) || !d.EOF {
				bad("gave %d bytes, eof %v, not the file's %d bytes with eof true", d.BytesRead, d.EOF, len(hello))
			}
		})
	case tooladapter.OpSearch:
		var d searchData
		check(map[string]any{"path": h.base, "query": h.needle}, &d, func(bad func(string, ...any)) {
			if len(d.Matches) != 1 {
				bad("found %d matches, want 1", len(d.Matches))
			} else if m := d.Matches[0]; m.Path != h.rel("hello.txt") || m.Line != 2 || m.Column != 10 {
				bad("match at %q line %d column %d, want %q line 2 column 10", m.Path, m.Line, m.Column, h.rel("hello.txt"))
			}
		})
	case tooladapter.OpWrite:
		var d writeData
		const content = "written by airlock validate\n"
		check(map[string]any{"path": h.rel("written.txt"), "content": content, "create": true, "overwrite": false}, &d, func(bad func(string, ...any)) {
			if !d.Created || d.BytesWritten != int64(len(content)) || d.Digest != sha(content) {
				bad("answered created %v, bytesWritten %d, digest %s; want true, %d, %s", d.Created, d.BytesWritten, d.Digest, len(content), sha(content))
			}
			if b, _ := os.ReadFile(filepath.Join(h.baseAbs, "written.txt")); string(b) != content {
				bad("the file under --scratch does not hold the content")
			}
		})
	case tooladapter.OpEdit:
		var d editData
		edits := []map[string]string{{"oldText": "beta", "newText": "gamma"}}
		check(map[string]any{"path": h.rel("edit.txt"), "edits": edits}, &d, func(bad func(string, ...any)) {
			if d.Replacements != 1 || d.Digest != sha("alpha gamma\n") {
				bad("answered replacements %d, digest %s; want 1, %s", d.Replacements, d.Digest, sha("alpha gamma\n"))
			}
			if b, _ := os.ReadFile(filepath.Join(h.baseAbs, "edit.txt")); string(b) != "alpha gamma\n" {
				bad("the file under --scratch holds %q", b)
			}
		})
	}
	h.result(op, problems, "")
}

// traversalCorpus returns paths that must never resolve to anything but an error: escapes,
// absolute paths, backslashes, control characters, non-canonical forms, symlinks to outside
// and inside the root, and symlinked parents.
func (h *toolHarness) traversalCorpus() []string {
	b := h.base
	secret := "secret-" + h.marker + ".txt"
	return []string{
		"..", "../", "../..", "./..", "../" + filepath.Base(h.outside), "../../../../../../etc/passwd",
		b + "/..", b + "/../..", b + "/dir/../../..", b + "/../../" + filepath.Base(h.outside) + "/" + secret,
		"/", "/etc/passwd", filepath.Join(h.outside, secret), h.baseAbs + "/hello.txt", "//" + b,
		"..\\..", b + "\\..\\..", "..\\" + b, b + "\\hello.txt",
		b + "/hello.txt\x00", "a\x00b", b + "/\nhello.txt", "\x7f", b + "/hello.txt\r", "\x1b[2J",
		"", b + "//hello.txt", "./" + b + "/hello.txt", b + "/dir/../hello.txt", b + "/.",
		b + "/link-out", b + "/link-out/" + secret, b + "/link-file", b + "/link-in", b + "/link-in/inner.txt",
		b + "/link-up", b + "/link-up/" + filepath.Base(h.cfg.Scratch), "\u2025/x", "%2e%2e/" + secret,
		strings.Repeat("a/", 2100) + "x",
	}
}

func (h *toolHarness) traversalPayload(op, p string) any {
	switch op {
	case tooladapter.OpSearch:
		return map[string]any{"path": p, "query": h.marker}
	case tooladapter.OpWrite:
		return map[string]any{"path": p, "content": "airlock traversal probe\n", "create": true, "overwrite": true}
	case tooladapter.OpEdit:
		return map[string]any{"path": p, "edits": []map[string]string{{"oldText": h.marker, "newText": "x"}}}
	}
	return map[string]any{"path": p}
}

func (h *toolHarness) probeTraversal() {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	corpus := h.traversalCorpus()
	ops, unanswered := 0, 0
	for _, op := range h.desc.Operations {
		ops++
		for _, p := range corpus {
			if unanswered == 3 {
				break // a hung adapter would take a wait per path
			}
			payload := h.traversalPayload(op, p)
			f, err := h.call(op, payload, "")
			if err != nil {
				unanswered++
				bad("%v", err)
				continue
			}
			if f.OK {
				bad("%s succeeded, want an error result", sentText(op, payload))
			}
			if bytes.Contains(f.Data, []byte(h.marker)) || bytes.Contains(f.Data, []byte(h.needle)) {
				bad("%s returned content it must refuse", sentText(op, payload))
			}
		}
	}
	if h.desc.Grants(tooladapter.OpSearch) {
		var d searchData
		payload := map[string]any{"path": h.base, "query": h.marker}
		if err := h.callOK(tooladapter.OpSearch, payload, &d); err == nil && len(d.Matches) > 0 {
			bad("%s found the outside file through a symlink", sentText(tooladapter.OpSearch, payload))
		}
	}
	if h.desc.Grants(tooladapter.OpList) {
		var d listData
		payload := map[string]any{"path": h.base}
		if err := h.callOK(tooladapter.OpList, payload, &d); err == nil {
			for _, e := range d.Entries {
				if strings.HasPrefix(e.Name, "link-") {
					bad("%s reports the symlink %s as a %s; symlinks are omitted", sentText(tooladapter.OpList, payload), e.Name, e.Type)
				}
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(h.outside, "secret-"+h.marker+".txt")); err != nil || string(b) != h.marker+"\n" {
		bad("the outside file was modified")
	}
	if ents, _ := os.ReadDir(h.outside); len(ents) != 1 {
		bad("a file was created outside the root")
	}
	h.result(ProbeToolTraversal, problems, fmt.Sprintf("%d paths × %d operations refused", len(corpus), ops))
}

func (h *toolHarness) probeBounds() {
	list, read := h.desc.Grants(tooladapter.OpList), h.desc.Grants(tooladapter.OpRead)
	if !list && !read {
		h.skip(ProbeToolBounds, "neither fs.list nor fs.read is granted")
		return
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if list {
		var d listData
		payload := map[string]any{"path": h.rel("many"), "maxEntries": 2}
		if err := h.callOK(tooladapter.OpList, payload, &d); err != nil {
			bad("%v", err)
		} else if len(d.Entries) > 2 || !d.Truncated {
			bad("%s of a directory of 5 files gave %d entries, truncated %v; want at most 2, truncated true",
				sentText(tooladapter.OpList, payload), len(d.Entries), d.Truncated)
		}
	}
	if read {
		text := windowText()
		for _, w := range []struct{ off, max int }{{0, 10}, {10, 7}, {95, 10}, {99, 1}, {100, 5}, {200, 5}} {
			var d readData
			payload := map[string]any{"path": h.rel("window.txt"), "offset": w.off, "maxBytes": w.max}
			if err := h.callOK(tooladapter.OpRead, payload, &d); err != nil {
				if w.off > len(text) {
					continue // reading past the end may be an error
				}
				bad("%v", err)
				continue
			}
			lo := min(w.off, len(text))
			want := text[lo:min(lo+w.max, len(text))]
			if d.Content != want || d.BytesRead != int64(len(want)) || d.EOF != (lo+w.max >= len(text)) {
				bad("%s of a 100-byte file gave %d bytes, eof %v; want %d bytes, eof %v",
					sentText(tooladapter.OpRead, payload), d.BytesRead, d.EOF, len(want), lo+w.max >= len(text))
			}
		}
		size := int(h.desc.Limits.MaxResponseBytes) + 4096
		size = min(size, tooladapter.MaxContentBytes)
		payload := map[string]any{"path": h.rel("big.txt"), "maxBytes": size}
		f, err := h.call(tooladapter.OpRead, payload, "")
		switch {
		case err != nil:
			bad("a read larger than maxResponseBytes: %v", err)
		case f.OK:
			var d readData
			json.Unmarshal(f.Data, &d)
			if d.BytesRead >= h.desc.Limits.MaxResponseBytes || d.Content != strings.Repeat("a", len(d.Content)) || int64(len(d.Content)) != d.BytesRead {
				bad("%s of a %d-byte file returned %d bytes, not a prefix that fits maxResponseBytes %d",
					sentText(tooladapter.OpRead, payload), size, d.BytesRead, h.desc.Limits.MaxResponseBytes)
			}
		}
	}
	h.result(ProbeToolBounds, problems, "")
}

func (h *toolHarness) probeIdempotency() {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	key := h.nextID("idem")
	if h.desc.Grants(tooladapter.OpWrite) {
		p := map[string]any{"path": h.rel("idem.txt"), "content": "first\n", "create": true, "overwrite": true}
		sent := sentText(tooladapter.OpWrite, p) + " with idempotencyKey " + key
		f1, err := h.call(tooladapter.OpWrite, p, key)
		if err != nil || !f1.OK {
			h.fail(ProbeToolIdempotency, fmt.Sprintf("the first %s failed: %v", sent, describeFrame(f1, err)))
			return
		}
		abs := filepath.Join(h.baseAbs, "idem.txt")
		os.WriteFile(abs, []byte("changed by the harness\n"), 0o600)
		f2, err := h.call(tooladapter.OpWrite, p, key)
		if err != nil || !f2.OK {
			bad("the replay of %s failed: %v", sent, describeFrame(f2, err))
		} else if !sameJSON(f1.Data, f2.Data) {
			bad("the replay of %s answered other data than the first result", sent)
		}
		if b, _ := os.ReadFile(abs); string(b) != "changed by the harness\n" {
			bad("the replay of %s wrote the file again", sent)
		}
		h.result(ProbeToolIdempotency, problems, "fs.write replayed")
		return
	}
	op := h.fallbackOp()
	sent := sentText(op, h.happyPayload(op)) + " with idempotencyKey " + key
	f1, err1 := h.call(op, h.happyPayload(op), key)
	f2, err2 := h.call(op, h.happyPayload(op), key)
	switch {
	case err1 != nil || err2 != nil || !f1.OK || !f2.OK:
		bad("%s twice: %v, then %v", sent, describeFrame(f1, err1), describeFrame(f2, err2))
	case !sameJSON(f1.Data, f2.Data):
		bad("the replay of %s answered other data than the first result", sent)
	}
	h.result(ProbeToolIdempotency, problems, op+" replayed")
}

func (h *toolHarness) fallbackOp() string {
	for _, op := range []string{tooladapter.OpRead, tooladapter.OpStat, tooladapter.OpList, tooladapter.OpSearch, tooladapter.OpEdit} {
		if h.desc.Grants(op) {
			return op
		}
	}
	return h.desc.Operations[0]
}

func (h *toolHarness) happyPayload(op string) any {
	switch op {
	case tooladapter.OpList:
		return map[string]any{"path": h.base}
	case tooladapter.OpSearch:
		return map[string]any{"path": h.base, "query": h.needle}
	case tooladapter.OpWrite:
		return map[string]any{"path": h.rel("abort.txt"), "content": "abort\n", "create": true, "overwrite": true}
	case tooladapter.OpEdit:
		return map[string]any{"path": h.rel("hello.txt"), "edits": []map[string]string{{"oldText": "hello", "newText": "hello"}}}
	case tooladapter.OpRead:
		return map[string]any{"path": h.rel("big.txt"), "maxBytes": 4096}
	}
	return map[string]any{"path": h.rel("hello.txt")}
}

func describeFrame(f *tooladapter.Frame, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case f.OK:
		return "ok"
	default:
		return "error " + f.Error.Code + " (" + quoteN(f.Error.Message, maxQuotedMessage) + ")"
	}
}

func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// probeAbort sends an invoke and, at once, an abort of it: the adapter must answer an aborted
// frame that names both ids, and at most one result for the target.
func (h *toolHarness) probeAbort() {
	tc, err := h.live()
	if err != nil {
		h.fail(ProbeToolAbort, err.Error())
		return
	}
	op := h.fallbackOp()
	p, _ := json.Marshal(h.happyPayload(op))
	target, id := h.nextID("req"), h.nextID("abort")
	inv := h.frame(tooladapter.KindInvoke)
	inv.RequestID, inv.IdempotencyKey, inv.Operation, inv.Payload = target, h.nextID("key"), op, p
	ab := h.frame(tooladapter.KindAbort)
	ab.RequestID, ab.TargetRequestID = id, target
	if err := tc.send(inv); err != nil {
		h.fail(ProbeToolAbort, err.Error())
		return
	}
	if err := tc.send(ab); err != nil {
		h.fail(ProbeToolAbort, err.Error())
		return
	}
	sent := fmt.Sprintf("abort %s of %s (requestId %s)", id, sentText(op, json.RawMessage(p)), target)
	in, err := tc.await(func(f *tooladapter.Frame) bool { return f.Kind == tooladapter.KindAborted }, h.wait)
	if err != nil {
		h.fail(ProbeToolAbort, fmt.Sprintf("%s: no aborted frame: %v", sent, err))
		return
	}
	var problems []string
	if in.f.RequestID != id || in.f.TargetRequestID != target {
		problems = append(problems, sent+": the aborted frame does not carry the abort's requestId and targetRequestId")
	}
	isTarget := func(f *tooladapter.Frame) bool { return f.Kind == tooladapter.KindResult && f.RequestID == target }
	results := 0
	if _, err := tc.await(isTarget, 500*time.Millisecond); err == nil {
		results++
		if _, err := tc.await(isTarget, 200*time.Millisecond); err == nil {
			results++
		}
	}
	if results > 1 {
		problems = append(problems, sent+": the aborted invoke got two results")
	}
	h.result(ProbeToolAbort, problems, fmt.Sprintf("aborted %v", in.f.Aborted))
}

// probeRevoke sends revoke: the adapter must answer revoked and close the connection.
func (h *toolHarness) probeRevoke() {
	tc, err := h.live()
	if err != nil {
		h.fail(ProbeToolRevoke, err.Error())
		return
	}
	if err := tc.send(h.frame(tooladapter.KindRevoke)); err != nil {
		h.fail(ProbeToolRevoke, err.Error())
		return
	}
	if _, err := tc.await(func(f *tooladapter.Frame) bool { return f.Kind == tooladapter.KindRevoked }, h.wait); err != nil {
		h.fail(ProbeToolRevoke, fmt.Sprintf("no revoked frame: %v", err))
		return
	}
	if _, err := tc.await(func(*tooladapter.Frame) bool { return false }, h.wait); err != errClosed {
		h.fail(ProbeToolRevoke, "the adapter did not close the connection after revoked")
		return
	}
	h.pass(ProbeToolRevoke, "")
}
