package web

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/airlockhq/airlock/internal/room"
)

// Backend is what the page shows and does; airlockd's room service implements it. Nothing
// secret crosses it: no capability handle, adapter stderr, endpoint or private key. Every
// method may be called concurrently, from one goroutine per HTTP request; ctx ends when the
// request does (or after RequestTimeout).
//
// Errors: the page shows an error as "code: message". The code and message are read from a
// *Error or a *room.Error (its Code and Detail) found by errors.As in the chain; any other
// error is shown as "internal: the request failed" and its text stays in the server (it may
// quote something that must not reach a page), as do context errors, which show as "timeout".
type Backend interface {
	// Rooms lists the rooms this host is in.
	Rooms(ctx context.Context) ([]Room, error)
	// Room returns one room: its members, and the capabilities visible in it (remote ones and
	// this host's own publications, marked ProviderSelf).
	Room(ctx context.Context, id string) (RoomDetail, error)
	// Observe returns a capability's current observation (a JSON object).
	Observe(ctx context.Context, room, provider, capability string) (json.RawMessage, error)
	// Invoke runs an action with args (a JSON object) and returns its result.
	Invoke(ctx context.Context, room, provider, capability, action string, args json.RawMessage) (json.RawMessage, error)
	// Approvals lists every request waiting for this host's operator in the daemon's one
	// approval queue: a local call a policy marks ask, a room call to an approve-each
	// publication, an agent's proposal.
	Approvals(ctx context.Context) ([]Approval, error)
	// Decide approves or denies one pending request.
	Decide(ctx context.Context, approvalID string, approve bool) error
	// ApproveRemember approves one pending call and remembers the approval for the rest of
	// the caller's session generation (or room membership): the exact path or arguments, or
	// the wider pattern r gives.
	ApproveRemember(ctx context.Context, approvalID string, r Remember) error
	// Remembered lists the remembered approvals.
	Remembered(ctx context.Context) ([]Memory, error)
	// Forget revokes one remembered approval.
	Forget(ctx context.Context, memoryID string) error
	// Subscribe returns the call log and approval events from now on. The channel is closed
	// when ctx ends; it is bounded and drops the oldest events for a slow reader.
	Subscribe(ctx context.Context) (<-chan Event, error)
}

// Room is one room this host is in.
type Room struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Owner   string `json:"owner"`   // the owner's host id
	Members int    `json:"members"` // how many hosts are on the roster
}

// RoomDetail is one room with its members and visible capabilities.
type RoomDetail struct {
	Room
	Members      []Member     `json:"members"`
	Capabilities []Capability `json:"capabilities"`
}

// Member is one host on a room's roster.
type Member struct {
	HostID  string `json:"hostId"`
	Name    string `json:"name,omitempty"`
	Self    bool   `json:"self"`    // this host
	Present bool   `json:"present"` // its presence is current
}

// Capability is one published capability visible in a room. ProviderSelf marks this host's own
// publications.
type Capability struct {
	Provider     string   `json:"provider"` // the provider's host id
	ProviderSelf bool     `json:"providerSelf"`
	CapabilityID string   `json:"capabilityId"`
	Title        string   `json:"title"`
	Observe      bool     `json:"observe"` // observe is published
	Actions      []Action `json:"actions"` // the published actions
	// Available says whether a call can reach it now; UnavailableReason, when not, is
	// bus_disconnected, provider_absent, adapter_not_ready or calls_unavailable
	// (protocol.RoomCapability's).
	Available         bool   `json:"available"`
	UnavailableReason string `json:"unavailableReason,omitempty"`
}

// Action is one published action. Input is its args schema from the descriptor: a JSON Schema
// object, or the descriptor's closed shorthand (properties mapping a name to "string",
// "number" or "boolean"); the page builds a form from either (see FormOf).
type Action struct {
	Name        string          `json:"name"`
	Title       string          `json:"title"`
	Input       json.RawMessage `json:"input,omitempty"`
	ApproveEach bool            `json:"approveEach"` // each call waits for the provider's operator
}

