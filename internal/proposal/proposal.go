// Package proposal is an agent's adapter proposal: a capability adapter that a session's
// agent wrote into its workspace and asks the operator to run, and optionally to publish into
// a room (DESIGN.md, "One gate for every effect"; issue 26, item 3).
//
// This package owns the proposal's wire form and its checks, not its flow: Parse decodes a
// proposal strictly (unknown, duplicate and case-variant keys refused, every field bounded),
// and Resolve checks it against the session's workspace and pins what would run — the
// command and the script, each a regular file reached without a symbolic link, inside the
// workspace (an interpreter on PATH is the one file allowed outside it), with the SHA-256 of
// each. An argv that would carry environment or inline code past the pins is refused: no
// `env` or shell wrapper, no NAME=value, no $VAR, no --pass-env, no interpreter option before
// the script. Every refusal is an *Error with a stable code and, where one field is at
// fault, the field.
//
// The daemon (internal/daemon, proposals.go) runs the flow: the operator's approval to run,
// the pins checked again, the validator, a temporary registration owned by the session, and a
// second approval before any publication.
package proposal

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Codes of the refusals of a proposal. They reach the agent (the MCP tool's error result, the
// tool message of an agent turn) with a hint from internal/hint.
const (
	// CodeInvalid: the proposal is malformed: an unknown key, a field too long or outside
	// its grammar, a command file that is not executable. Details name the field.
	CodeInvalid = "proposal_invalid"
	// CodeOutsideWorkspace: a file the proposal names is outside the session's workspace, is
	// reached through a symbolic link or "..", is not a regular file, or the command is
	// neither a file of the workspace nor a known interpreter.
	CodeOutsideWorkspace = "proposal_outside_workspace"
	// CodeEnvRefused: the argv would set or pass environment (an `env` wrapper, NAME=value,
	// $VAR, --pass-env): the adapter gets exactly the daemon's environment allowlist.
	CodeEnvRefused = "proposal_env_refused"
	// CodeInlineCode: the argv would run code that no pinned file holds (an interpreter
	// option such as -c or -e before the script).
	CodeInlineCode = "proposal_inline_code"
	// CodeNotAllowed: the session's policy does not allow proposals (its document has no
	// "proposals": "allow").
	CodeNotAllowed = "proposals_not_allowed"
	// CodeUnknown: no proposal of this session has this id.
	CodeUnknown = "unknown_proposal"
	// CodeTooMany: the session has as many proposals in progress as it may, or the host has.
	CodeTooMany = "too_many_proposals"
	// CodeNameTaken: an adapter of that name is registered already, and not by this proposal.
	CodeNameTaken = "proposal_name_taken"
	// CodeValidationFailed: the validator (internal/validate) failed the adapter, so it was
	// not registered; the proposal's report says which probes failed.
	CodeValidationFailed = "proposal_validation_failed"
	// CodeUnvalidated: what would be published is not what the validator saw: a capability
	// or action the proposal asks to publish that the validated descriptors do not declare,
	// or a running adapter whose descriptors differ from the validated ones.
	CodeUnvalidated = "proposal_unvalidated"
	// CodeMissingCapability: the validated adapter does not serve a capability the proposal
	// said it expects.
	CodeMissingCapability = "proposal_missing_capability"
)

// Bounds of a proposal.
const (
	// MaxBytes bounds a proposal's JSON.
	MaxBytes = 16 << 10
	// MaxArgs bounds the arguments (the capability supervisor's bound).
	MaxArgs = 16
	// MaxArgBytes bounds the command and each argument, in bytes.
	MaxArgBytes = 1024
	// MaxCapabilities bounds the expected capabilities (the adapter protocol's bound).
	MaxCapabilities = 8
	// MaxPublishActions bounds the actions published of one capability.
	MaxPublishActions = 32
	// MaxReasonBytes bounds the agent's reason, shown to the operator.
	MaxReasonBytes = 512
	// DefaultLeaseSeconds is the lease of a proposal that names none: two hours.
	DefaultLeaseSeconds = 2 * 3600
	// MaxLeaseSeconds bounds a proposal's lease: one day. An agent's adapter is temporary;
	// it ends with the session generation in any case.
	MaxLeaseSeconds = 24 * 3600
	// MinLeaseSeconds is the shortest lease a proposal may ask for.
	MinLeaseSeconds = 60
)

var (
	namePattern       = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	capabilityPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._:-]{0,63}$`)
	actionPattern     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	roomPattern       = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
)

// Proposal is an adapter proposal as the agent sends it.
type Proposal struct {
	// Name is the adapter's registration name (the supervisor's grammar).
	Name string `json:"name"`
	// Command is a file of the workspace, relative to it ("adapter.sh", "bin/lamp"), or the
	// name of a known interpreter (python3, sh, node …) whose first argument is the script.
	Command string `json:"command"`
	// Args are the command's arguments, without a shell.
	Args []string `json:"args,omitempty"`
	// Capabilities are the capability ids the adapter is expected to serve: a validated
	// adapter that serves none of one of them is not registered.
	Capabilities []string `json:"capabilities"`
	// Publish, when set, asks for a second approval to publish into a room.
	Publish *Publish `json:"publish,omitempty"`
	// LeaseSeconds ends the registration after that long (DefaultLeaseSeconds when 0); it
	// ends with the session generation in any case.
	LeaseSeconds int64 `json:"leaseSeconds,omitempty"`
	// Reason is the agent's one-line account of why, shown to the operator.
	Reason string `json:"reason,omitempty"`
}

// Publish is the publication a proposal asks for.
type Publish struct {
	Room         string              `json:"room"`
	Capabilities []PublishCapability `json:"capabilities"`
}

// PublishCapability is one capability to publish: the named actions (none: no action) and
// the observation when Observe.
type PublishCapability struct {
	CapabilityID string   `json:"capabilityId"`
	Actions      []string `json:"actions,omitempty"`
	Observe      bool     `json:"observe,omitempty"`
}

// Error is a refused proposal: a code, the field at fault ("" when none is) and why.
type Error struct {
	Code   string
	Field  string
	Reason string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Code + ": " + e.Reason
	}
	return e.Code + ": " + e.Field + ": " + e.Reason
}

func refuse(code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of a proposal error, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Parse decodes and checks a proposal strictly: unknown, duplicate and case-variant keys are
// refused, and Check runs on the result.
func Parse(data []byte) (*Proposal, error) {
	if len(data) > MaxBytes {
		return nil, refuse(CodeInvalid, "", "larger than %d bytes", MaxBytes)
	}
	var p Proposal
	if err := ndjson.Decode(data, &p, ndjson.Closed); err != nil {
		var de *ndjson.DecodeError
		if errors.As(err, &de) {
			return nil, refuse(CodeInvalid, de.Path, "%s", de.Error())
		}
		return nil, refuse(CodeInvalid, "", "not a JSON object")
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Check checks the form of p: grammars, bounds and the argv rules that need no filesystem
// (see Resolve for those that do). It is pure.
func (p *Proposal) Check() error {
	if !namePattern.MatchString(p.Name) {
		return refuse(CodeInvalid, "name", "must match %s", namePattern)
	}
	if len(p.Args) > MaxArgs {
		return refuse(CodeInvalid, "args", "at most %d arguments", MaxArgs)
	}
	if !argText(p.Command) || strings.TrimSpace(p.Command) == "" {
		return refuse(CodeInvalid, "command", "must be 1 to %d bytes of UTF-8 without control characters", MaxArgBytes)
	}
	for i, a := range p.Args {
		if !argText(a) {
			return refuse(CodeInvalid, fmt.Sprintf("args[%d]", i), "must be at most %d bytes of UTF-8 without control characters", MaxArgBytes)
		}
	}
	if len(p.Capabilities) == 0 || len(p.Capabilities) > MaxCapabilities {
		return refuse(CodeInvalid, "capabilities", "must name 1 to %d capability ids", MaxCapabilities)
	}
	for i, c := range p.Capabilities {
		f := fmt.Sprintf("capabilities[%d]", i)
		if !capabilityPattern.MatchString(c) {
			return refuse(CodeInvalid, f, "must match %s", capabilityPattern)
		}
		for _, prev := range p.Capabilities[:i] {
			if prev == c {
				return refuse(CodeInvalid, f, "named twice")
			}
		}
	}
	if p.LeaseSeconds != 0 && (p.LeaseSeconds < MinLeaseSeconds || p.LeaseSeconds > MaxLeaseSeconds) {
		return refuse(CodeInvalid, "leaseSeconds", "must be %d to %d", MinLeaseSeconds, MaxLeaseSeconds)
	}
	if len(p.Reason) > MaxReasonBytes || !utf8.ValidString(p.Reason) || strings.ContainsFunc(p.Reason, control) {
		return refuse(CodeInvalid, "reason", "must be at most %d bytes of UTF-8 without control characters", MaxReasonBytes)
	}
	if err := p.checkPublish(); err != nil {
		return err
	}
	return checkArgv(p.Command, p.Args)
}

func (p *Proposal) checkPublish() error {
	if p.Publish == nil {
		return nil
	}
	if !roomPattern.MatchString(p.Publish.Room) {
		return refuse(CodeInvalid, "publish.room", "must match %s", roomPattern)
	}
	caps := p.Publish.Capabilities
	if len(caps) == 0 || len(caps) > MaxCapabilities {
		return refuse(CodeInvalid, "publish.capabilities", "must name 1 to %d capabilities", MaxCapabilities)
	}
	for i, c := range caps {
		f := fmt.Sprintf("publish.capabilities[%d]", i)
		if !capabilityPattern.MatchString(c.CapabilityID) {
			return refuse(CodeInvalid, f+".capabilityId", "must match %s", capabilityPattern)
		}
		expected := false
		for _, e := range p.Capabilities {
			expected = expected || e == c.CapabilityID
		}
		if !expected {
			return refuse(CodeInvalid, f+".capabilityId", "is not one of the proposal's capabilities")
		}
		for _, prev := range caps[:i] {
			if prev.CapabilityID == c.CapabilityID {
				return refuse(CodeInvalid, f+".capabilityId", "named twice")
			}
		}
		if len(c.Actions) == 0 && !c.Observe {
			return refuse(CodeInvalid, f, "publishes neither an action nor the observation")
		}
		if len(c.Actions) > MaxPublishActions {
			return refuse(CodeInvalid, f+".actions", "at most %d actions", MaxPublishActions)
		}
		for j, a := range c.Actions {
			if !actionPattern.MatchString(a) {
				return refuse(CodeInvalid, fmt.Sprintf("%s.actions[%d]", f, j), "must match %s", actionPattern)
			}
			for _, prev := range c.Actions[:j] {
				if prev == a {
					return refuse(CodeInvalid, fmt.Sprintf("%s.actions[%d]", f, j), "named twice")
				}
			}
		}
	}
	return nil
}

// Lease returns the proposal's lease in seconds.
func (p *Proposal) Lease() int64 {
	if p.LeaseSeconds == 0 {
		return DefaultLeaseSeconds
	}
	return p.LeaseSeconds
}

func argText(s string) bool {
	return len(s) <= MaxArgBytes && utf8.ValidString(s) && !strings.ContainsFunc(s, control)
}

func control(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// interpreters are the commands a proposal may name by bare name, each of whose first
// argument is the script it runs: those whose script the capability supervisor pins
// (capclient.IsInterpreter), minus none. A shell is one, but never with -c (see checkArgv).
var interpreters = map[string]bool{
	"python": true, "python3": true, "node": true, "sh": true, "bash": true, "dash": true, "perl": true, "ruby": true,
}

// Interpreter reports whether command is a bare interpreter name a proposal may use.
func Interpreter(command string) bool {
	if interpreters[command] {
		return true
	}
	rest, ok := strings.CutPrefix(command, "python3.")
	return ok && rest != "" && len(rest) <= 3 && strings.Trim(rest, "0123456789") == ""
}

// envWrappers are commands whose purpose is to set environment or run another command
// under changed conditions: none may be a proposal's command, by name or as a file's base
// name.
var envWrappers = map[string]bool{
	"env": true, "sudo": true, "doas": true, "nohup": true, "setsid": true, "nice": true, "ionice": true,
	"xargs": true, "busybox": true, "timeout": true, "stdbuf": true, "chroot": true, "su": true, "runuser": true,
}

// envAssignment is an argument that reads as NAME=value, the form env and shells take as an
// assignment.
var envAssignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// envReference finds $NAME and ${…}: without a shell nothing expands them, but an argument
// that names a variable is one a wrapper or the adapter would read the environment for.
var envReference = regexp.MustCompile(`\$(\{|[A-Za-z_])`)

// checkArgv applies the argv rules that need no filesystem.
func checkArgv(command string, args []string) error {
	base := command
	if i := strings.LastIndexByte(command, '/'); i >= 0 {
		base = command[i+1:]
	}
	if envWrappers[base] {
		return refuse(CodeEnvRefused, "command", "%q runs another command under changed conditions; name the adapter's own file or an interpreter", base)
	}
	if e := envArg("command", command); e != nil {
		return e
	}
	scriptAt := -1
	if Interpreter(command) {
		scriptAt = 0
		if len(args) == 0 {
			return refuse(CodeInvalid, "args", "an interpreter needs the script as its first argument")
		}
		if strings.HasPrefix(args[0], "-") {
			return refuse(CodeInlineCode, "args[0]", "an interpreter option before the script (%q) may run code that no file holds; put the script first", bounded(args[0]))
		}
	}
	for i, a := range args {
		f := fmt.Sprintf("args[%d]", i)
		if e := envArg(f, a); e != nil {
			return e
		}
		// An absolute path is checked by Resolve, which knows the workspace.
		if i != scriptAt && hasDotDot(a) {
			return refuse(CodeOutsideWorkspace, f, "a path with \"..\" may leave the workspace")
		}
	}
	return nil
}

func envArg(field, a string) *Error {
	switch {
	case envAssignment.MatchString(a):
		return refuse(CodeEnvRefused, field, "NAME=value sets environment; the adapter gets exactly the daemon's environment allowlist")
	case envReference.MatchString(a):
		return refuse(CodeEnvRefused, field, "$NAME refers to environment; put configuration in a file of the workspace")
	}
	lower := strings.ToLower(a)
	for _, flag := range []string{"--pass-env", "--passenv", "--env", "--env-file", "--setenv"} {
		if lower == flag || strings.HasPrefix(lower, flag+"=") {
			return refuse(CodeEnvRefused, field, "%s passes environment; the adapter gets exactly the daemon's environment allowlist", flag)
		}
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}

// bounded cuts a refused value for a message.
func bounded(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
