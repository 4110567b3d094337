package server

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// DefaultAdapterID is the adapterId of a grant that names none.
const DefaultAdapterID = "airlock-fs"

// DevVersion is the adapterVersion of a build without a release version.
const DevVersion = "0.1.0"

// handleBytes is the entropy of a capability handle: 32 bytes from crypto/rand, 43 characters
// of base64url without padding.
const handleBytes = 32

// MaxGrants bounds the live grants of one server; each holds a directory descriptor.
const MaxGrants = 1024

// DefaultLimits are the limits of a grant request that leaves them out. The wire has no
// defaults; these are airlock-fs's, the values the protocol documentation recommends.
var DefaultLimits = tooladapter.Limits{
	MaxRequestBytes:       1 << 20,
	MaxResponseBytes:      1 << 20,
	MaxConcurrentRequests: tooladapter.RecommendedMaxConcurrentRequests,
	MaxQueuedRequests:     tooladapter.RecommendedMaxQueuedRequests,
	RequestTimeoutMs:      30_000,
	MaxIdempotencyKeys:    256,
	IdempotencyTtlMs:      3_600_000,
}

var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// AdapterVersion turns a build version ("v1.2.3", "1.2.3", "dev") into the SemVer
// adapterVersion a descriptor needs: DevVersion unless the build version is SemVer.
func AdapterVersion(build string) string {
	v := strings.TrimPrefix(build, "v")
	if len(v) <= tooladapter.MaxAdapterVersionLen && semver.MatchString(v) {
		return v
	}
	return DevVersion
}

// grant is one capability: a handle bound to a root and a session incarnation. The handle is
// held only as a redacting tooladapter.Handle.
type grant struct {
	id       string
	handle   tooladapter.Handle
	secret   []byte // the handle's characters, read only by the reflection check in answer
	root     *fsops.Root
	identity tooladapter.Identity
	ops      []string
	limits   tooladapter.Limits
	created  time.Time

	// mu guards the fields below and the state of the bound connection (conn.go).
	mu      sync.Mutex
	conn    *conn
	revoked bool
	idem    *idemCache
}

// GrantInfo is what grants lists about a grant: everything but the handle.
type GrantInfo struct {
	GrantID        string             `json:"grantId"`
	Root           string             `json:"root"`
	AdapterID      string             `json:"adapterId"`
	AdapterVersion string             `json:"adapterVersion"`
	HostInstanceID string             `json:"hostInstanceId"`
	SessionID      string             `json:"sessionId"`
	Generation     int64              `json:"generation"`
	Operations     []string           `json:"operations"`
	Limits         tooladapter.Limits `json:"limits"`
	Connected      bool               `json:"connected"`
	CreatedAt      string             `json:"createdAt"`
}

func (g *grant) info() GrantInfo {
	g.mu.Lock()
	connected := g.conn != nil
	g.mu.Unlock()
	return GrantInfo{
		GrantID: g.id, Root: g.root.Name(), AdapterID: g.identity.AdapterID, AdapterVersion: g.identity.AdapterVersion,
		HostInstanceID: g.identity.HostInstanceID, SessionID: g.identity.SessionID, Generation: g.identity.Generation,
		Operations: append([]string(nil), g.ops...), Limits: g.limits, Connected: connected,
		CreatedAt: g.created.UTC().Format(time.RFC3339),
	}
}

// descriptor is a host tool-adapter descriptor as it is printed for the operator: the one place
// the handle is spelled out.
type descriptor struct {
	ProtocolVersion string               `json:"protocolVersion"`
	AdapterID       string               `json:"adapterId"`
	AdapterVersion  string               `json:"adapterVersion"`
	Endpoint        tooladapter.Endpoint `json:"endpoint"`
	Binding         descriptorBinding    `json:"binding"`
	Operations      []string             `json:"operations"`
	Limits          tooladapter.Limits   `json:"limits"`
}

type descriptorBinding struct {
	HostInstanceID   string `json:"hostInstanceId"`
	SessionID        string `json:"sessionId"`
	Generation       int64  `json:"generation"`
	CapabilityHandle string `json:"capabilityHandle"`
}

// newHandle returns a fresh capability handle.
func newHandle() string {
	b := make([]byte, handleBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// newGrantID returns an opaque grant id, unrelated to the handle.
func newGrantID() string { return "g-" + strings.ToLower(rand.Text()) }

func limitsWithDefaults(r *LimitsRequest) tooladapter.Limits {
	l := DefaultLimits
	if r == nil {
		return l
	}
	for _, m := range []struct {
		src *int64
		dst *int64
	}{
		{r.MaxRequestBytes, &l.MaxRequestBytes}, {r.MaxResponseBytes, &l.MaxResponseBytes},
		{r.MaxConcurrentRequests, &l.MaxConcurrentRequests}, {r.MaxQueuedRequests, &l.MaxQueuedRequests},
		{r.RequestTimeoutMs, &l.RequestTimeoutMs}, {r.MaxIdempotencyKeys, &l.MaxIdempotencyKeys},
		{r.IdempotencyTtlMs, &l.IdempotencyTtlMs},
	} {
		if m.src != nil {
			*m.dst = *m.src
		}
	}
	return l
}

// mint builds the descriptor of a grant request with a fresh handle and checks it with the
// daemon's own descriptor parser, so that a grant airlock-fs accepts is one the daemon accepts.
func (s *Server) mint(r *AdminRequest) (*descriptor, tooladapter.Handle, *protocol.Error) {
	adapterID := DefaultAdapterID
	if r.AdapterID != nil {
		adapterID = *r.AdapterID
	}
	d := &descriptor{
		ProtocolVersion: tooladapter.ProtocolVersion,
		AdapterID:       adapterID,
		AdapterVersion:  s.version,
		Endpoint:        tooladapter.Endpoint{Transport: tooladapter.TransportUnix, Path: s.cfg.Socket},
		Binding: descriptorBinding{
			HostInstanceID: *r.HostInstanceID, SessionID: *r.SessionID, Generation: *r.Generation,
			CapabilityHandle: newHandle(),
		},
		// slices.Clone keeps an empty list an empty list: a nil one would be encoded null and
		// refused as "the wrong type" instead of as an empty operations list.
		Operations: slices.Clone(*r.Operations),
		Limits:     limitsWithDefaults(r.Limits),
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, tooladapter.Handle{}, protocol.Errorf(CodeInvalidRequest, "grant is not serializable")
	}
	want := tooladapter.Binding{HostInstanceID: d.Binding.HostInstanceID, SessionID: d.Binding.SessionID, Generation: d.Binding.Generation}
	if _, e := tooladapter.ParseDescriptor(raw, want); e != nil {
		return nil, tooladapter.Handle{}, e
	}
	h, e := tooladapter.NewHandle(d.Binding.CapabilityHandle)
	if e != nil {
		return nil, tooladapter.Handle{}, e
	}
	return d, h, nil
}
