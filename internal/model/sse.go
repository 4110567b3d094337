package model

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// errLineTooLong ends a stream whose SSE line exceeds the line limit.
var errLineTooLong = errors.New("SSE line too long")

// lineReader splits a byte stream into lines ended by CRLF, LF or CR, as the SSE spec
// defines them, without holding more than max bytes of one line.
type lineReader struct {
	br   *bufio.Reader
	max  int
	line []byte
	// skipLF is set after a line ended in CR: an LF right after it completes a CRLF. It is
	// resolved on the next call, so that a line is returned without waiting for more input.
	skipLF bool
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 32<<10), max: max}
}

// next returns the next line without its terminator, valid until the next call. A final
// line without terminator is returned before io.EOF. Any other read error is returned as is.
func (r *lineReader) next() ([]byte, error) {
	r.line = r.line[:0]
	for {
		if r.br.Buffered() == 0 {
			if _, err := r.br.Peek(1); err != nil {
				if err == io.EOF && len(r.line) > 0 {
					return r.line, nil
				}
				return nil, err
			}
		}
		buf, _ := r.br.Peek(r.br.Buffered())
		if r.skipLF {
			r.skipLF = false
			if buf[0] == '\n' {
				_, _ = r.br.Discard(1)
				continue
			}
		}
		i := bytes.IndexAny(buf, "\r\n")
		n := i
		if i < 0 {
			n = len(buf)
		}
		if len(r.line)+n > r.max {
			return nil, errLineTooLong
		}
		r.line = append(r.line, buf[:n]...)
		if i < 0 {
			_, _ = r.br.Discard(n)
			continue
		}
		_, _ = r.br.Discard(i + 1)
		r.skipLF = buf[i] == '\r'
		return r.line, nil
	}
}

// decodeStream reads a server-sent event stream of completion chunks until "data: [DONE]"
// and accumulates the response. Protocol failures are *Error; a failed read of r is
// returned unwrapped, for the caller to classify (network, context, size limit).
//
// Event parsing follows the SSE spec (comments, field names, one optional space after the
// colon, data lines joined by LF, a leading BOM skipped). Two leniencies: the stream may end
// without [DONE] once a finish_reason was seen, and a final "data: [DONE]" needs no blank
// line after it.
func decodeStream(r io.Reader, lim limits, s scrubber, onDelta func(Delta)) (Response, error) {
	lr := newLineReader(r, lim.maxLineBytes)
	st := &streamState{lim: lim, s: s, onDelta: onDelta}
	var data []byte
	var event string
	hasData, first := false, true
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err == errLineTooLong {
			return Response{}, s.invalid(fmt.Sprintf("an SSE line is longer than %d bytes", lim.maxLineBytes), errTooLarge)
		}
		if err != nil {
			return Response{}, err
		}
		if first {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
			first = false
		}
		if len(line) == 0 {
			if hasData {
				d := data[:len(data)-1]
				if string(d) == "[DONE]" {
					return st.result()
				}
				if err := st.chunk(d, event); err != nil {
					return Response{}, err
				}
			}
			data, event, hasData = data[:0], "", false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "data":
			if len(data)+len(value)+1 > lim.maxLineBytes {
				return Response{}, s.invalid(fmt.Sprintf("an SSE event is longer than %d bytes", lim.maxLineBytes), errTooLarge)
			}
			data = append(append(data, value...), '\n')
			hasData = true
		case "event":
			event = string(value)
		}
	}
	if hasData && string(data[:len(data)-1]) == "[DONE]" {
		return st.result()
	}
	if st.finish != "" {
		return st.result()
	}
	return Response{}, s.newError(CodeUnavailable, true, 0, "the stream ended before [DONE]", nil)
}

// streamState accumulates the chunks of one stream.
type streamState struct {
	lim     limits
	s       scrubber
	onDelta func(Delta)

	text  []byte
	calls []*callState // by the provider's index; nil where no call was seen
	last  int          // index of the call touched last, for fragments without index
	// sawChoice is set once any chunk carried choice 0.
	sawChoice bool
	finish    string
	usage     Usage
}

