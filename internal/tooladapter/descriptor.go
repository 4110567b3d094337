package tooladapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// ProtocolVersion is the adapter wire version. It is independent of the daemon protocol version
// that carries the descriptor (v2).
const ProtocolVersion = "1.0"

// TransportUnix is the only endpoint transport.
const TransportUnix = "unix"

// Bounds of descriptor and frame members. Identifier bounds are the stricter runtime ones that
// DESIGN.md adopts; "characters" are Unicode code points.
const (
	MaxAdapterIDLen       = 128
	MaxAdapterVersionLen  = 64
	MaxHostInstanceIDLen  = 128
	MaxSessionIDLen       = 256
	MaxSocketPathBytes    = 100 // sun_path, with room for the NUL
	MaxRequestIDLen       = 128
	MaxIdempotencyKeyLen  = 512
	MaxErrorCodeLen       = 128
	MaxErrorMessageLen    = 1024
	minHandleLen          = 32
	maxHandleLen          = 512
	maxDescriptorRawBytes = 64 << 10 // far above any legal descriptor; bounds the work of a hostile one
)

// The six filesystem operations, in their canonical order.
const (
	OpList   = "fs.list"
	OpStat   = "fs.stat"
	OpRead   = "fs.read"
	OpSearch = "fs.search"
	OpWrite  = "fs.write"
	OpEdit   = "fs.edit"
)

// Operations lists every operation a descriptor may grant.
var Operations = []string{OpList, OpStat, OpRead, OpSearch, OpWrite, OpEdit}

// Limits are the seven mandatory descriptor limits. They have no defaults.
type Limits struct {
	MaxRequestBytes       int64 `json:"maxRequestBytes"`
	MaxResponseBytes      int64 `json:"maxResponseBytes"`
	MaxConcurrentRequests int64 `json:"maxConcurrentRequests"`
	MaxQueuedRequests     int64 `json:"maxQueuedRequests"`
	RequestTimeoutMs      int64 `json:"requestTimeoutMs"`
	MaxIdempotencyKeys    int64 `json:"maxIdempotencyKeys"`
	IdempotencyTtlMs      int64 `json:"idempotencyTtlMs"`
}

// The queue limits the protocol documentation recommends, and the 2.x handshake advertises as
// hostToolAdapterRecommendedQueueLimits (Pi Daemon's 4/16, chosen after ordinary parallel tool
// bursts filled a smaller queue). Only a recommendation: the daemon never fills in a limit.
// airlock-fs's defaults are these.
const (
	RecommendedMaxConcurrentRequests = 4
	RecommendedMaxQueuedRequests     = 16
)

// limitBound is the inclusive range of one limit.
type limitBound struct {
	name     string
	min, max int64
	get      func(*Limits) int64
}

var limitBounds = []limitBound{
	{"maxRequestBytes", 2048, 4 << 20, func(l *Limits) int64 { return l.MaxRequestBytes }},
	{"maxResponseBytes", 1024, 4 << 20, func(l *Limits) int64 { return l.MaxResponseBytes }},
	{"maxConcurrentRequests", 1, 64, func(l *Limits) int64 { return l.MaxConcurrentRequests }},
	{"maxQueuedRequests", 0, 256, func(l *Limits) int64 { return l.MaxQueuedRequests }},
	{"requestTimeoutMs", 100, 120_000, func(l *Limits) int64 { return l.RequestTimeoutMs }},
	{"maxIdempotencyKeys", 1, 4096, func(l *Limits) int64 { return l.MaxIdempotencyKeys }},
	{"idempotencyTtlMs", 1000, 86_400_000, func(l *Limits) int64 { return l.IdempotencyTtlMs }},
}

// check validates every limit against its range; field is prefixed to the member name.
func (l *Limits) check(prefix string) *protocol.Error {
	for _, b := range limitBounds {
		if v := b.get(l); v < b.min || v > b.max {
			return fieldError(CodeInvalidLimit, prefix+b.name, "%s must be an integer from %d to %d", b.name, b.min, b.max)
		}
	}
	return nil
}

// Endpoint is where the adapter listens.
type Endpoint struct {
	Transport string `json:"transport"`
	Path      string `json:"path"`
}

