// Package audit is airlock's journal of effects and decisions: an append-only, hash-chained
// sequence of NDJSON records in segment files under the state directory, appended with group
// commit (one fdatasync shared by every append waiting for it), verified link by link, read and
// followed across rotation, and bounded by rotation and retention.
//
// A record's digest is the lowercase hex SHA-256 of its line as written (without the newline);
// every record carries the digest of the record before it in prev, so editing, deleting,
// reordering or splicing records breaks a link that Verify reports. Each segment starts with a
// header record, whose prev is the digest of the previous segment's last record, and a closed
// segment ends with a footer record naming the digest of its header (first) and its record
// count; the footer is itself the segment's last digest. The journal's newest record (the chain
// head, Head) is what an operator exports to detect truncation of the newest records, which no
// chain can see from the inside.
//
// Records are built from an Entry, which holds nothing free-form: codes and operations are
// code-shaped, names and paths are bounded and refused when they hold control or invisible
// characters, and arguments and idempotency keys are kept as SHA-256 digests. The arguments
// themselves are kept only when the operator turns that on (Options.RecordArgs), bounded.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/visible"
)

// Error codes of the journal. Each is stable; docs/operations.md says what provokes it.
const (
	// CodeInvalidEntry: an Entry was refused before anything was written (a field out of
	// shape or bounds, an outcome without the record it refers to, arguments that are not JSON).
	CodeInvalidEntry = "audit_invalid_entry"
	// CodeCorrupt: a segment holds a line that is not a whole record where one must be.
	CodeCorrupt = "audit_corrupt"
	// CodeChainBroken: a link of the chain does not hold (Open refuses to append to it).
	CodeChainBroken = "audit_chain_broken"
	// CodeWriteFailed: a write, fdatasync or rotation failed; once fdatasync failed, the journal
	// refuses every later Append with this code, because what the disk holds is unknown.
	CodeWriteFailed = "audit_write_failed"
	// CodeClosed: Append after Close.
	CodeClosed = "audit_closed"
	// CodeInsecureDir: the journal directory or a segment is not the owner's alone.
	CodeInsecureDir = protocol.CodeInsecureStatePath
)

// Kind is what a record is.
type Kind string

// Record kinds.
const (
	KindHeader   Kind = "header"   // first record of a segment
	KindFooter   Kind = "footer"   // last record of a closed segment
	KindStarted  Kind = "started"  // an effect is about to reach its adapter
	KindOutcome  Kind = "outcome"  // how the effect of record Ref ended
	KindDecision Kind = "decision" // an approval asked, decided or timed out; a policy answer
	KindEvent    Kind = "event"    // session open/close, grants, adapter and fabric changes
)

// Door is where an effect or decision entered the daemon.
type Door string

// Doors.
const (
	DoorOwner  Door = "owner"  // the owner socket (the CLI, harnesses)
	DoorMCP    Door = "mcp"    // an MCP client through airlock mcp
	DoorTurn   Door = "turn"   // a tool call in an agent turn
	DoorRoom   Door = "room"   // a room call another host made, or this host's own in-process
	DoorWeb    Door = "web"    // the loopback page
	DoorDaemon Door = "daemon" // the daemon itself: timeouts, remembered rules, change detection
)

var doors = map[Door]bool{DoorOwner: true, DoorMCP: true, DoorTurn: true, DoorRoom: true, DoorWeb: true, DoorDaemon: true}

// Bounds of an Entry's fields, in bytes.
const (
	maxCode   = 64   // Op, Action, Outcome
	maxName   = 256  // session, room, host, adapter, capability, MCP client name
	maxPath   = 4096 // Path, Exe
	maxRecord = 64 << 10
	// MaxArgsBytesLimit bounds Options.MaxArgsBytes, so that a record always fits maxRecord.
	MaxArgsBytesLimit = 32 << 10
)

// Actor is who caused a record, as the gate knows it from the connection.
type Actor struct {
	PID        int    `json:"pid,omitempty"`        // peer process on the owner socket
	Exe        string `json:"exe,omitempty"`        // its executable (absolute path)
	Session    string `json:"session,omitempty"`    // session id
	Generation uint64 `json:"generation,omitempty"` // session generation
	Room       string `json:"room,omitempty"`       // room of a room call
	Host       string `json:"host,omitempty"`       // calling host of a room call
	MCPClient  string `json:"mcpClient,omitempty"`  // the MCP client's name, as it said
}

