package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Payload bounds, in Unicode code points unless a name says bytes.
const (
	MaxPathLen         = 4096
	MaxNameLen         = 128
	MaxProviderLen     = 128
	MaxModelIDLen      = 256
	MaxSystemPromptLen = 262144
	MaxDrainTimeoutMs  = 86_400_000
	DefaultDrainMs     = 30_000
	DefaultPageSize    = 50
	MaxPageSize        = 100
	maxCursorLen       = 512
)

// EmptyPayload is the closed, empty payload of handshake, status, attach, detach and
// describeSession.
type EmptyPayload struct{}

// ClosePayload is the payload of close.
type ClosePayload struct {
	// RetainSession keeps the catalog record (dormant) when true, the default; false deletes the
	// session's durable state.
	RetainSession *bool `json:"retainSession,omitempty"`
}

// Retain reports the effective retainSession.
func (p ClosePayload) Retain() bool { return p.RetainSession == nil || *p.RetainSession }

// DrainPayload is the payload of drain. TimeoutMs stays raw so that it is read as the
// envelope's generation is: any JSON number whose value is an integer (see rawSafeInt).
type DrainPayload struct {
	TimeoutMs json.RawMessage `json:"timeoutMs,omitempty"`
}

// Validate checks the bounds and returns the effective timeout.
func (p DrainPayload) Validate() (int64, *Error) {
	if p.TimeoutMs == nil {
		return DefaultDrainMs, nil
	}
	ms, ok := rawSafeInt(p.TimeoutMs)
	if !ok || ms > MaxDrainTimeoutMs {
		return 0, invalidField("payload.timeoutMs", "must be an integer from 0 to %d", MaxDrainTimeoutMs)
	}
	return ms, nil
}

// ListSessionsPayload is the payload of listSessions (2.x): a page of the durable catalog in
// sessionId order.
type ListSessionsPayload struct {
	Cursor string `json:"cursor,omitempty"`
	Limit  *int   `json:"limit,omitempty"`
}

// Validate checks the bounds and returns the effective page size.
func (p ListSessionsPayload) Validate() (int, *Error) {
	if utf8.RuneCountInString(p.Cursor) > maxCursorLen {
		return 0, invalidField("payload.cursor", "must be at most %d characters", maxCursorLen)
	}
	if p.Limit == nil {
		return DefaultPageSize, nil
	}
	if *p.Limit < 1 || *p.Limit > MaxPageSize {
		return 0, invalidField("payload.limit", "must be from 1 to %d", MaxPageSize)
	}
	return *p.Limit, nil
}

// Session modes of open.
const (
	ModeNew      = "new"
	ModeOpen     = "open"
	ModeContinue = "continue"
	ModeMemory   = "memory"
)

// Thinking levels a model selection may ask for.
var thinkingLevels = []string{"off", "minimal", "low", "medium", "high", "xhigh", "max"}

// ResourceNone is the only value most resource members may take.
const ResourceNone = "none"

// OpenPayload is the payload of open. Resources is optional: without it every resource is
// "none", as in Pi Daemon.
type OpenPayload struct {
	Cwd       string        `json:"cwd"`
	Name      *string       `json:"name,omitempty"`
	AgentDir  *string       `json:"agentDir,omitempty"`
	Session   *OpenSession  `json:"session"`
	Model     *OpenModel    `json:"model,omitempty"`
	Resources *OpenResource `json:"resources,omitempty"`
	// Room (2.x) gives the session's model the capabilities published into that room, which
	// this host must be in, as tools next to its host tool adapter's. A 1.x open ignores it,
	// as it ignores any member it does not know.
	Room json.RawMessage `json:"room,omitempty"`
	// Lifetime (2.x) is "session", the default, or "connection": the generation is closed and
	// deleted when the connection that opened it closes, and deleted, never quarantined, by
	// the next start of a daemon that did not see it close. Such a generation must be a
	// memory session. A 1.x open ignores it.
	Lifetime json.RawMessage `json:"lifetime,omitempty"`
	// Policy (2.x) names the session's rules for its agent (internal/policy): {"name": N} for
	// a built-in policy, or {"file": PATH} for a policy file the operator owns, which the
	// daemon reads at open. Without it the session has no rules of its own (the host's still
	// apply). A 1.x open ignores it.
	Policy json.RawMessage `json:"policy,omitempty"`

	toolDescriptor json.RawMessage // set by Validate when tools grants a host adapter
	policyRef      *PolicyRef      // set by Validate when policy is present
	managedOps     []string        // set by Validate when tools asks for a managed airlock-fs grant
}