type callState struct {
	id, name string
	args     []byte
	started  bool
}

// chunk applies one event's data.
func (st *streamState) chunk(data []byte, event string) error {
	var w wireCompletion
	jerr := json.Unmarshal(data, &w)
	if event == "error" {
		raw := w.Error
		if jerr != nil || !hasError(raw) {
			raw = data
		}
		return st.s.inBodyError(raw)
	}
	if jerr != nil {
		return st.s.invalid("a stream chunk is not a JSON completion chunk", jerr)
	}
	if len(w.Choices) == 0 && hasError(w.Error) {
		return st.s.inBodyError(w.Error)
	}
	if w.Usage != nil {
		st.usage = w.Usage.usage()
	}
	for _, c := range w.Choices {
		if c.Index != 0 {
			continue
		}
		st.sawChoice = true
		d := c.Delta
		if d == nil {
			d = c.Message
		}
		if d != nil {
			if d.Content != nil && *d.Content != "" {
				st.text = append(st.text, *d.Content...)
				st.emit(Delta{Text: *d.Content})
			}
			for _, tc := range d.ToolCalls {
				if err := st.toolFragment(tc); err != nil {
					return err
				}
			}
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			st.finish = *c.FinishReason
		}
	}
	return nil
}

func (st *streamState) emit(d Delta) {
	if st.onDelta != nil {
		st.onDelta(d)
	}
}

// toolFragment merges one tool call fragment. The id and name are taken from the first
// fragment that carries them (some servers repeat them in every fragment); arguments are
// concatenated. A fragment without index continues the last call, unless it carries a new
// id, which starts the next one.
func (st *streamState) toolFragment(tc wireToolCall) error {
	idx := st.last
	switch {
	case tc.Index != nil:
		idx = *tc.Index
	case len(st.calls) == 0:
		idx = 0
	case tc.ID != "" && st.calls[st.last] != nil && st.calls[st.last].id != "" && st.calls[st.last].id != tc.ID:
		idx = len(st.calls)
	}
	if idx < 0 {
		return st.s.invalid("a tool call has a negative index", nil)
	}
	if idx >= st.lim.maxToolCalls {
		return st.s.invalid(fmt.Sprintf("the response has more than %d tool calls", st.lim.maxToolCalls), errTooLarge)
	}
	for len(st.calls) <= idx {
		st.calls = append(st.calls, nil)
	}
	cs := st.calls[idx]
	if cs == nil {
		cs = &callState{}
		st.calls[idx] = cs
	}
	st.last = idx
	if cs.id == "" {
		cs.id = tc.ID
	}
	if cs.name == "" {
		cs.name = tc.Function.Name
	}
	args, err := argumentsText(tc.Function.Arguments)
	if err != nil {
		return st.s.invalid("tool call arguments", err)
	}
	if len(cs.args)+len(args) > st.lim.maxArgumentBytes {
		return st.s.invalid(fmt.Sprintf("tool call arguments are longer than %d bytes", st.lim.maxArgumentBytes), errTooLarge)
	}
	cs.args = append(cs.args, args...)
	if !cs.started && cs.name != "" {
		cs.started = true
		if cs.id == "" {
			cs.id = generatedID(idx)
		}
		st.emit(Delta{ToolCallIndex: idx, ToolCallID: cs.id, ToolCallName: cs.name})
	}
	return nil
}

// result checks the accumulated response.
func (st *streamState) result() (Response, error) {
	if !st.sawChoice {
		return Response{}, st.s.invalid("the stream carried no choices", nil)
	}
	resp := Response{
		Message:      Message{Role: RoleAssistant, Content: string(st.text)},
		FinishReason: st.finish,
		Usage:        st.usage,
	}
	for idx, cs := range st.calls {
		if cs == nil {
			continue
		}
		tc := ToolCall{ID: cs.id, Name: cs.name, Arguments: string(cs.args)}
		if err := finishToolCall(&tc, idx); err != nil {
			return Response{}, st.s.invalid("invalid tool call", err)
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, tc)
	}
	return resp, nil
}
