package validate

// This file owns the tool-adapter harness's frame-level client: the frames it writes, the
// connection and its bounded reader, the checks every adapter line passes (reflection, decoding,
// kind, identity, one answer per request sent), bind, and the call helpers the probes use.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

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
