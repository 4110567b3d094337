package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// idPattern is the form of a conversation id: the UTC creation time to the second, then 64
// random bits in hex. File names are the id plus ".jsonl", so that names sort by creation time.
var (
	idPattern   = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{16}$`)
	namePattern = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{16}\.jsonl$`)
)

const (
	idTimeLayout = "20060102T150405Z"
	fileSuffix   = ".jsonl"
)

// checkEntry returns why e is not a message Open would accept, or "". The reason never quotes
// a value from e: it is user data.
func checkEntry(e *Entry) string {
	switch {
	case e.Kind == KindHeader:
		return "a header is allowed only as the first line"
	case e.Kind != KindMessage:
		return "unknown kind"
	case e.FormatVersion != 0 || e.ConversationID != "":
		return "formatVersion and conversationId belong to the header only"
	}
	switch e.Role {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
	case "":
		return "missing role"
	default:
		return "unknown role"
	}
	switch {
	case len(e.ToolCalls) > 0 && e.Role != RoleAssistant:
		return "toolCalls on a " + e.Role + " message; only an assistant message has them"
	case e.ToolCallID != "" && e.Role != RoleTool:
		return "toolCallId on a " + e.Role + " message; only a tool message has one"
	case e.At.IsZero():
		return "missing time (at)"
	}
	return ""
}

// encodeLine returns v as one JSON line ending in LF. The encoder escapes LF and CR inside
// strings, so the final LF is the only one in the line. It does not escape <, > and &: agent
// transcripts are full of code, and \u003c would make each of those characters six bytes.
func encodeLine(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// decodeHeader parses line 1. It reads kind and formatVersion leniently first, so that a
// message line or a header of another version is refused as such instead of by its first
// unknown key.
func decodeHeader(line []byte) (header, error) {
	var probe struct {
		Kind          string `json:"kind"`
		FormatVersion int    `json:"formatVersion"`
	}
	if err := ndjson.Decode(line, &probe, ndjson.Open); err != nil {
		return header{}, fmt.Errorf("not a transcript header: %w", decodeCause(err))
	}
	if probe.Kind != KindHeader {
		return header{}, fmt.Errorf("the first line is not a header")
	}
	if probe.FormatVersion != FormatVersion {
		return header{}, fmt.Errorf("format version %d; this airlockd reads version %d", probe.FormatVersion, FormatVersion)
	}
	var h header
	if err := ndjson.Decode(line, &h, ndjson.Closed); err != nil {
		return header{}, fmt.Errorf("malformed header: %w", decodeCause(err))
	}
	switch {
	case !idPattern.MatchString(h.ConversationID):
		return header{}, fmt.Errorf("malformed conversationId")
	case h.CreatedAt.IsZero():
		return header{}, fmt.Errorf("header without createdAt")
	}
	return h, nil
}

// decodeEntry parses a line after the first.
func decodeEntry(line []byte) (Entry, error) {
	var e Entry
	if err := ndjson.Decode(line, &e, ndjson.Closed); err != nil {
		return Entry{}, decodeCause(err)
	}
	if reason := checkEntry(&e); reason != "" {
		return Entry{}, fmt.Errorf("%s", reason)
	}
	return e, nil
}

// newID returns the conversation id of a transcript created at now.
func newID(now time.Time, random [8]byte) string {
	return fmt.Sprintf("%s-%x", now.UTC().Format(idTimeLayout), random[:])
}