// Binding is the session incarnation a descriptor must be bound to: this host's instance id
// and the open envelope's session id and generation.
type Binding struct {
	HostInstanceID string
	SessionID      string
	Generation     int64
}

// DescriptorBinding is a descriptor's binding: the incarnation plus the capability handle.
type DescriptorBinding struct {
	HostInstanceID   string `json:"hostInstanceId"`
	SessionID        string `json:"sessionId"`
	Generation       int64  `json:"generation"`
	CapabilityHandle Handle `json:"capabilityHandle"`
}

// Descriptor is a validated host tool-adapter descriptor. It holds the capability handle and
// the endpoint path, so it must not reach logs or responses: use Summary for anything durable
// or visible. The handle redacts itself even if a Descriptor is printed by mistake.
type Descriptor struct {
	ProtocolVersion string            `json:"protocolVersion"`
	AdapterID       string            `json:"adapterId"`
	AdapterVersion  string            `json:"adapterVersion"`
	Endpoint        Endpoint          `json:"endpoint"`
	Binding         DescriptorBinding `json:"binding"`
	Operations      []string          `json:"operations"`
	Limits          Limits            `json:"limits"`
}

// Summary is the secret-free policy of a descriptor: what a manifest keeps and what
// reprovisioning compares. It holds neither the handle nor the endpoint.
type Summary struct {
	ProtocolVersion string   `json:"protocolVersion"`
	AdapterID       string   `json:"adapterId"`
	AdapterVersion  string   `json:"adapterVersion"`
	Operations      []string `json:"operations"`
	Limits          Limits   `json:"limits"`
}

// Summary returns the descriptor's secret-free policy summary.
func (d *Descriptor) Summary() Summary {
	return Summary{
		ProtocolVersion: d.ProtocolVersion,
		AdapterID:       d.AdapterID,
		AdapterVersion:  d.AdapterVersion,
		Operations:      append([]string(nil), d.Operations...),
		Limits:          d.Limits,
	}
}

// Canonical returns the summary's canonical JSON: fixed member order, no insignificant space.
// Two summaries describe the same policy exactly when their canonical forms are equal.
func (s Summary) Canonical() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic("tooladapter: summary not serializable: " + err.Error()) // only strings and ints
	}
	return b
}

// Equal reports whether two summaries describe the same policy.
func (s Summary) Equal(o Summary) bool { return string(s.Canonical()) == string(o.Canonical()) }

// Incarnation returns the host, session and generation the descriptor is bound to.
func (d *Descriptor) Incarnation() Binding {
	return Binding{HostInstanceID: d.Binding.HostInstanceID, SessionID: d.Binding.SessionID, Generation: d.Binding.Generation}
}

// Grants reports whether the descriptor grants op.
func (d *Descriptor) Grants(op string) bool {
	for _, o := range d.Operations {
		if o == op {
			return true
		}
	}
	return false
}

// Identity returns the wire identity every frame of this binding carries.
func (d *Descriptor) Identity() Identity {
	return Identity{
		AdapterID:      d.AdapterID,
		AdapterVersion: d.AdapterVersion,
		HostInstanceID: d.Binding.HostInstanceID,
		SessionID:      d.Binding.SessionID,
		Generation:     d.Binding.Generation,
	}
}

// Wire shapes of the descriptor, with pointers so that a missing member is told apart from a
// zero one. ndjson.Decode refuses null, unknown keys, duplicates and case variants at every level.
type (
	rawDescriptor struct {
		ProtocolVersion *string      `json:"protocolVersion"`
		AdapterID       *string      `json:"adapterId"`
		AdapterVersion  *string      `json:"adapterVersion"`
		Endpoint        *rawEndpoint `json:"endpoint"`
		Binding         *rawBinding  `json:"binding"`
		Operations      *[]string    `json:"operations"`
		Limits          *rawLimits   `json:"limits"`
	}
	rawEndpoint struct {
		Transport *string `json:"transport"`
		Path      *string `json:"path"`
	}
	rawBinding struct {
		HostInstanceID   *string `json:"hostInstanceId"`
		SessionID        *string `json:"sessionId"`
		Generation       *int64  `json:"generation"`
		CapabilityHandle *string `json:"capabilityHandle"`
	}
	rawLimits struct {
		MaxRequestBytes       *int64 `json:"maxRequestBytes"`
		MaxResponseBytes      *int64 `json:"maxResponseBytes"`
		MaxConcurrentRequests *int64 `json:"maxConcurrentRequests"`
		MaxQueuedRequests     *int64 `json:"maxQueuedRequests"`
		RequestTimeoutMs      *int64 `json:"requestTimeoutMs"`
		MaxIdempotencyKeys    *int64 `json:"maxIdempotencyKeys"`
		IdempotencyTtlMs      *int64 `json:"idempotencyTtlMs"`
	}
)