// Lifetimes of a session generation (OpenPayload.Lifetime).
const (
	LifetimeSession    = "session"
	LifetimeConnection = "connection"
)

// ToolsHostAdapter is the tools mode that grants a host tool adapter (2.x).
const ToolsHostAdapter = "host-adapter"

// ToolsManagedFS is the tools mode that asks the daemon for a grant of the session's cwd from
// the airlock-fs it runs itself (2.x): the daemon mints the grant, binds it as a host-adapter
// descriptor and revokes it when the generation ends. The policy it yields is the
// host-adapter policy of that descriptor.
const ToolsManagedFS = "airlock-fs"

// maxManagedOps bounds resources.tools.operations: the six operations, with room for the
// adapter to refuse an unknown one by name rather than this layer by count.
const maxManagedOps = 16

// ToolsResource is resources.tools when it grants a host tool adapter: mode "host-adapter"
// with a descriptor, or mode "airlock-fs" with the operations to grant. The descriptor is
// validated by the tool-adapter layer, which knows the host incarnation it must be bound to;
// the operations by the adapter that mints the grant. Mode stays raw: any value but those
// strings is an unsupported policy, whatever its type.
type ToolsResource struct {
	Mode       json.RawMessage `json:"mode"`
	Descriptor json.RawMessage `json:"descriptor,omitempty"`
	Operations json.RawMessage `json:"operations,omitempty"`
}

// PolicyRef is the open payload's policy member: exactly one of Name and File.
type PolicyRef struct {
	Name string `json:"name,omitempty"`
	File string `json:"file,omitempty"`
}

// PolicyRef returns the policy a validated 2.x open names, or nil.
func (p *OpenPayload) PolicyRef() *PolicyRef { return p.policyRef }

// ToolDescriptor returns the raw host tool-adapter descriptor of a validated 2.x open, or nil
// when the open grants no tools. It holds the capability handle: never log or store it.
func (p *OpenPayload) ToolDescriptor() json.RawMessage { return p.toolDescriptor }

// ManagedOperations returns the operations a validated 2.x open asks the daemon's own
// airlock-fs to grant on its cwd (tools mode "airlock-fs"), or nil.
func (p *OpenPayload) ManagedOperations() []string { return p.managedOps }

// SetToolDescriptor records the descriptor the daemon minted for a managed open, after which
// the open proceeds as a host-adapter open of it.
func (p *OpenPayload) SetToolDescriptor(raw json.RawMessage) { p.toolDescriptor = raw }

// decodeTools reads a 2.x resources.tools: "none", or {mode:"host-adapter", descriptor}, closed
// like the descriptor inside it. Pi Daemon's rules and codes: anything but "none" or an object
// is invalid_field; an object with a member other than mode and descriptor is
// invalid_tool_adapter_descriptor; a mode other than "host-adapter" is
// unsupported_resource_policy.
func (p *OpenPayload) decodeTools(raw json.RawMessage) *Error {
	if raw == nil {
		return invalidField("payload.resources.tools", "is required")
	}
	if s, ok := rawString(raw); ok && s == ResourceNone {
		return nil
	}
	if raw[0] != '{' {
		return invalidField("payload.resources.tools", "must be %q or an object", ResourceNone)
	}
	var t ToolsResource
	if err := ndjson.Decode(raw, &t, ndjson.Closed); err != nil {
		e := fieldError(err)
		e.Code = CodeInvalidToolDescriptor
		// An empty member name has an empty path: name the tools member itself then.
		field := "payload.resources.tools"
		if path, _ := e.Details["field"].(string); path != "" {
			field += "." + path
		}
		e.Details["field"] = field
		return e
	}
	mode, ok := rawString(t.Mode)
	if !ok || (mode != ToolsHostAdapter && mode != ToolsManagedFS) {
		return Errorf(CodeUnsupportedResource, "resources.tools.mode must be %q or %q", ToolsHostAdapter, ToolsManagedFS).
			With("field", "payload.resources.tools.mode")
	}
	if mode == ToolsManagedFS {
		return p.decodeManaged(t)
	}
	if t.Operations != nil {
		return Errorf(CodeInvalidToolDescriptor, "resources.tools.operations goes with mode %q, not a descriptor", ToolsManagedFS).
			With("field", "payload.resources.tools.operations")
	}
	if len(t.Descriptor) == 0 || t.Descriptor[0] != '{' {
		return Errorf(CodeInvalidToolDescriptor, "resources.tools.descriptor must be an object").
			With("field", "payload.resources.tools.descriptor")
	}
	p.toolDescriptor = t.Descriptor
	return nil
}

