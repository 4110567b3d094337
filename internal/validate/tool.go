package validate

// The tool-adapter harness behind `airlock validate tool-adapter`: a conformance run of the
// host tool-adapter protocol 1.0 against an adapter server already listening on its socket,
// with a grant whose root is a scratch directory the harness may populate.
//
// The harness is a test client, not the daemon: it writes and reads the frames itself
// (toolConn) so that it sees every raw line the adapter writes — for the identity, bounds and
// reflection checks — and so that it can send what the daemon's own checks never let through
// (the traversal corpus, aborts at will). Every adapter frame is checked with
// tooladapter.DecodeFrame, the daemon's decoder.
//
// This file owns the run: the probe names, the configuration, the harness's state and the order
// of its probes, and the fixtures it creates beneath the scratch directory and removes.
// toolconn.go owns the frame-level client and the checks every adapter line passes,
// toolprobes.go the probes, and toolreport.go how outcomes and requests read in the report.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// Probe names of the tool-adapter harness, in report order. The happy-path probes are named
// after their operation (fs.list, …, fs.edit).
const (
	ProbeToolDescriptor  = "descriptor"
	ProbeToolBind        = "bind"
	ProbeToolBindRefused = "bind_refused"
	ProbeToolTraversal   = "traversal"
	ProbeToolBounds      = "bounds"
	ProbeToolIdempotency = "idempotency"
	ProbeToolAbort       = "abort"
	ProbeToolRevoke      = "revoke"
	ProbeToolIdentity    = "identity"
	ProbeToolFrames      = "frames"
	ProbeToolNoHandle    = "handle_not_reflected"
)

// ToolConfig is one run of the tool-adapter harness.
type ToolConfig struct {
	// Socket is the adapter's socket; empty means the descriptor's endpoint.path.
	Socket string
	// Descriptor is the grant's descriptor JSON, capability handle included.
	Descriptor []byte
	// Scratch is the directory the grant's root is: the harness creates its fixtures in a
	// fresh subdirectory of it and removes them at the end.
	Scratch string
	// Wait bounds each wait for a frame; zero means requestTimeoutMs plus two seconds.
	Wait time.Duration
}

// toolHarness is the state of one tool-adapter run.
type toolHarness struct {
	ctx    context.Context
	cfg    ToolConfig
	rep    *Report
	desc   *tooladapter.Descriptor
	handle []byte
	ident  tooladapter.Identity
	wait   time.Duration

	conn *toolConn
	run  string // this run's random id, in every requestId and idempotencyKey it sends
	seq  int

	base    string // the fixture directory, relative to the root
	baseAbs string
	outside string // a directory outside the root
	marker  string // the outside secret's content and name part
	needle  string

	identityProblems []string
	frameProblems    []string
	reflected        int
	sent             map[string]bool // requestIds of invokes and aborts written
	answered         map[string]bool // requestIds that got their result or aborted frame
}

// RunToolAdapter runs every tool-adapter probe against the adapter cfg names. It closes every
// connection it opened and removes its fixtures before it returns.
func RunToolAdapter(ctx context.Context, cfg ToolConfig) Report {
	var rep Report
	h := &toolHarness{ctx: ctx, cfg: cfg, rep: &rep, sent: map[string]bool{}, answered: map[string]bool{}}
	if err := h.setup(); err != nil {
		rep.add(Probe{Name: ProbeToolDescriptor, Detail: err.Error()})
		return rep
	}
	defer h.teardown()
	h.pass(ProbeToolDescriptor, "")
	if !h.probeBind() {
		for _, name := range h.laterProbes() {
			h.fail(name, "not run: no bound connection")
		}
		return rep
	}
	h.probeBindRefused()
	for _, op := range tooladapter.Operations {
		h.probeOperation(op)
	}
	h.probeTraversal()
	h.probeBounds()
	h.probeSearchResults()
	h.probeIdempotency()
	h.probeAbort()
	h.probeRevoke()
	h.result(ProbeToolIdentity, h.identityProblems, "")
	h.result(ProbeToolFrames, h.frameProblems, "")
	if h.reflected > 0 {
		h.fail(ProbeToolNoHandle, fmt.Sprintf("%d adapter frames contain the capability handle", h.reflected))
	} else {
		h.pass(ProbeToolNoHandle, "")
	}
	return rep
}

func (h *toolHarness) laterProbes() []string {
	names := append([]string{ProbeToolBindRefused}, tooladapter.Operations...)
	return append(names, ProbeToolTraversal, ProbeToolBounds, ProbeToolSearchResults, ProbeToolIdempotency, ProbeToolAbort,
		ProbeToolRevoke, ProbeToolIdentity, ProbeToolFrames, ProbeToolNoHandle)
}

