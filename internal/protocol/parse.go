package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Identifier bounds, in Unicode code points. They are the runtime limits of the original
// implementation, which the JSON Schemas in schemas/ repeat exactly.
const (
	MaxRequestIDLen      = 128
	MaxSessionIDLen      = 256
	MaxIdempotencyKeyLen = 512
	MaxOperationLen      = 32
	// MaxClientNameLen bounds the envelope's client member (an MCP client's name).
	MaxClientNameLen = 128
	// MaxSafeInteger is the largest integer every JSON peer represents exactly (2^53 − 1).
	MaxSafeInteger = 1<<53 - 1
)

// ParseError is a command that could not be accepted. Version and RequestID are what the error
// response echoes; RequestID is empty when none could be read. Close is set when the
// connection must end after the answer (a framing error or an incompatible major version).
type ParseError struct {
	*Error
	Version   string
	RequestID string
	Close     bool
}

// Unwrap exposes the wire error.
func (e *ParseError) Unwrap() error { return e.Error }

// FrameError converts a framing error from the NDJSON reader into a ParseError.
func FrameError(err error) *ParseError {
	var fe *ndjson.FrameError
	if !errors.As(err, &fe) {
		return &ParseError{Error: Errorf(CodeInvalidJSON, "unreadable line"), Version: Version1, Close: true}
	}
	pe := &ParseError{Version: Version1, Close: true}
	switch fe.Code {
	case ndjson.CodeLineTooLarge:
		pe.Error = Errorf(CodeLineTooLarge, "line exceeds %d bytes", fe.MaxLineBytes).
			With("maxLineBytes", fe.MaxLineBytes).With("actualBytes", fe.ActualBytes)
		if fe.ActualIsLowerBound {
			pe.Error.With("actualBytesIsLowerBound", true)
		}
	default:
		pe.Error = Errorf(CodeInvalidUTF8, "line is not valid UTF-8")
	}
	return pe
}

// ParseCommand parses one line into a Command. Unknown outer members are tolerated, so that a
// newer minor version can add some; duplicated members and members that differ only in case
// from a known one are not. The payload is only checked to be an object here.
func ParseCommand(line []byte) (*Command, *ParseError) {
	// The command and its raw members share one allocation. The members are slices of line
	// (ndjson.DecodeAliased): each is converted to the command's own value below, and only the
	// payload, which the command keeps as it is, is copied.
	st := &struct {
		cmd Command
		w   wireCommand
	}{}
	w := &st.w
	if err := ndjson.DecodeAliased(line, w, ndjson.Open); err != nil {
		var de *ndjson.DecodeError
		if errors.As(err, &de) && de.Reason == ndjson.ReasonSyntax {
			return nil, &ParseError{Error: Errorf(CodeInvalidJSON, "line is not valid JSON"), Version: Version1, Close: true}
		}
		pe := &ParseError{Error: fieldError(err), Version: Version1}
		// Echo what can still be read, so the client can correlate the refusal.
		pe.Version, pe.RequestID = salvage(line)
		// A line from a foreign major is refused as such, whatever else is wrong with it: the
		// peer speaks another protocol and the connection cannot continue.
		if v, _ := ParseVersion(pe.Version); v.Major != 1 && v.Major != 2 {
			pe.Error = incompatible(v)
			pe.Close = true
		}
		return nil, pe
	}

	cmd := &st.cmd
	fail := func(e *Error) (*Command, *ParseError) {
		return nil, &ParseError{Error: e, Version: cmd.Version.Raw, RequestID: cmd.RequestID}
	}

	// The version decides how everything else is read, so it comes first.
	// As in Pi Daemon, a protocolVersion that is not a string of 1 to 32 characters is a bad
	// member; a string of that size not of the form <major>.<minor> is a bad version.
	vs, ok := rawVersion(w.ProtocolVersion)
	v, vok := ParseVersion(vs)
	if !vok {
		e := Errorf(CodeInvalidProtocolVersion, "protocolVersion must be a string of the form <major>.<minor>")
		if !ok || vs == "" || len(vs) > maxVersionLen {
			e = invalidField("protocolVersion", "must be a string of 1 to %d characters", maxVersionLen)
		}
		cmd.Version.Raw = Version1
		cmd.RequestID = echoRequestID(w.RequestID)
		return fail(e)
	}
	cmd.Version = v
	cmd.RequestID = echoRequestID(w.RequestID)
	if v.Major != 1 && v.Major != 2 {
		c, pe := fail(incompatible(v))
		pe.Close = true
		return c, pe
	}

	// echoRequestID has read it: it returns the requestId exactly when it is valid.
	if cmd.RequestID == "" {
		return fail(invalidField("requestId", "must be a string of 1 to %d characters without control characters", MaxRequestIDLen))
	}

	op, ok := rawOperation(w.Operation)
	if !ok || op == "" || utf8.RuneCountInString(op) > MaxOperationLen {
		return fail(invalidField("operation", "must be a string of 1 to %d characters", MaxOperationLen))
	}
	spec, known := operations[op]
	if !known || spec.minMajor > v.Major {
		return fail(Errorf(CodeUnknownOperation, "unknown operation for protocol %s", v.Raw).With("operation", truncate(op, MaxOperationLen)))
	}
	cmd.Operation = op

	// The identity members an operation does not take are ignored, unread, as Pi Daemon's
	// parser ignores them: a client that sends one with every command is not refused.
	takesSession, takesGen, takesKey := spec.identity.members()
	if w.SessionID != nil && takesSession {
		s, ok := rawString(w.SessionID)
		if !ok || !validIdentifier(s, MaxSessionIDLen) {
			return fail(invalidField("sessionId", "must be a string of 1 to %d characters without control characters", MaxSessionIDLen))
		}
		cmd.SessionID, cmd.HasSession = s, true
	}
	// status reads a generation only beside a sessionId: without one it asks about the host.
	if w.Generation != nil && takesGen && (spec.identity != idOptional || cmd.HasSession) {
		g, ok := rawSafeInt(w.Generation)
		if !ok {
			return fail(invalidField("generation", "must be an integer from 0 to %d", int64(MaxSafeInteger)))
		}
		cmd.Generation, cmd.HasGeneration = g, true
	}
	hasKey := w.IdempotencyKey != nil && takesKey
	if hasKey {
		k, ok := rawString(w.IdempotencyKey)
		if !ok || !validIdentifier(k, MaxIdempotencyKeyLen) {
			return fail(invalidField("idempotencyKey", "must be a string of 1 to %d characters without control characters", MaxIdempotencyKeyLen))
		}
		cmd.IdempotencyKey = k
	}
	if w.Client != nil && v.Major == 2 {
		c, ok := rawString(w.Client)
		if !ok || !validIdentifier(c, MaxClientNameLen) {
			return fail(invalidField("client", "must be a string of 1 to %d characters without control characters", MaxClientNameLen))
		}
		cmd.Client = c
	}
	if e := checkIdentity(cmd, spec.identity, hasKey); e != nil {
		return fail(e)
	}

	if len(w.Payload) == 0 || w.Payload[0] != '{' {
		return fail(invalidField("payload", "must be an object"))
	}
	cmd.Payload = bytes.Clone(w.Payload)
	return cmd, nil
}