// decodeManaged reads the operations of a tools object of mode "airlock-fs": a non-empty array
// of distinct strings. Which operations exist is the adapter's to say when it mints the grant.
func (p *OpenPayload) decodeManaged(t ToolsResource) *Error {
	if t.Descriptor != nil {
		return Errorf(CodeInvalidToolDescriptor, "resources.tools of mode %q takes operations, not a descriptor", ToolsManagedFS).
			With("field", "payload.resources.tools.descriptor")
	}
	const field = "payload.resources.tools.operations"
	var ops []string
	if t.Operations == nil || t.Operations[0] != '[' || ndjson.Decode(t.Operations, &ops, ndjson.Closed) != nil ||
		len(ops) == 0 || len(ops) > maxManagedOps {
		return invalidField(field, "must be an array of 1 to %d operation names", maxManagedOps)
	}
	for i, op := range ops {
		if !validIdentifier(op, MaxNameLen) || contains(ops[:i], op) {
			return invalidField(field, "must name distinct operations without control characters")
		}
	}
	p.managedOps = ops
	return nil
}

// OpenSession selects how the session's conversation is stored. SessionDir stays raw: a 1.x
// open ignores it whatever it holds, as the original protocol does.
type OpenSession struct {
	Mode       string          `json:"mode"`
	Path       *string         `json:"path,omitempty"`
	SessionDir json.RawMessage `json:"sessionDir,omitempty"`
}

// OpenModel is the model member of open as sent.
type OpenModel struct {
	Provider      string  `json:"provider"`
	ID            string  `json:"id"`
	ThinkingLevel *string `json:"thinkingLevel,omitempty"`
}

// ModelRef names a model of a configured provider.
type ModelRef struct {
	Provider      string `json:"provider"`
	ID            string `json:"id"`
	ThinkingLevel string `json:"thinkingLevel,omitempty"`
}

// OpenResource is the resource policy of open. Every member except tools and systemPrompt must
// be "none": airlock loads no extensions, skills, prompt templates, themes or context files.
// systemPrompt is text, in 1.x as in 2.x. The six policy members stay raw so that a value of
// the wrong type (invalid_field) is told apart from a policy this host does not support
// (unsupported_resource_policy), as Pi Daemon tells them apart.
type OpenResource struct {
	Extensions      json.RawMessage `json:"extensions"`
	Skills          json.RawMessage `json:"skills"`
	PromptTemplates json.RawMessage `json:"promptTemplates"`
	Themes          json.RawMessage `json:"themes"`
	ContextFiles    json.RawMessage `json:"contextFiles"`
	Tools           json.RawMessage `json:"tools"`
	SystemPrompt    *string         `json:"systemPrompt,omitempty"`
}

// Policy is the normalized, secret-free open policy of a session generation. Two opens of the
// same generation are the same open exactly when their policies are equal; its canonical JSON
// is what the catalog's policyDigest hashes and what a manifest keeps.
type Policy struct {
	Cwd          string    `json:"cwd"`
	Name         string    `json:"name,omitempty"`
	AgentDir     string    `json:"agentDir,omitempty"`
	Mode         string    `json:"mode"`
	Path         string    `json:"path,omitempty"`
	SessionDir   string    `json:"sessionDir,omitempty"`
	Model        *ModelRef `json:"model,omitempty"`
	SystemPrompt string    `json:"systemPrompt,omitempty"`
	Tools        string    `json:"tools"`
	// ToolAdapter is the secret-free summary of a granted host tool adapter (protocol
	// version, adapter id and version, operations in order, limits): never the endpoint or
	// the capability handle.
	ToolAdapter json.RawMessage `json:"toolAdapter,omitempty"`
	// Room is the room whose published capabilities the model gets as tools (2.x).
	Room string `json:"room,omitempty"`
	// Lifetime is "connection" for a generation that lives as long as the connection that
	// opened it (2.x); empty for the default, "session".
	Lifetime string `json:"lifetime,omitempty"`
	// Rules is the session's policy document (internal/policy's Document, compact), resolved
	// at open from the open's policy member: what the gate decides the session's calls by,
	// what describe shows and what a manifest keeps, so that a recovered generation keeps
	// its rules even if the file changed. Absent: no rules of its own.
	Rules json.RawMessage `json:"rules,omitempty"`
}