// setup parses the descriptor and creates the fixtures.
func (h *toolHarness) setup() error {
	var raw struct {
		Binding struct {
			HostInstanceID   string `json:"hostInstanceId"`
			SessionID        string `json:"sessionId"`
			Generation       int64  `json:"generation"`
			CapabilityHandle string `json:"capabilityHandle"`
		} `json:"binding"`
	}
	if err := json.Unmarshal(h.cfg.Descriptor, &raw); err != nil {
		return errors.New("the descriptor is not a JSON object")
	}
	b := raw.Binding
	d, e := tooladapter.ParseDescriptor(h.cfg.Descriptor, tooladapter.Binding{HostInstanceID: b.HostInstanceID, SessionID: b.SessionID, Generation: b.Generation})
	if e != nil {
		return fmt.Errorf("the descriptor is invalid: %s", e.Code)
	}
	h.desc, h.handle = d, []byte(b.CapabilityHandle)
	h.ident = tooladapter.Identity{AdapterID: d.AdapterID, AdapterVersion: d.AdapterVersion,
		HostInstanceID: b.HostInstanceID, SessionID: b.SessionID, Generation: b.Generation}
	if h.cfg.Socket == "" {
		h.cfg.Socket = d.Endpoint.Path
	}
	h.wait = h.cfg.Wait
	if h.wait <= 0 {
		h.wait = time.Duration(d.Limits.RequestTimeoutMs)*time.Millisecond + 2*time.Second
	}
	if h.cfg.Scratch == "" {
		return errors.New("no scratch directory")
	}
	if st, err := os.Stat(h.cfg.Scratch); err != nil || !st.IsDir() {
		return errors.New("the scratch directory is not a directory")
	}
	// A fresh tag per run: the fixtures, and every requestId and idempotencyKey, differ from
	// those of an earlier run against the same adapter process, which may remember keys per
	// grant for idempotencyTtlMs and must then answer a reused key with its first outcome.
	tag := randHex(6)
	h.run = tag
	h.marker = "airlock-outside-" + tag
	h.needle = "airlock-needle-" + tag
	h.base = "airlock-conformance-" + tag
	h.baseAbs = filepath.Join(h.cfg.Scratch, h.base)
	out, err := os.MkdirTemp("", "airlock-outside-")
	if err != nil {
		return err
	}
	h.outside = out
	return h.fixtures()
}

func (h *toolHarness) fixtures() error {
	b := h.baseAbs
	var errs []error
	mk := func(err error) { errs = append(errs, err) }
	mk(os.Mkdir(b, 0o700))
	mk(os.WriteFile(filepath.Join(h.outside, "secret-"+h.marker+".txt"), []byte(h.marker+"\n"), 0o600))
	mk(os.WriteFile(filepath.Join(b, "hello.txt"), []byte(helloText(h.needle)), 0o600))
	mk(os.Mkdir(filepath.Join(b, "dir"), 0o700))
	mk(os.WriteFile(filepath.Join(b, "dir", "inner.txt"), []byte("inner\n"), 0o600))
	mk(os.Mkdir(filepath.Join(b, "many"), 0o700))
	for i := range 5 {
		mk(os.WriteFile(filepath.Join(b, "many", fmt.Sprintf("e%d.txt", i)), []byte("e\n"), 0o600))
	}
	mk(os.WriteFile(filepath.Join(b, "window.txt"), []byte(windowText()), 0o600))
	big := min(int(h.desc.Limits.MaxResponseBytes)+4096, tooladapter.MaxContentBytes)
	mk(os.WriteFile(filepath.Join(b, "big.txt"), bytes.Repeat([]byte("a"), big), 0o600))
	mk(os.WriteFile(filepath.Join(b, "edit.txt"), []byte("alpha beta\n"), 0o600))
	mk(os.Symlink(h.outside, filepath.Join(b, "link-out")))
	mk(os.Symlink(filepath.Join(h.outside, "secret-"+h.marker+".txt"), filepath.Join(b, "link-file")))
	mk(os.Symlink("dir", filepath.Join(b, "link-in")))
	mk(os.Symlink("../..", filepath.Join(b, "link-up")))
	if h.desc.Grants(tooladapter.OpSearch) {
		mk(h.searchFixtures())
	}
	return errors.Join(errs...)
}

func (h *toolHarness) teardown() {
	if h.conn != nil {
		h.conn.close()
		h.conn = nil
	}
	if h.baseAbs != "" {
		os.RemoveAll(h.baseAbs)
	}
	if h.outside != "" {
		os.RemoveAll(h.outside)
	}
}

func helloText(needle string) string { return "hello conformance\nfind the " + needle + " here\n" }

func windowText() string {
	var sb strings.Builder
	for i := range 100 {
		sb.WriteByte(byte('A' + i%26))
	}
	return sb.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (h *toolHarness) rel(name string) string { return h.base + "/" + name }
