package protocol

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Bounds and grammars of the capability-adapter operations' payloads. They are the capability
// runtime's own rules (internal/capadapter), copied here because this package must not import
// it; a test in each package holds the copies equal, so a payload valid here is never refused
// by the supervisor for a bound.
const (
	// MaxAdapterNameLen bounds an adapter name, in bytes (the name grammar is ASCII).
	MaxAdapterNameLen = 64
	// MaxAdapterArgs bounds registerAdapter's args, the command excluded.
	MaxAdapterArgs = 16
	// MaxAdapterArgBytes bounds the command and each argument, in bytes.
	MaxAdapterArgBytes = 1024
	// MaxAdapterRegistrationBytes bounds the command and arguments together, in bytes.
	MaxAdapterRegistrationBytes = 16 << 10
	// MaxCapabilityIDLen bounds a capability id, in bytes (the id grammar is ASCII).
	MaxCapabilityIDLen = 64
	// MaxCapabilityActionLen bounds an action name, in bytes (the name grammar is ASCII).
	MaxCapabilityActionLen = 32
	// MaxCapabilityArgsBytes bounds invokeCapability's args as sent: the adapter protocol's
	// args bound.
	MaxCapabilityArgsBytes = 1024
	// MaxAdapterPassEnv bounds registerAdapter's passEnv.
	MaxAdapterPassEnv = 16
)

var (
	// adapterNamePattern is the grammar of an adapter name.
	adapterNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	// capabilityIDPattern is the adapter protocol's capability id grammar.
	capabilityIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._:-]{0,63}$`)
	// actionNamePattern is the adapter protocol's action name grammar.
	actionNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	// passEnvPattern is the grammar of a variable name in registerAdapter's passEnv.
	passEnvPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// Bounds of a temporary registration.
const (
	// MaxAdapterLeaseSeconds bounds registerAdapter's leaseSeconds: 30 days.
	MaxAdapterLeaseSeconds = 30 * 24 * 3600
)

// RegisterAdapterPayload is the payload of registerAdapter: an operator's approval to run
// command with args, without a shell, under name. Room, or SessionID with Generation, tie
// the registration to a room or a session generation; LeaseSeconds ends it after that long.
// PassEnv names environment variables the adapter gets from the daemon's environment (the
// names are approved and shown; the values are read by the daemon at each start and never
// stored or shown).
type RegisterAdapterPayload struct {
	Name    string   `json:"name"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	PassEnv []string `json:"passEnv,omitempty"`

	Room         string `json:"room,omitempty"`
	SessionID    string `json:"sessionId,omitempty"`
	Generation   int64  `json:"generation,omitempty"`
	LeaseSeconds int64  `json:"leaseSeconds,omitempty"`
}