// Digest is the lowercase hex SHA-256 of the policy's canonical JSON.
func (p *Policy) Digest() string {
	b, err := json.Marshal(p)
	if err != nil {
		// A Policy holds only strings and a struct of strings; Marshal cannot fail on it.
		panic("protocol: policy not serializable: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Validate checks an open payload against the rules of the command's version and returns the
// normalized policy. A v1 open ignores session.sessionDir, as the original protocol does.
func (p *OpenPayload) Validate(v Version) (*Policy, *Error) {
	if e := checkPath("payload.cwd", p.Cwd, true); e != nil {
		return nil, e
	}
	pol := &Policy{Cwd: p.Cwd}
	if p.Name != nil {
		if !validIdentifier(*p.Name, MaxNameLen) {
			return nil, invalidField("payload.name", "must be 1 to %d characters without control characters", MaxNameLen)
		}
		pol.Name = *p.Name
	}
	if p.AgentDir != nil {
		if e := checkPath("payload.agentDir", *p.AgentDir, true); e != nil {
			return nil, e
		}
		pol.AgentDir = *p.AgentDir
	}
	if p.Session == nil {
		return nil, invalidField("payload.session", "is required")
	}
	switch p.Session.Mode {
	case ModeNew, ModeContinue, ModeMemory:
		// Pi Daemon reads a path beside these modes only for its bounds, and ignores it.
		if p.Session.Path != nil {
			if n := utf8.RuneCountInString(*p.Session.Path); n == 0 || n > MaxPathLen {
				return nil, invalidField("payload.session.path", "must be 1 to %d characters", MaxPathLen)
			}
		}
	case ModeOpen:
		if p.Session.Path == nil {
			return nil, invalidField("payload.session.path", "is required with mode %q", ModeOpen)
		}
		if e := checkPath("payload.session.path", *p.Session.Path, true); e != nil {
			return nil, e
		}
		pol.Path = *p.Session.Path
	default:
		return nil, invalidField("payload.session.mode", "must be one of new, open, continue, memory")
	}
	pol.Mode = p.Session.Mode
	if p.Session.SessionDir != nil && v.V2() {
		dir, ok := rawString(p.Session.SessionDir)
		if !ok {
			return nil, invalidField("payload.session.sessionDir", "must be a string")
		}
		if e := checkPath("payload.session.sessionDir", dir, true); e != nil {
			return nil, e
		}
		pol.SessionDir = dir
	}
	if p.Model != nil {
		m := ModelRef{Provider: p.Model.Provider, ID: p.Model.ID}
		if !validIdentifier(m.Provider, MaxProviderLen) {
			return nil, invalidField("payload.model.provider", "must be 1 to %d characters without control characters", MaxProviderLen)
		}
		if !validIdentifier(m.ID, MaxModelIDLen) {
			return nil, invalidField("payload.model.id", "must be 1 to %d characters without control characters", MaxModelIDLen)
		}
		if p.Model.ThinkingLevel != nil {
			m.ThinkingLevel = *p.Model.ThinkingLevel
			if !contains(thinkingLevels, m.ThinkingLevel) {
				return nil, invalidField("payload.model.thinkingLevel", "must be one of %s", strings.Join(thinkingLevels, ", "))
			}
		}
		pol.Model = &m
	}
	if e := p.validateResources(v, pol); e != nil {
		return nil, e
	}
	if p.Room != nil && v.V2() {
		id, ok := rawString(p.Room)
		if !ok {
			return nil, invalidField("payload.room", "must be a string")
		}
		if e := validRoomID("payload.room", id); e != nil {
			return nil, e
		}
		pol.Room = id
	}
	if p.Lifetime != nil && v.V2() {
		l, ok := rawString(p.Lifetime)
		if !ok || (l != LifetimeSession && l != LifetimeConnection) {
			return nil, invalidField("payload.lifetime", "must be %q or %q", LifetimeSession, LifetimeConnection)
		}
		if l == LifetimeConnection {
			if pol.Mode != ModeMemory {
				return nil, invalidField("payload.lifetime", "%q needs session.mode %q", LifetimeConnection, ModeMemory)
			}
			pol.Lifetime = l
		}
	}
	if p.Policy != nil && v.V2() {
		var ref PolicyRef
		if err := ndjson.Decode(p.Policy, &ref, ndjson.Closed); err != nil {
			return nil, invalidField("payload.policy", "must be {\"name\": NAME} or {\"file\": PATH}")
		}
		switch {
		case (ref.Name == "") == (ref.File == ""):
			return nil, invalidField("payload.policy", "must name exactly one of name and file")
		case ref.Name != "" && !validIdentifier(ref.Name, MaxNameLen):
			return nil, invalidField("payload.policy.name", "must be 1 to %d characters without control characters", MaxNameLen)
		case ref.File != "":
			if e := checkPath("payload.policy.file", ref.File, true); e != nil {
				return nil, e
			}
		}
		p.policyRef = &ref
	}
	return pol, nil
}

// maxResourceNameLen bounds a resource policy string, as Pi Daemon bounds it.
const maxResourceNameLen = 16

func (p *OpenPayload) validateResources(v Version, pol *Policy) *Error {
	pol.Tools = ResourceNone
	r := p.Resources
	if r == nil {
		return nil // absent: every resource "none"
	}
	// Version 2 reads tools first, then the rest as version 1 does.
	if v.V2() {
		if e := p.decodeTools(r.Tools); e != nil {
			return e
		}
	}
	members := []struct {
		name string
		raw  json.RawMessage
	}{
		{"extensions", r.Extensions}, {"skills", r.Skills}, {"promptTemplates", r.PromptTemplates},
		{"themes", r.Themes}, {"contextFiles", r.ContextFiles}, {"tools", r.Tools},
	}
	for _, m := range members {
		if m.name == "tools" && v.V2() {
			continue
		}
		field := "payload.resources." + m.name
		if m.raw == nil {
			return invalidField(field, "is required")
		}
		s, ok := rawString(m.raw)
		if !ok {
			return invalidField(field, "must be a string")
		}
		if n := utf8.RuneCountInString(s); n == 0 || n > maxResourceNameLen {
			return invalidField(field, "must be 1 to %d characters", maxResourceNameLen)
		}
		if s != ResourceNone {
			return unsupportedResource(m.name, v)
		}
	}
	if p.toolDescriptor != nil || p.managedOps != nil {
		pol.Tools = ToolsHostAdapter
	}
	if r.SystemPrompt != nil {
		// Text in every version, "" and "none" included, as Pi Daemon takes it. An empty
		// prompt gives the model no system message, as an absent one does.
		if utf8.RuneCountInString(*r.SystemPrompt) > MaxSystemPromptLen {
			return invalidField("payload.resources.systemPrompt", "must be at most %d characters", MaxSystemPromptLen)
		}
		pol.SystemPrompt = *r.SystemPrompt
	}
	return nil
}

func unsupportedResource(member string, v Version) *Error {
	return Errorf(CodeUnsupportedResource, "resources.%s is not supported by protocol %s on this host", member, v.Raw).
		With("field", "payload.resources."+member)
}

// checkPath validates an absolute path member: 1 to MaxPathLen code points, no control
// characters, and already clean ("/a/b", never "/a//b" or "/a/./b").
func checkPath(field, p string, absolute bool) *Error {
	if p == "" || utf8.RuneCountInString(p) > MaxPathLen {
		return invalidField(field, "must be 1 to %d characters", MaxPathLen)
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return invalidField(field, "must not contain control characters")
		}
	}
	if absolute && !filepath.IsAbs(p) {
		return invalidField(field, "must be an absolute path")
	}
	if filepath.Clean(p) != p {
		return invalidField(field, "must be a clean path (no //, ., .. or trailing /)")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