// semverPattern is the SemVer rule of adapterVersion; validSemver implements it by hand on
// the per-frame path, and a test checks the two agree.
var semverPattern = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// ParseDescriptor validates a descriptor and checks that it is bound to want. Every failure has
// the code of the rule it breaks and names the member in details.field; no message contains a
// value from the descriptor, so neither the handle nor the endpoint path can leak through it.
//
// Rules, in the order they are checked: the JSON is one object, closed at every level
// (invalid_tool_adapter_field for an unknown, duplicated or case-variant key; a missing or
// mistyped member gets the code of its group); protocolVersion "1.0"; identity; endpoint;
// binding; capability; operations; limits; the limits hold the normalized bind and bound frames
// (invalid_tool_adapter_limit); and finally the binding equals want
// (tool_adapter_binding_mismatch).
func ParseDescriptor(raw json.RawMessage, want Binding) (*Descriptor, *protocol.Error) {
	if len(raw) > maxDescriptorRawBytes {
		return nil, protocol.Errorf(CodeInvalidDescriptor, "descriptor exceeds %d bytes", maxDescriptorRawBytes)
	}
	var rd rawDescriptor
	if err := ndjson.Decode(raw, &rd, ndjson.Closed); err != nil {
		return nil, decodeError(err)
	}
	d, e := rd.validate()
	if e != nil {
		return nil, e
	}
	if e := d.checkSelfContained(); e != nil {
		return nil, e
	}
	if e := d.CheckBinding(want); e != nil {
		return nil, e
	}
	return d, nil
}

// CheckBinding reports tool_adapter_binding_mismatch, naming the first differing member, when
// the descriptor is not bound to want.
func (d *Descriptor) CheckBinding(want Binding) *protocol.Error {
	switch {
	case d.Binding.HostInstanceID != want.HostInstanceID:
		return fieldError(CodeBindingMismatch, "binding.hostInstanceId", "descriptor is bound to another host instance")
	case d.Binding.SessionID != want.SessionID:
		return fieldError(CodeBindingMismatch, "binding.sessionId", "descriptor is bound to another session")
	case d.Binding.Generation != want.Generation:
		return fieldError(CodeBindingMismatch, "binding.generation", "descriptor is bound to another generation")
	}
	return nil
}

// decodeError maps a strict-decoding failure to a descriptor code. Structural problems
// (unknown, duplicated or case-variant keys) are field errors; a wrong type is charged to the
// group of the member that has it; anything else means the text is not a descriptor at all.
func decodeError(err error) *protocol.Error {
	var de *ndjson.DecodeError
	if !errors.As(err, &de) || de.Reason == ndjson.ReasonSyntax {
		return protocol.Errorf(CodeInvalidDescriptor, "descriptor must be one JSON object")
	}
	field := de.Path
	switch de.Reason {
	case ndjson.ReasonUnknownField, ndjson.ReasonDuplicateKey, ndjson.ReasonCaseVariant:
		return fieldError(CodeInvalidField, unknownKeyField(field), "descriptor member is not allowed (%s)", de.Reason)
	}
	if field == "" {
		return protocol.Errorf(CodeInvalidDescriptor, "descriptor must be one JSON object")
	}
	return fieldError(groupCode(field), field, "descriptor member has the wrong type")
}