// Validate checks the registration bounds, exactly those of the supervisor: the name
// grammar; at most MaxAdapterArgs args; the command and each arg valid UTF-8 of at most
// MaxAdapterArgBytes bytes without NUL, together at most MaxAdapterRegistrationBytes; and a
// command that is not blank; at most MaxAdapterPassEnv passEnv names, each matching
// ^[A-Za-z_][A-Za-z0-9_]{0,63}$, none twice. Whether the command resolves to an executable,
// and whether a variable may be passed at all (the ones every adapter gets already, and those
// that would make a loader or interpreter run unapproved code, are refused), are the
// supervisor's to say (invalid_registration).
func (p *RegisterAdapterPayload) Validate() *Error {
	if e := validAdapterName(p.Name); e != nil {
		return e
	}
	if len(p.Args) > MaxAdapterArgs {
		return invalidField("payload.args", "must have at most %d items", MaxAdapterArgs)
	}
	if !validAdapterArg(p.Command) {
		return invalidField("payload.command", "must be UTF-8 of at most %d bytes without NUL", MaxAdapterArgBytes)
	}
	total := len(p.Command)
	for _, a := range p.Args {
		if !validAdapterArg(a) {
			return invalidField("payload.args", "items must be UTF-8 of at most %d bytes without NUL", MaxAdapterArgBytes)
		}
		total += len(a)
	}
	if total > MaxAdapterRegistrationBytes {
		return invalidField("payload.args", "command and args together must be at most %d bytes", MaxAdapterRegistrationBytes)
	}
	if strings.TrimSpace(p.Command) == "" {
		return invalidField("payload.command", "must not be blank")
	}
	switch {
	case p.Room != "" && !roomIDPattern.MatchString(p.Room):
		return invalidField("payload.room", "must match %s", roomIDPattern.String())
	case p.Room != "" && p.SessionID != "":
		return invalidField("payload.sessionId", "a registration is tied to a room or to a session, not both")
	case p.SessionID != "" && !validIdentifier(p.SessionID, MaxSessionIDLen):
		return invalidField("payload.sessionId", "must be 1 to %d characters without control characters", MaxSessionIDLen)
	case p.SessionID != "" && p.Generation < 1:
		return invalidField("payload.generation", "must be at least 1 with sessionId")
	case p.SessionID == "" && p.Generation != 0:
		return invalidField("payload.generation", "is only allowed with sessionId")
	case p.LeaseSeconds < 0 || p.LeaseSeconds > MaxAdapterLeaseSeconds:
		return invalidField("payload.leaseSeconds", "must be 1 to %d", MaxAdapterLeaseSeconds)
	case len(p.PassEnv) > MaxAdapterPassEnv:
		return invalidField("payload.passEnv", "must have at most %d items", MaxAdapterPassEnv)
	}
	for i, n := range p.PassEnv {
		switch {
		case !passEnvPattern.MatchString(n):
			return invalidField("payload.passEnv", "items must match %s", passEnvPattern.String())
		case slices.Contains(p.PassEnv[:i], n):
			return invalidField("payload.passEnv", "items must be unique")
		}
	}
	return nil
}

func validAdapterArg(s string) bool {
	return len(s) <= MaxAdapterArgBytes && !strings.ContainsRune(s, 0) && utf8.ValidString(s)
}

func validAdapterName(name string) *Error {
	if !adapterNamePattern.MatchString(name) {
		return invalidField("payload.name", "must match %s", adapterNamePattern.String())
	}
	return nil
}

// AdapterNamePayload is the payload of removeAdapter, adapterLogs and approveAdapter.
type AdapterNamePayload struct {
	Name string `json:"name"`
}

// Validate checks the name against the adapter name grammar: a name no registration can have
// is a bad field, not an unknown adapter.
func (p *AdapterNamePayload) Validate() *Error { return validAdapterName(p.Name) }

// CapabilityPayload is the payload of describeCapability and observeCapability.
type CapabilityPayload struct {
	CapabilityID string `json:"capabilityId"`
}

// Validate checks capabilityId: present, at most MaxCapabilityIDLen bytes, and of the
// adapter protocol's capability id grammar, so that a malformed id is invalid_field rather
// than unknown_capability.
func (p *CapabilityPayload) Validate() *Error { return validCapabilityID(p.CapabilityID) }

func validCapabilityID(id string) *Error {
	switch {
	case id == "":
		return invalidField("payload.capabilityId", "is required")
	case len(id) > MaxCapabilityIDLen:
		return invalidField("payload.capabilityId", "must be at most %d bytes", MaxCapabilityIDLen)
	case !capabilityIDGrammar(id):
		return invalidField("payload.capabilityId", "must match %s", capabilityIDPattern.String())
	}
	return nil
}