// Target is what a record is about.
type Target struct {
	// Op is what was done: "fs.write", "capability.invoke", "adapter.register" …, or for the
	// approval queue approval.asked, .approved, .denied, .timed_out, .remembered or .forgotten.
	Op         string `json:"op"`
	Capability string `json:"capability,omitempty"` // capability id
	Action     string `json:"action,omitempty"`     // capability action
	Path       string `json:"path,omitempty"`       // fs path, relative to the session's cwd
	Adapter    string `json:"adapter,omitempty"`    // adapter name
}

// Entry is what a caller appends. The journal adds the sequence number, time and link, and
// turns Args and IdempotencyKey into digests.
type Entry struct {
	Kind   Kind
	Ref    uint64 // Outcome only: the Seq of the started record whose effect this ends
	Door   Door
	Actor  Actor
	Target Target
	// Args are the call's arguments as JSON. The record keeps the SHA-256 of their canonical
	// form (keys sorted, no insignificant space), and the canonical form itself only under
	// Options.RecordArgs when it fits Options.MaxArgsBytes.
	Args json.RawMessage
	// Outcome is a code: "ok", "denied", or an error code. Required for outcome and decision.
	Outcome        string
	Duration       time.Duration // Outcome: how long the effect took
	IdempotencyKey string        // kept as its SHA-256 only
}

// SegmentMark is the segment part of a header or footer.
type SegmentMark struct {
	Number  uint64 `json:"number"`
	First   string `json:"first,omitempty"`   // footer: digest of the segment's header
	Records uint64 `json:"records,omitempty"` // footer: records in the segment, header and footer included
}

// Record is one line of the journal.
type Record struct {
	Seq                  uint64          `json:"seq"`
	Time                 time.Time       `json:"time"`
	Kind                 Kind            `json:"kind"`
	Prev                 string          `json:"prev"` // digest of the record before; "" only for the journal's first
	Ref                  uint64          `json:"ref,omitempty"`
	Door                 Door            `json:"door,omitempty"`
	Actor                *Actor          `json:"actor,omitempty"`
	Target               *Target         `json:"target,omitempty"`
	ArgsSHA256           string          `json:"argsSha256,omitempty"`
	ArgsBytes            int             `json:"argsBytes,omitempty"`
	Args                 json.RawMessage `json:"args,omitempty"`
	Outcome              string          `json:"outcome,omitempty"`
	DurationUS           int64           `json:"durationUs,omitempty"`
	IdempotencyKeySHA256 string          `json:"idempotencyKeySha256,omitempty"`
	Segment              *SegmentMark    `json:"segment,omitempty"`
}