func incompatible(v Version) *Error {
	return Errorf(CodeIncompatibleProtocol, "protocol version %s is not supported", v.Raw).
		With("supported", SupportedVersions).With("received", v.Raw)
}

// members reports which envelope identity members an operation of this kind takes.
func (id identity) members() (session, generation, key bool) {
	switch id {
	case idOptional, idBound:
		return true, true, false
	case idSession:
		return true, false, false
	case idKeyed:
		return true, true, true
	}
	return false, false, false
}

// checkIdentity checks that the members an operation requires are present. Members it does
// not take were never read.
func checkIdentity(cmd *Command, id identity, hasKey bool) *Error {
	needSession := id == idSession || id == idBound || id == idKeyed
	needGen := id == idBound || id == idKeyed
	switch {
	case needSession && !cmd.HasSession:
		return invalidField("sessionId", "is required for %s", cmd.Operation)
	case needGen && !cmd.HasGeneration:
		return invalidField("generation", "is required for %s", cmd.Operation)
	case id == idKeyed && !hasKey:
		return invalidField("idempotencyKey", "is required for %s", cmd.Operation)
	}
	return nil
}

// DecodePayload decodes a command payload into v, a pointer to the operation's payload type.
// Payloads are forward tolerant, as Pi Daemon's parser is: members the type does not declare
// are ignored, at every depth, so that a newer minor version can add some. Duplicated and
// case-variant members, and known members of the wrong type, fail with invalid_field. What must
// stay closed (the tools policy of open, the tool-adapter descriptor) is a json.RawMessage in
// the payload type and is decoded on its own, closed.
func DecodePayload(cmd *Command, v any) *Error {
	if err := ndjson.Decode(cmd.Payload, v, ndjson.Open); err != nil {
		e := fieldError(err)
		if path, ok := e.Details["field"].(string); ok {
			e.Details["field"] = "payload." + path
		}
		return e
	}
	return nil
}

// fieldError maps a strict-decoding failure to invalid_field, naming the member and the reason.
func fieldError(err error) *Error {
	var de *ndjson.DecodeError
	if !errors.As(err, &de) {
		return Errorf(CodeInvalidField, "malformed object")
	}
	e := Errorf(CodeInvalidField, "%s", de.Error()).With("reason", de.Reason)
	if de.Path != "" {
		e.With("field", de.Path)
	}
	return e
}

func invalidField(field, format string, args ...any) *Error {
	e := Errorf(CodeInvalidField, field+" "+format, args...)
	return e.With("field", field)
}