// unknownKeyField is details.field for a key the descriptor refuses: its path, unless the
// key is long enough to be a capability handle, which is then named by its length only, so
// that a client that put its handle in a key's place does not get it back in the answer.
func unknownKeyField(path string) string {
	parent, key := "", path
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		parent, key = path[:i+1], path[i+1:]
	}
	if len(key) < minHandleLen {
		return path
	}
	return fmt.Sprintf("%s(a key of %d bytes)", parent, len(key))
}

// groupCode returns the error code of the rule group a descriptor member belongs to.
func groupCode(field string) string {
	top, _, _ := strings.Cut(field, ".")
	top, _, _ = strings.Cut(top, "[")
	switch {
	case field == "binding.capabilityHandle":
		return CodeInvalidCapability
	case top == "protocolVersion":
		return CodeUnsupportedVersion
	case top == "adapterId" || top == "adapterVersion":
		return CodeInvalidIdentity
	case top == "endpoint":
		return CodeInvalidEndpoint
	case top == "binding":
		return CodeInvalidBinding
	case top == "operations":
		return CodeUnsupportedOp
	case top == "limits":
		return CodeInvalidLimit
	}
	return CodeInvalidDescriptor
}

func missing(field string) *protocol.Error {
	return fieldError(groupCode(field), field, "descriptor member %s is required", field)
}

func (rd *rawDescriptor) validate() (*Descriptor, *protocol.Error) {
	d := &Descriptor{}
	if rd.ProtocolVersion == nil {
		return nil, missing("protocolVersion")
	}
	if *rd.ProtocolVersion != ProtocolVersion {
		return nil, fieldError(CodeUnsupportedVersion, "protocolVersion", "tool adapter protocol version must be %q", ProtocolVersion)
	}
	d.ProtocolVersion = ProtocolVersion

	if rd.AdapterID == nil {
		return nil, missing("adapterId")
	}
	if e := checkAdapterID(*rd.AdapterID, "adapterId"); e != nil {
		return nil, e
	}
	d.AdapterID = *rd.AdapterID
	if rd.AdapterVersion == nil {
		return nil, missing("adapterVersion")
	}
	if e := checkAdapterVersion(*rd.AdapterVersion, "adapterVersion"); e != nil {
		return nil, e
	}
	d.AdapterVersion = *rd.AdapterVersion

	ep := rd.Endpoint
	switch {
	case ep == nil:
		return nil, missing("endpoint")
	case ep.Transport == nil:
		return nil, missing("endpoint.transport")
	case *ep.Transport != TransportUnix:
		return nil, fieldError(CodeInvalidEndpoint, "endpoint.transport", "endpoint transport must be %q", TransportUnix)
	case ep.Path == nil:
		return nil, missing("endpoint.path")
	}
	if !validSocketPath(*ep.Path) {
		return nil, fieldError(CodeInvalidEndpoint, "endpoint.path",
			"endpoint path must be absolute, canonical, not the root, without control characters and at most %d bytes", MaxSocketPathBytes)
	}
	d.Endpoint = Endpoint{Transport: TransportUnix, Path: *ep.Path}

	b := rd.Binding
	switch {
	case b == nil:
		return nil, missing("binding")
	case b.HostInstanceID == nil:
		return nil, missing("binding.hostInstanceId")
	case b.SessionID == nil:
		return nil, missing("binding.sessionId")
	case b.Generation == nil:
		return nil, missing("binding.generation")
	case b.CapabilityHandle == nil:
		return nil, missing("binding.capabilityHandle")
	}
	id := Identity{HostInstanceID: *b.HostInstanceID, SessionID: *b.SessionID, Generation: *b.Generation}
	if e := id.checkBinding("binding.", CodeInvalidBinding); e != nil {
		return nil, e
	}
	h, e := NewHandle(*b.CapabilityHandle)
	if e != nil {
		return nil, e
	}
	d.Binding = DescriptorBinding{HostInstanceID: id.HostInstanceID, SessionID: id.SessionID, Generation: id.Generation, CapabilityHandle: h}

	if rd.Operations == nil {
		return nil, missing("operations")
	}
	ops, e := checkOperations(*rd.Operations, "operations", CodeUnsupportedOp)
	if e != nil {
		return nil, e
	}
	d.Operations = ops

	if rd.Limits == nil {
		return nil, missing("limits")
	}
	l, e := rd.Limits.toLimits("limits.")
	if e != nil {
		return nil, e
	}
	d.Limits = l
	return d, nil
}

