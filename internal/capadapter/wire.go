package capadapter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// ProtocolVersion is the adapter protocol version this package speaks, on every envelope.
const ProtocolVersion = 1

// Wire bounds of protocol v1.
const (
	// MaxFrameBytes bounds one frame in either direction, its LF included.
	MaxFrameBytes = 65536
	// MaxArgsBytes bounds the encoded args of one invoke.
	MaxArgsBytes = 1024
	// MaxResultBytes bounds the encoded result of one observe or invoke.
	MaxResultBytes = 4096
)

// The four methods of protocol v1.
const (
	MethodList     = "list"
	MethodDescribe = "describe"
	MethodObserve  = "observe"
	MethodInvoke   = "invoke"
)

// request is one request envelope. Each method sends exactly its key set (list: the first
// three; describe and observe: + capabilityId; invoke: all six), which the reference adapter
// checks with set equality.
type request struct {
	ProtocolVersion int             `json:"protocolVersion"`
	ID              string          `json:"id"`
	Method          string          `json:"method"`
	CapabilityID    string          `json:"capabilityId,omitempty"`
	Action          string          `json:"action,omitempty"`
	Args            json.RawMessage `json:"args,omitempty"`
}

// Request is a request a Client sends. The Client assigns the id. ProtocolVersion zero means
// ProtocolVersion; conformance probes set another value on purpose. Args are sent verbatim
// for invoke (an empty Args is sent as {}), and never for the other methods.
type Request struct {
	ProtocolVersion int
	Method          string
	CapabilityID    string
	Action          string
	Args            json.RawMessage
}

// EncodeRequest returns the frame of r with id, LF included, or too_large when it would
// exceed MaxFrameBytes. The frame is what ndjson.Marshal makes of the request struct; plain
// strings (printable ASCII without quote or backslash, which every validated id, method and
// action is) are appended directly, anything else goes through encoding/json.
func EncodeRequest(r Request, id string) ([]byte, error) {
	w := request{ProtocolVersion: r.ProtocolVersion, ID: id, Method: r.Method, CapabilityID: r.CapabilityID}
	if w.ProtocolVersion == 0 {
		w.ProtocolVersion = ProtocolVersion
	}
	if r.Method == MethodInvoke {
		w.Action = r.Action
		w.Args = r.Args
		if len(bytes.TrimSpace(w.Args)) == 0 {
			w.Args = json.RawMessage("{}")
		}
		if !json.Valid(w.Args) {
			return nil, newError(CodeInvalidArgs, "args are not one JSON value")
		}
	}
	var frame []byte
	if plainString(w.ID) && plainString(w.Method) && plainString(w.CapabilityID) && plainString(w.Action) {
		frame = appendRequest(make([]byte, 0, 112+len(w.Args)), &w)
	} else {
		var err error
		if frame, err = ndjson.Marshal(&w); err != nil {
			return nil, newError(CodeInvalidRequest, "request is not serializable")
		}
	}
	if len(frame) > MaxFrameBytes {
		return nil, newError(CodeTooLarge, "request frame exceeds "+strconv.Itoa(MaxFrameBytes)+" bytes")
	}
	return frame, nil
}

// plainString reports whether encoding/json writes s as its bytes between quotes.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// appendRequest appends w as ndjson.Marshal would, for plain strings.
func appendRequest(b []byte, w *request) []byte {
	b = append(b, `{"protocolVersion":`...)
	b = strconv.AppendInt(b, int64(w.ProtocolVersion), 10)
	b = append(b, `,"id":"`...)
	b = append(b, w.ID...)
	b = append(b, `","method":"`...)
	b = append(b, w.Method...)
	b = append(b, '"')
	if w.CapabilityID != "" {
		b = append(b, `,"capabilityId":"`...)
		b = append(b, w.CapabilityID...)
		b = append(b, '"')
	}
	if w.Action != "" {
		b = append(b, `,"action":"`...)
		b = append(b, w.Action...)
		b = append(b, '"')
	}
	if len(w.Args) > 0 {
		b = append(b, `,"args":`...)
		var buf bytes.Buffer
		_ = json.Compact(&buf, w.Args) // valid: checked by the caller
		b = append(b, buf.Bytes()...)
	}
	return append(b, "}\n"...)
}

// Response is one decoded response envelope: exactly one of Result (any JSON value, null
// included) or ErrorCode (one of the closed set) is set.
type Response struct {
	ID        string
	Result    json.RawMessage
	ErrorCode string
}

// responseWire is the closed key set of a response; its members are raw so that presence
// ("result": null is present) and exact spelling can be checked.
type responseWire struct {
	ProtocolVersion json.RawMessage `json:"protocolVersion"`
	ID              json.RawMessage `json:"id"`
	Result          json.RawMessage `json:"result"`
	Error           json.RawMessage `json:"error"`
}

type errorWire struct {
	Code json.RawMessage `json:"code"`
}