// salvage reads protocolVersion and requestId from a line that failed strict decoding, for
// the echo. A member is echoed only when the top-level object names it exactly once and no
// other key folds to its name: a line that says two things about its identity gets neither
// echoed. salvage never fails; what cannot be read is defaulted.
func salvage(line []byte) (version, requestID string) {
	version = Version1
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return version, ""
	}
	type member struct {
		raw   json.RawMessage
		count int
	}
	members := map[string]*member{"protocolVersion": {}, "requestId": {}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return version, ""
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return version, ""
		}
		for name, m := range members {
			switch {
			case key == name:
				m.count++
				m.raw = raw
			case strings.EqualFold(key, name):
				m.count += 2 // a case variant makes the member ambiguous
			}
		}
	}
	if m := members["protocolVersion"]; m.count == 1 {
		if s, ok := rawString(m.raw); ok {
			if _, ok := ParseVersion(s); ok {
				version = s
			}
		}
	}
	if m := members["requestId"]; m.count == 1 {
		requestID = echoRequestID(m.raw)
	}
	return version, requestID
}

// echoRequestID returns the request id to echo, or "" when it is not a valid identifier.
func echoRequestID(raw json.RawMessage) string {
	if s, ok := rawString(raw); ok && validIdentifier(s, MaxRequestIDLen) {
		return s
	}
	return ""
}

// rawOperation reads the operation member, returning the table's own string for a known name
// so that the common case allocates nothing.
func rawOperation(raw json.RawMessage) (string, bool) {
	if len(raw) >= 2 && raw[0] == '"' {
		if spec, ok := operationNames[string(raw[1:len(raw)-1])]; ok {
			return spec, true
		}
	}
	return rawString(raw)
}

// rawVersion reads the protocolVersion member, returning a constant for the versions this host
// speaks so that the common case allocates nothing.
func rawVersion(raw json.RawMessage) (string, bool) {
	switch string(raw) {
	case `"` + Version1 + `"`:
		return Version1, true
	case `"` + Version2 + `"`:
		return Version2, true
	}
	return rawString(raw)
}

// operationNames maps each operation name to itself.
var operationNames = func() map[string]string {
	m := make(map[string]string, len(operations))
	for name := range operations {
		m[name] = name
	}
	return m
}()

func rawString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	// Most members have no escapes: skip the decoder for them. raw was already checked to be
	// a well-formed JSON string by the strict decoder.
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// rawSafeInt reads a JSON number whose value is an integer in [0, MaxSafeInteger], in any
// form JSON allows: "3", "3.0", "3e0", "0.3e1" and "-0" all read as what they are worth, as
// they do for Pi Daemon's Number.isSafeInteger and for JSON Schema's integer type. The value is
// exact: a literal beyond 2^53 − 1 is refused even where a float64 would round it into range.
func rawSafeInt(raw json.RawMessage) (int64, bool) {
	// The common form: plain digits without a leading zero.
	if n := len(raw); n > 0 && n <= 16 && (raw[0] != '0' || n == 1) {
		var v int64
		plain := true
		for _, c := range raw {
			if c < '0' || c > '9' {
				plain = false
				break
			}
			v = v*10 + int64(c-'0')
		}
		if plain {
			return v, v <= MaxSafeInteger
		}
	}
	return decimalSafeInt(raw)
}

// decimalSafeInt is rawSafeInt for a number with a sign, a fraction or an exponent. It reads
// the literal's digits and exponent without building its value, so that a huge exponent costs
// nothing.
func decimalSafeInt(raw []byte) (int64, bool) {
	s := raw
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	digitsEnd := func(i int) int {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i
	}
	i := digitsEnd(0)
	if i == 0 || (i > 1 && s[0] == '0') { // JSON allows no leading zero
		return 0, false
	}
	intPart, frac := s[:i], s[i:i]
	if i < len(s) && s[i] == '.' {
		j := digitsEnd(i + 1)
		if j == i+1 {
			return 0, false
		}
		frac, i = s[i+1:j], j
	}
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := i < len(s) && s[i] == '-'
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digitsEnd(i)
		if j == i {
			return 0, false
		}
		for _, c := range s[i:j] {
			if exp < 1<<20 { // far past any integer this reads; saturate instead of overflowing
				exp = exp*10 + int(c-'0')
			}
		}
		if eneg {
			exp = -exp
		}
		i = j
	}
	if i != len(s) {
		return 0, false
	}
	// The value is the significant digits times 10^exp: leading zeros say nothing, and each
	// trailing zero is one more power of ten.
	digits := strings.TrimLeft(string(intPart)+string(frac), "0")
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	digits = trimmed
	if digits == "" {
		return 0, true // zero, -0 included
	}
	if neg || exp < 0 || len(digits)+exp > 16 {
		return 0, false
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	for range exp {
		v *= 10
	}
	return v, v <= MaxSafeInteger
}

// validIdentifier reports whether s has 1 to max code points and no control characters.
func validIdentifier(s string, max int) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	n := 0
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
		n++
		if n > max {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