// capabilityIDGrammar reports whether id matches capabilityIDPattern, without the regexp
// machinery: it runs for every observation and action (TestGrammarsMatchPatterns).
func capabilityIDGrammar(id string) bool {
	if id == "" || len(id) > MaxCapabilityIDLen || !lowerOrDigit(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !lowerOrDigit(c) && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

// actionNameGrammar reports whether name matches actionNamePattern (TestGrammarsMatchPatterns).
func actionNameGrammar(name string) bool {
	if name == "" || len(name) > MaxCapabilityActionLen || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !lowerOrDigit(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func lowerOrDigit(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// DecodeCapabilityPayload decodes and validates the payload of describeCapability and
// observeCapability. The form clients write, exactly {"capabilityId":"ID"} with an ID of the
// grammar, is read without the general strict decoder, which gives the same answer for it;
// every other payload goes through that decoder and Validate.
func DecodeCapabilityPayload(cmd *Command) (CapabilityPayload, *Error) {
	const head, tail = `{"capabilityId":"`, `"}`
	if raw := cmd.Payload; len(raw) > len(head)+len(tail) && string(raw[:len(head)]) == head &&
		string(raw[len(raw)-len(tail):]) == tail {
		if id := string(raw[len(head) : len(raw)-len(tail)]); capabilityIDGrammar(id) {
			return CapabilityPayload{CapabilityID: id}, nil
		}
	}
	var p CapabilityPayload
	if e := DecodePayload(cmd, &p); e != nil {
		return p, e
	}
	return p, p.Validate()
}

// InvokeCapabilityPayload is the payload of invokeCapability. Args is checked against the
// action's declared input before the adapter sees it.
type InvokeCapabilityPayload struct {
	CapabilityID string          `json:"capabilityId"`
	Action       string          `json:"action"`
	Args         json.RawMessage `json:"args,omitempty"`
}

// Validate checks the envelope-level rules: capabilityId as CapabilityPayload.Validate does;
// action present and of the adapter protocol's action name grammar; args, when present, one
// JSON object (without duplicate keys) of at most MaxCapabilityArgsBytes bytes as sent. Absent
// args mean {}. Whether the action is declared and the args fit its input is the
// supervisor's to say.
func (p *InvokeCapabilityPayload) Validate() *Error {
	if e := validCapabilityID(p.CapabilityID); e != nil {
		return e
	}
	return validActionArgs(p.Action, p.Args, MaxCapabilityArgsBytes)
}

// validActionArgs checks an invoke's action (present, of the adapter protocol's action name
// grammar) and its args: absent, or one JSON object (without duplicate keys) of at most
// maxArgs bytes as sent. A local invokeCapability and a room invoke share these rules; only
// the bound differs.
func validActionArgs(action string, args json.RawMessage, maxArgs int) *Error {
	switch {
	case action == "":
		return invalidField("payload.action", "is required")
	case !actionNameGrammar(action):
		return invalidField("payload.action", "must match %s", actionNamePattern.String())
	}
	if args == nil {
		return nil
	}
	if len(args) > maxArgs {
		return invalidField("payload.args", "must be at most %d bytes", maxArgs)
	}
	if t := bytes.TrimLeft(args, " \t\r\n"); len(t) == 0 || t[0] != '{' || ndjson.Valid(args) != nil {
		return invalidField("payload.args", "must be a JSON object")
	}
	return nil
}

// MaxToolCallIDLen bounds invokeTool's toolCallId.
const MaxToolCallIDLen = 128

// InvokeToolPayload is the payload of invokeTool (2.x): one call of a granted host tool
// operation. The idempotency key sent to the adapter derives from operation and toolCallId, so
// a retry of the same call reuses it.
type InvokeToolPayload struct {
	ToolCallID string          `json:"toolCallId"`
	Operation  string          `json:"operation"`
	Arguments  json.RawMessage `json:"arguments"`
}

// Validate checks the envelope-level rules; the operation's own payload rules are the
// tool-adapter layer's.
func (p *InvokeToolPayload) Validate() *Error {
	if !validIdentifier(p.ToolCallID, MaxToolCallIDLen) {
		return invalidField("payload.toolCallId", "must be 1 to %d characters without control characters", MaxToolCallIDLen)
	}
	if p.Operation == "" {
		return invalidField("payload.operation", "is required")
	}
	if len(p.Arguments) == 0 || p.Arguments[0] != '{' {
		return invalidField("payload.arguments", "must be an object")
	}
	return nil
}

// ToolResult is the data of invokeTool: the adapter's typed result for the operation.
type ToolResult struct {
	ToolCallID string          `json:"toolCallId"`
	Operation  string          `json:"operation"`
	Data       json.RawMessage `json:"data"`
}