// Approval is one request waiting for this host's operator: who asks, what, with which
// arguments, and why it waits.
type Approval struct {
	ID string `json:"id"`
	// Kind is "call", "run" (execute a proposed adapter) or "publish" (project one into a
	// room).
	Kind string `json:"kind,omitempty"`
	// Who describes the asker in one line: door, MCP client, session and generation, process,
	// or room and calling host.
	Who string `json:"who,omitempty"`
	// Target is the operation or capability action ("fs.write", "printer.print"), or for a
	// proposal "adapter NAME"; Path an fs call's path.
	Target string `json:"target,omitempty"`
	Path   string `json:"path,omitempty"`
	// Reason says why it waits: the policy rule, "room approve-each", "agent proposal".
	Reason string `json:"reason,omitempty"`
	// Room, Caller, Capability and Action name a room call's room, calling host, capability
	// and action.
	Room       string `json:"room,omitempty"`
	Caller     string `json:"caller,omitempty"` // the caller's host id
	Capability string `json:"capability,omitempty"`
	Action     string `json:"action,omitempty"`
	// Args are the arguments (bounded: ArgsTruncated marks a cut, shown as a JSON string);
	// Detail the kind-specific object a proposal shows (command, file digests, report).
	Args          json.RawMessage `json:"args,omitempty"`
	ArgsTruncated bool            `json:"argsTruncated,omitempty"`
	Detail        json.RawMessage `json:"detail,omitempty"`
	// Rememberable says whether the page offers "remember".
	Rememberable bool      `json:"rememberable,omitempty"`
	Expires      time.Time `json:"expires"`
}

// Remember is what an approval remembers beyond the exact call: a glob for an fs call's
// path, or any arguments for a capability action; the zero value remembers the exact path or
// arguments.
type Remember struct {
	Pattern string `json:"pattern,omitempty"`
	AnyArgs bool   `json:"anyArgs,omitempty"`
}

// Memory is one remembered approval.
type Memory struct {
	ID string `json:"id"`
	// Scope is what it lasts as long as ("session s1 generation 3", "room kitchen host …").
	Scope  string `json:"scope"`
	Target string `json:"target"`
	// Match describes the paths or arguments it matches.
	Match string    `json:"match"`
	Since time.Time `json:"since"`
	Uses  int64     `json:"uses"`
}

// Event kinds.
const (
	EventCall     = "call"
	EventApproval = "approval"
)

// Event is one entry of the live call log: a call finished (Kind "call") or an approval was
// requested or decided (Kind "approval").
type Event struct {
	Kind       string    `json:"kind"`
	Time       time.Time `json:"time"`
	Room       string    `json:"room"`
	Caller     string    `json:"caller"`
	Provider   string    `json:"provider"`
	Capability string    `json:"capability"`
	Operation  string    `json:"operation"` // "observe" or "invoke"
	Action     string    `json:"action,omitempty"`
	Outcome    string    `json:"outcome"` // "ok", an error code, or for approvals "pending", "approved", "denied", "timed_out", "remembered", "forgotten"
	DurationMs int64     `json:"durationMs"`
	// Target and Who describe an approval event of a local call (which has no room).
	Target string `json:"target,omitempty"`
	Who    string `json:"who,omitempty"`
}

// Error is a Backend error with a stable machine code and a message that is safe to show.
type Error struct {
	Code    string
	Message string
	Err     error // the cause; never shown
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Codes of errors this package answers with on its own.
const (
	CodeUnauthenticated = "unauthenticated"  // no valid session cookie (401)
	CodeForbidden       = "forbidden"        // CSRF token, Origin or Host check failed (403)
	CodeTooLarge        = "too_large"        // request body over MaxRequestBytes (413)
	CodeBadRequest      = "invalid_request"  // malformed request (400)
	CodeNotFound        = "not_found"        // no such page (404)
	CodeTooManyStreams  = "too_many_streams" // more than MaxStreams event streams (503)
	CodeInternal        = "internal"         // an uncoded backend failure (500)
	CodeTimeout         = "timeout"          // the request's context ended (504)
)

// publicError returns the code and message to show for a Backend error.
func publicError(err error) (code, message string) {
	var we *Error
	if errors.As(err, &we) {
		return we.Code, we.Message
	}
	var re *room.Error
	if errors.As(err, &re) {
		msg := re.Detail
		if msg == "" {
			msg = re.Code
		}
		return re.Code, msg
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return CodeTimeout, "the request did not finish in time"
	}
	return CodeInternal, "the request failed"
}