// DecodeResponse strictly decodes one response frame (without its LF) answering the request
// wantID. It fails with malformed_response unless the frame is one JSON object holding only
// protocolVersion (exactly the number 1), id (the string wantID), and exactly one of result
// or error, where error is an object whose only member is a code of the closed set; duplicate
// and case-variant keys are refused anywhere. It never returns adapter text in an error.
func DecodeResponse(frame []byte, wantID string) (Response, error) {
	if !utf8.Valid(frame) {
		return Response{}, newError(CodeMalformedResponse, "response is not UTF-8")
	}
	var w responseWire
	if err := ndjson.Decode(frame, &w, ndjson.Closed); err != nil {
		return Response{}, newError(CodeMalformedResponse, envelopeProblem(err))
	}
	if string(w.ProtocolVersion) != "1" {
		return Response{}, newError(CodeMalformedResponse, "response protocolVersion is not 1")
	}
	id := wantID
	if !quotedEqual(w.ID, wantID) && (w.ID == nil || json.Unmarshal(w.ID, &id) != nil || id == "" || id != wantID) {
		return Response{}, newError(CodeMalformedResponse, "response id does not match the request")
	}
	switch {
	case w.Result != nil && w.Error != nil:
		return Response{}, newError(CodeMalformedResponse, "response has both result and error")
	case w.Result != nil:
		return Response{ID: id, Result: w.Result}, nil
	case w.Error != nil:
		var ew errorWire
		var code string
		if ndjson.Decode(w.Error, &ew, ndjson.Closed) != nil || ew.Code == nil ||
			json.Unmarshal(ew.Code, &code) != nil || !protocolCodes[code] {
			return Response{}, newError(CodeMalformedResponse, "response error is not {code} with a protocol code")
		}
		return Response{ID: id, ErrorCode: code}, nil
	}
	return Response{}, newError(CodeMalformedResponse, "response has neither result nor error")
}

// envelopeProblem says why a response is not a strict protocol envelope, in words that point
// an adapter's author at the fix, without quoting the frame.
func envelopeProblem(err error) string {
	var de *ndjson.DecodeError
	if errors.As(err, &de) {
		switch de.Reason {
		case ndjson.ReasonSyntax:
			return "response is not one well-formed JSON object (stdout carries responses only: print logs to stderr)"
		case ndjson.ReasonDuplicateKey:
			return "response has a duplicated key"
		case ndjson.ReasonCaseVariant:
			return "response has a key that differs only in case from protocolVersion, id, result or error"
		case ndjson.ReasonUnknownField:
			return "response has a key other than protocolVersion, id, result and error"
		}
	}
	return "response is not a protocol envelope object"
}

// quotedEqual reports whether raw is exactly the JSON string "s", unescaped.
func quotedEqual(raw []byte, s string) bool {
	return s != "" && len(raw) == len(s)+2 && raw[0] == '"' && raw[len(raw)-1] == '"' && string(raw[1:len(raw)-1]) == s &&
		!bytes.ContainsAny(raw[1:len(raw)-1], "\\\"")
}

// FrameReader reads LF-terminated frames of at most MaxFrameBytes bytes, LF included. Unlike
// ndjson.Reader it skips nothing: an empty line is a malformed frame, as the protocol has no
// blank lines, and the bound counts the LF exactly as the protocol states it.
type FrameReader struct {
	br  *bufio.Reader
	buf []byte
}

// NewFrameReader returns a FrameReader of r.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{br: bufio.NewReaderSize(r, 4096)}
}

// errFrameTooLarge and errFrameTruncated are the frame-level failures next reports; io.EOF
// means the stream ended cleanly between frames.
var (
	errFrameTooLarge  = newError(CodeTooLarge, "response frame exceeds 65536 bytes")
	errFrameTruncated = newError(CodeUnavailable, "adapter closed stdout inside a frame")
	errFrameEmpty     = newError(CodeMalformedResponse, "empty response frame")
)

// Next returns the next frame without its LF; the slice is valid until the next call. After
// an error the stream is out of sync and the child must be discarded.
func (fr *FrameReader) Next() ([]byte, error) {
	fr.buf = fr.buf[:0]
	for {
		chunk, err := fr.br.ReadSlice('\n')
		if len(fr.buf)+len(chunk) > MaxFrameBytes {
			return nil, errFrameTooLarge
		}
		fr.buf = append(fr.buf, chunk...)
		switch {
		case err == nil:
			line := fr.buf[:len(fr.buf)-1]
			if len(line) == 0 {
				return nil, errFrameEmpty
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(fr.buf) == 0 {
				return nil, io.EOF
			}
			return nil, errFrameTruncated
		default:
			return nil, err
		}
	}
}

// validStrict reports whether data is one well-formed JSON value without duplicate keys.
func validStrict(data []byte) error { return ndjson.Valid(data) }