func (rl *rawLimits) toLimits(prefix string) (Limits, *protocol.Error) {
	members := []struct {
		name string
		v    *int64
	}{
		{"maxRequestBytes", rl.MaxRequestBytes}, {"maxResponseBytes", rl.MaxResponseBytes},
		{"maxConcurrentRequests", rl.MaxConcurrentRequests}, {"maxQueuedRequests", rl.MaxQueuedRequests},
		{"requestTimeoutMs", rl.RequestTimeoutMs}, {"maxIdempotencyKeys", rl.MaxIdempotencyKeys},
		{"idempotencyTtlMs", rl.IdempotencyTtlMs},
	}
	for _, m := range members {
		if m.v == nil {
			return Limits{}, fieldError(CodeInvalidLimit, prefix+m.name, "limit %s is required", m.name)
		}
	}
	l := Limits{
		MaxRequestBytes: *rl.MaxRequestBytes, MaxResponseBytes: *rl.MaxResponseBytes,
		MaxConcurrentRequests: *rl.MaxConcurrentRequests, MaxQueuedRequests: *rl.MaxQueuedRequests,
		RequestTimeoutMs: *rl.RequestTimeoutMs, MaxIdempotencyKeys: *rl.MaxIdempotencyKeys,
		IdempotencyTtlMs: *rl.IdempotencyTtlMs,
	}
	return l, l.check(prefix)
}

// checkOperations validates an operations list: 1 to 6 unique known operations, order kept.
func checkOperations(ops []string, field, code string) ([]string, *protocol.Error) {
	if len(ops) == 0 || len(ops) > len(Operations) {
		return nil, fieldError(code, field, "operations must list 1 to %d operations", len(Operations))
	}
	seen := make(map[string]bool, len(ops))
	for _, op := range ops {
		if !knownOperation(op) || seen[op] {
			return nil, fieldError(code, field, "operations must be unique members of fs.list, fs.stat, fs.read, fs.search, fs.write, fs.edit")
		}
		seen[op] = true
	}
	return append([]string(nil), ops...), nil
}

func knownOperation(op string) bool {
	for _, o := range Operations {
		if o == op {
			return true
		}
	}
	return false
}

func checkAdapterID(s, field string) *protocol.Error {
	if !validToken(s, MaxAdapterIDLen, "._-") {
		return fieldError(CodeInvalidIdentity, field, "adapterId must be 1 to %d characters of [A-Za-z0-9._-], starting with a letter or digit", MaxAdapterIDLen)
	}
	return nil
}

func checkAdapterVersion(s, field string) *protocol.Error {
	if len(s) == 0 || len(s) > MaxAdapterVersionLen || !validSemver(s) {
		return fieldError(CodeInvalidIdentity, field, "adapterVersion must be a SemVer version of 1 to %d characters", MaxAdapterVersionLen)
	}
	return nil
}

// validText reports whether s has 1 to max code points and no control characters.
func validText(s string, max int) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	n := 0
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
		if n++; n > max {
			return false
		}
	}
	return true
}

func validSocketPath(p string) bool {
	if len(p) < 2 || len(p) > MaxSocketPathBytes || !utf8.ValidString(p) || p[0] != '/' || path.Clean(p) != p {
		return false
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// checkSelfContained serializes the normalized bind and bound frames this descriptor implies and
// refuses limits too small to carry them: a legal descriptor can always complete its handshake.
func (d *Descriptor) checkSelfContained() *protocol.Error {
	bind, err := marshalFrame(d.BindFrame())
	if err != nil || int64(len(bind)) > d.Limits.MaxRequestBytes {
		return fieldError(CodeInvalidLimit, "limits.maxRequestBytes", "maxRequestBytes cannot hold this descriptor's bind frame")
	}
	bound, err := marshalFrame(d.BoundFrame())
	if err != nil || int64(len(bound)) > d.Limits.MaxResponseBytes {
		return fieldError(CodeInvalidLimit, "limits.maxResponseBytes", "maxResponseBytes cannot hold this descriptor's bound frame")
	}
	return nil
}