// Digest returns the digest of a record's line (without its newline).
func Digest(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

func invalid(format string, args ...any) error {
	return protocol.Errorf(CodeInvalidEntry, format, args...)
}

// codeShaped reports whether s is a lower-case code: a letter, then letters, digits, '_', '.'
// or '-'.
func codeShaped(s string) bool {
	if s == "" || len(s) > maxCode || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// checkText refuses a name or path that is too long, not UTF-8, or holds a character that
// hides or changes how text reads (visible.Hidden), newlines and escapes included.
func checkText(field, s string, limit int) error {
	switch {
	case len(s) > limit:
		return invalid("%s is %d bytes, more than %d", field, len(s), limit)
	case printableASCII(s):
		return nil // the common case, without decoding runes: no ASCII but controls is hidden
	case !utf8.ValidString(s):
		return invalid("%s is not UTF-8", field)
	case visible.Contains(s):
		return invalid("%s holds a control or invisible character", field)
	}
	return nil
}

// NameKept and PathKept report whether an Entry may hold s as a name (an actor's session, room,
// host or MCP client, a target's capability or adapter) or as a path (a target's path, an
// actor's exe): bounded, UTF-8, and without a control or invisible character. A caller that
// must record an entry whatever a peer chose leaves out the fields that fail.
func NameKept(s string) bool { return checkText("name", s, maxName) == nil }

// PathKept: see NameKept.
func PathKept(s string) bool { return checkText("path", s, maxPath) == nil }

// printableASCII reports whether s holds only the bytes 0x20 to 0x7e. No such byte is
// visible.Hidden (in ASCII it hides only the controls, 0x00 to 0x1f and 0x7f).
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

func (e *Entry) check() error {
	switch e.Kind {
	case KindStarted, KindDecision, KindEvent:
		if e.Ref != 0 {
			return invalid("a %s record refers to no other", e.Kind)
		}
	case KindOutcome:
		if e.Ref == 0 {
			return invalid("an outcome record needs the seq of its started record (Ref)")
		}
	default:
		return invalid("kind %q cannot be appended", e.Kind)
	}
	if !doors[e.Door] {
		return invalid("door %q is not one of owner, mcp, turn, room, web, daemon", e.Door)
	}
	if !codeShaped(e.Target.Op) {
		return invalid("target op %q is not a code (a-z, 0-9, '_', '.', '-'; at most %d bytes)", e.Target.Op, maxCode)
	}
	if e.Target.Action != "" && !codeShaped(e.Target.Action) {
		return invalid("target action is not a code")
	}
	if e.Outcome != "" && !codeShaped(e.Outcome) {
		return invalid("outcome is not a code")
	}
	if (e.Kind == KindOutcome || e.Kind == KindDecision) && e.Outcome == "" {
		return invalid("a %s record needs an outcome", e.Kind)
	}
	if e.Kind == KindStarted && e.Outcome != "" {
		return invalid("a started record has no outcome yet")
	}
	if e.Duration < 0 {
		return invalid("duration is negative")
	}
	if e.Actor.PID < 0 {
		return invalid("pid is negative")
	}
	if e.Actor.Exe != "" && !strings.HasPrefix(e.Actor.Exe, "/") {
		return invalid("exe is not an absolute path")
	}
	// One call per field: a smaller frame than a table of them, on goroutines that often
	// start with a small stack.
	if err := checkText("exe", e.Actor.Exe, maxPath); err != nil {
		return err
	}
	if err := checkText("session", e.Actor.Session, maxName); err != nil {
		return err
	}
	if err := checkText("room", e.Actor.Room, maxName); err != nil {
		return err
	}
	if err := checkText("host", e.Actor.Host, maxName); err != nil {
		return err
	}
	if err := checkText("mcpClient", e.Actor.MCPClient, maxName); err != nil {
		return err
	}
	if err := checkText("capability", e.Target.Capability, maxName); err != nil {
		return err
	}
	if err := checkText("path", e.Target.Path, maxPath); err != nil {
		return err
	}
	if err := checkText("adapter", e.Target.Adapter, maxName); err != nil {
		return err
	}
	return checkText("idempotencyKey", e.IdempotencyKey, 512)
}

// Canonical returns the canonical form of a JSON value: object keys sorted, no insignificant
// space, numbers as written, strings re-escaped the one way encoding/json writes them. A value
// with duplicate keys is refused: it has no single meaning to digest.
func Canonical(raw json.RawMessage) ([]byte, error) {
	if err := ndjson.Valid(raw); err != nil {
		return nil, invalid("arguments are not one JSON value without duplicate keys: %v", err)
	}
	if c, ok := canonicalFast(raw); ok {
		return c, nil
	}
	return canonicalJSON(raw)
}

// canonicalJSON is Canonical through encoding/json, for any value ndjson.Valid accepted.
func canonicalJSON(raw json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalid("arguments are not JSON: %v", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, invalid("arguments cannot be re-encoded: %v", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// ArgsDigest returns the lowercase hex SHA-256 of raw's canonical form, what a record's
// argsSha256 holds, so that an operator can check a record against arguments they have.
func ArgsDigest(raw json.RawMessage) (string, error) {
	c, err := Canonical(raw)
	if err != nil {
		return "", err
	}
	return Digest(c), nil
}

// DecodeRecord parses one line (without its newline) strictly: unknown, duplicate and
// case-variant keys are refused, and so is a record whose fields are out of shape.
func DecodeRecord(line []byte) (Record, error) {
	var r Record
	if len(line) > maxRecord {
		return r, fmt.Errorf("record is %d bytes, more than %d", len(line), maxRecord)
	}
	if !utf8.Valid(line) {
		return r, fmt.Errorf("record is not UTF-8")
	}
	if err := ndjson.Decode(line, &r, ndjson.Closed); err != nil {
		return r, err
	}
	if r.Seq == 0 {
		return r, fmt.Errorf("record has no seq")
	}
	if r.Prev != "" && !isDigest(r.Prev) {
		return r, fmt.Errorf("record's prev is not a digest")
	}
	switch r.Kind {
	case KindHeader, KindFooter:
		if r.Segment == nil || r.Segment.Number == 0 {
			return r, fmt.Errorf("%s record has no segment number", r.Kind)
		}
		if r.Kind == KindFooter && !isDigest(r.Segment.First) {
			return r, fmt.Errorf("footer record's first is not a digest")
		}
	case KindStarted, KindOutcome, KindDecision, KindEvent:
		if r.Segment != nil {
			return r, fmt.Errorf("%s record has a segment mark", r.Kind)
		}
	default:
		return r, fmt.Errorf("record kind %q is unknown", r.Kind)
	}
	return r, nil
}

func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
