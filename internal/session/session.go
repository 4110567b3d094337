// Package session keeps the host's logical sessions: which generation of each is resident, the
// generation rules of open and close, attachments and events, and the durable catalog behind
// them.
//
// A Manager keeps all in-memory state behind one mutex and never holds it across I/O: every
// durable change happens under a per-session operation lock, so two commands for one session
// are applied in order while commands for different sessions proceed independently.
package session

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
	"github.com/airlockhq/airlock/internal/transcript"
	"github.com/airlockhq/airlock/internal/turn"
)

// DefaultMaxSessions bounds resident sessions.
const DefaultMaxSessions = 128

// Subscriber receives the events of the sessions a connection attached to.
type Subscriber interface {
	// Deliver queues one encoded event line for sending. It is called with the Manager's lock
	// held, so it must not block and must not call back into the Manager.
	Deliver(line []byte)
}

// EventEncoder turns an event into the line every subscriber gets, or nil to drop it. The
// daemon's encoder enforces the event size limit once per event, not once per subscriber.
type EventEncoder func(*protocol.Event) []byte

// Config configures a Manager.
type Config struct {
	HostInstanceID string
	Store          *store.Store
	MaxSessions    int // resident sessions; DefaultMaxSessions when 0
	Logger         *slog.Logger
	Now            func() time.Time
	EncodeEvent    EventEncoder
	// Tools holds the host tool-adapter connections; nil gives a private registry.
	Tools *toolclient.Registry

	// Providers are the model backends opens may name, by provider name.
	Providers map[string]Provider
	// SessionsDir holds the sessions' transcript directories unless an open names its own.
	SessionsDir string
	// QueueDepth bounds the queued wakes of one session (DefaultQueueDepth when 0);
	// MaxConcurrentTurns the turns running at once on the host (DefaultMaxConcurrentTurns).
	QueueDepth         int
	MaxConcurrentTurns int
	// MaxToolOutputBytes bounds what one tool call shows the model (turn's default when 0).
	MaxToolOutputBytes int
	// RecoveryOpenTimeout bounds the restore of one session at startup, RecoveryTimeout the
	// whole recovery phase (DefaultRecoveryOpenTimeout, DefaultRecoveryTimeout when 0).
	RecoveryOpenTimeout time.Duration
	RecoveryTimeout     time.Duration
}

// Manager owns the sessions of one host incarnation. Its methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	// mu guards the fields below, and every field of the runtimes in sessions.
	mu       sync.Mutex
	sessions map[string]*runtime // resident generations, by sessionId
	known    map[string]struct{} // sessionIds in the durable catalog
	opLocks  map[string]*opLock
	reserved int // capacity slots held by opens in progress
	draining bool
	recovery protocol.RecoveryHealth
	metrics  map[string]uint64

	clients map[string]turn.Completer // model backends, by provider name

	// The wake journal's index: by session and key, and by ticket; terminal entries per
	// session in the order they ended, for retention.
	journal   map[string]map[string]*jrec
	tickets   map[string]*jrec
	terminals map[string][]*jrec

	activeTurns int
	queuedTurns int
	// admitted is signalled (on mu) when a runtime's last wake in admission has its journal
	// entry written; a close waits for it (see Close).
	admitted *sync.Cond
	// turnsIdleCh, when set, is closed once no turn runs (a drain waits on it).
	turnsIdleCh chan struct{}
	// completed is set when startup recovery has run to its end; recoveryFailed when it
	// ended in an error, and the host then admits no work.
	completed      bool
	recoveryFailed bool

	slots    chan struct{} // the host's turn semaphore
	ctx      context.Context
	cancel   context.CancelCauseFunc
	stop     chan struct{} // closed by Shutdown: workers stop taking queued wakes
	stopping bool
	workers  sync.WaitGroup // session workers and journal writers
}

// runtime is one resident session generation.
type runtime struct {
	id         string
	generation int64
	version    string // the protocol version of the open that made it resident
	policy     protocol.Policy
	digest     string
	state      string
	sequence   uint64
	lastUsed   time.Time
	subs       map[Subscriber]struct{}
	tools      *toolclient.Conn // the bound host tool adapter, if the policy grants one
	revoked    bool             // tools was revoked (drain); the generation keeps no capability

	// Agent turns. spec is nil when the generation was opened without a model; conv is nil
	// for a memory session. history is touched only by the session's worker.
	spec    *turn.Spec
	conv    *transcript.File
	history []model.Message

	queue     []*job
	admitting int  // wakes between admission and their journal commit
	working   bool // a worker goroutine runs this session's queue
	// stopped is closed when that worker ends (see stopWorkerLocked), for a close to wait
	// for.
	stopped   chan struct{}
	active    *job
	cancel    context.CancelCauseFunc // of the active turn
	mailbox   *turn.Mailbox           // of the active turn
	lastError string                  // the code of the turn that failed the generation

	// controls remembers the steer/followUp keys of the generation: key → digest.
	controls     map[string]string
	controlOrder []string
	// ending is set while an open replaces, or a close ends, this generation: it admits no
	// more wakes.
	ending bool
}

// opLock serializes durable changes to one session.
type opLock struct {
	mu   sync.Mutex
	refs int
}

// New returns a Manager in recovery phase not_started. Call Recover before admitting work.
func New(cfg Config) *Manager {
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tools == nil {
		cfg.Tools = toolclient.NewRegistry()
	}
	if cfg.SessionsDir == "" && cfg.Store != nil {
		cfg.SessionsDir = filepath.Join(filepath.Dir(cfg.Store.Path()), "sessions")
	}
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.MaxConcurrentTurns <= 0 {
		cfg.MaxConcurrentTurns = DefaultMaxConcurrentTurns
	}
	if cfg.RecoveryOpenTimeout <= 0 {
		cfg.RecoveryOpenTimeout = DefaultRecoveryOpenTimeout
	}
	if cfg.RecoveryTimeout <= 0 {
		cfg.RecoveryTimeout = DefaultRecoveryTimeout
	}
	if cfg.EncodeEvent == nil {
		cfg.EncodeEvent = func(ev *protocol.Event) []byte {
			line, err := ndjson.Marshal(ev)
			if err != nil {
				return nil
			}
			return line
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	m := &Manager{
		cfg:       cfg,
		log:       cfg.Logger,
		now:       cfg.Now,
		sessions:  make(map[string]*runtime),
		known:     make(map[string]struct{}),
		opLocks:   make(map[string]*opLock),
		metrics:   make(map[string]uint64),
		clients:   make(map[string]turn.Completer),
		journal:   make(map[string]map[string]*jrec),
		tickets:   make(map[string]*jrec),
		terminals: make(map[string][]*jrec),
		slots:     make(chan struct{}, cfg.MaxConcurrentTurns),
		ctx:       ctx,
		cancel:    cancel,
		stop:      make(chan struct{}),
		recovery: protocol.RecoveryHealth{
			Phase:               protocol.PhaseNotStarted,
			FailureCodes:        map[string]int{},
			QuarantinedSessions: []protocol.QuarantinedSession{},
		},
	}
	m.admitted = sync.NewCond(&m.mu)
	return m
}

// lockSession takes the operation lock of one session and returns its release.
func (m *Manager) lockSession(id string) func() {
	m.mu.Lock()
	l := m.opLocks[id]
	if l == nil {
		l = &opLock{}
		m.opLocks[id] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.opLocks, id)
		}
		m.mu.Unlock()
	}
}

// admitting reports why the host refuses new residency, or nil. m.mu must be held.
func (m *Manager) admitting() *protocol.Error {
	if m.draining {
		return protocol.Retryable(protocol.CodeHostDraining, "host is draining")
	}
	if m.recovery.Phase == protocol.PhaseNotStarted || m.recovery.Phase == protocol.PhaseRecovering {
		return protocol.Retryable(protocol.CodeHostNotReady, "host is recovering").With("phase", m.recovery.Phase)
	}
	if m.recoveryFailed {
		// The journal was not indexed: a retried wake could not be told from a new one.
		return protocol.Retryable(protocol.CodeHostNotReady, "startup recovery failed; fix the state directory and restart airlockd (see the log)").
			With("phase", m.recovery.Phase)
	}
	return nil
}

// Admitting reports why the host refuses new work (host_not_ready while recovering,
// host_draining while draining), or nil.
func (m *Manager) Admitting() *protocol.Error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.admitting()
}

// OpenRequest is an admitted open.
type OpenRequest struct {
	SessionID  string
	Generation int64
	Version    protocol.Version
	Policy     *protocol.Policy
	// Tools is the validated host tool-adapter descriptor when the policy grants one; its
	// summary is already in Policy.ToolAdapter.
	Tools *tooladapter.Descriptor
}

// Open applies the generation rules: a lower generation than the session's is stale; the same
// generation with the same policy is reused (created:false while resident); the same generation
// with another policy conflicts; a higher generation replaces the resident one.
//
// A policy that grants a host tool adapter is connected and bound before anything is
// persisted, so a refused binding leaves no trace; the connection is revoked whenever the
// generation stops being resident.
//
// A session quarantined by a restart reopens only as the same generation with the retained
// policy: a tool-adapter session needs a descriptor bound to this host incarnation
// (tool_adapter_reprovision_required without one, session_policy_conflict for another policy),
// a session whose provider key was missing needs it present. Success clears the quarantine.
func (m *Manager) Open(ctx context.Context, req OpenRequest) (*protocol.OpenResult, error) {
	release := m.lockSession(req.SessionID)
	defer release()
	var ending *runtime // the generation this open replaces, while it admits no wake
	defer func() {
		if ending != nil {
			m.mu.Lock()
			ending.ending = false
			m.mu.Unlock()
		}
	}()

	digest := req.Policy.Digest()
	rec, err := m.cfg.Store.Record(req.SessionID)
	if err != nil {
		return nil, err
	}

	m.mu.Lock()
	rt := m.sessions[req.SessionID]
	current, known := int64(0), false
	switch {
	case rt != nil:
		current, known = rt.generation, true
	case rec != nil:
		current, known = rec.Generation, true
	}
	if known && req.Generation < current {
		m.mu.Unlock()
		return nil, staleGeneration(current, req.Generation)
	}
	sameDormant := rt == nil && rec != nil && req.Generation == current
	if sameDormant && rec.Recovery != nil && rec.Recovery.Code == protocol.CodeReprovisionRequired && req.Tools == nil {
		m.mu.Unlock()
		return nil, protocol.Retryable(protocol.CodeReprovisionRequired,
			"generation %d held a host tool adapter before the restart; reopen it with a descriptor bound to this host", current).
			With("generation", current)
	}
	if known && req.Generation == current {
		policyDigest := digest
		if rt != nil {
			policyDigest = rt.digest
		} else {
			policyDigest = rec.PolicyDigest
		}
		if policyDigest != digest {
			m.mu.Unlock()
			return nil, protocol.Errorf(protocol.CodeSessionPolicyConflict,
				"generation %d of this session was opened with a different policy", current)
		}
		if rt != nil && (rt.tools == nil || (rt.tools.Err() == nil && !rt.revoked)) {
			rt.lastUsed = m.now()
			m.metrics["openReused"]++
			res := &protocol.OpenResult{Created: false, Session: m.snapshotLocked(rt)}
			m.mu.Unlock()
			return res, nil
		}
		if rt != nil {
			// The same generation whose adapter connection failed or was revoked: bind it
			// again, unless the host is draining, which is what revoked it.
			if e := m.admitting(); e != nil {
				m.mu.Unlock()
				return nil, e
			}
			m.mu.Unlock()
			return m.rebind(ctx, rt, req)
		}
	}
	if e := m.admitting(); e != nil {
		m.mu.Unlock()
		return nil, e
	}
	if rt == nil {
		if len(m.sessions)+m.reserved >= m.cfg.MaxSessions {
			m.mu.Unlock()
			return nil, protocol.Retryable(protocol.CodeSessionCapacity, "the host holds its maximum of %d resident sessions", m.cfg.MaxSessions).
				With("maxSessions", m.cfg.MaxSessions)
		}
		m.reserved++
		defer func() {
			m.mu.Lock()
			m.reserved--
			m.mu.Unlock()
		}()
	} else if busyLocked(rt) {
		m.mu.Unlock()
		return nil, protocol.Retryable(protocol.CodeSessionBusy, "generation %d has a turn running or queued", rt.generation)
	} else {
		// From here on the generation being replaced admits no wake; a failed open lets it
		// go on.
		rt.ending = true
		ending = rt
	}
	m.mu.Unlock()

	if e := checkCwd(req.Policy.Cwd); e != nil {
		return nil, e
	}
	completer, e := m.modelFor(req.Policy.Model)
	if e != nil {
		return nil, e
	}
	var ref *protocol.ConversationRef
	if sameDormant {
		ref = rec.Conversation // the generation's own transcript, exactly
	}
	conv, hist, err := m.conversation(ctx, req.SessionID, req.Policy, ref)
	if err != nil {
		return nil, openError(err)
	}
	var conn *toolclient.Conn
	if req.Tools != nil {
		c, e := m.bind(ctx, req)
		if e != nil {
			closeConv(conv)
			return nil, e
		}
		conn = c
	}

	now := m.now().UTC()
	next := &protocol.CatalogRecord{
		SessionID:       req.SessionID,
		Name:            req.Policy.Name,
		Generation:      req.Generation,
		Residency:       protocol.Resident,
		State:           protocol.StateIdle,
		ProtocolVersion: req.Version.Raw,
		PolicyDigest:    digest,
		Policy:          *req.Policy,
		CreatedAt:       now,
		UpdatedAt:       now,
		LastUsedAt:      now,
		Conversation:    refOf(conv),
	}
	if rec != nil {
		next.CreatedAt = rec.CreatedAt
		next.Revision = rec.Revision
		next.LastTerminal = rec.LastTerminal
	}
	var manifest *store.Manifest
	if req.Policy.Mode != protocol.ModeMemory {
		manifest = &store.Manifest{
			ProtocolVersion: req.Version.Raw,
			SessionID:       req.SessionID,
			Generation:      req.Generation,
			Policy:          *req.Policy,
			Conversation:    next.Conversation,
			CreatedAt:       now,
			UpdatedAt:       now,
		}
	}
	if err := m.cfg.Store.SaveSession(next, manifest); err != nil {
		if conn != nil {
			m.cfg.Tools.Revoke(req.Tools.Incarnation())
		}
		closeConv(conv)
		return nil, err
	}

	m.mu.Lock()
	old := m.sessions[req.SessionID]
	if old != nil {
		m.failQueueLocked(old, protocol.Retryable(protocol.CodeAborted, "the session generation was replaced"))
		m.retireLocked(old, protocol.SessionClosedData{RetainSession: true, Reason: ReasonReplaced})
	}
	ending = nil
	defer m.revoke(old)
	defer m.mu.Unlock()
	rt = m.residentRuntime(req.SessionID, req.Generation, req.Version.Raw, req.Policy, digest)
	rt.tools, rt.conv, rt.history = conn, conv, hist
	rt.spec = m.turnSpec(req.Policy, completer, conn)
	if old != nil {
		// The sequence is per session, not per generation: a client that follows a session
		// across a replacement never sees it go back.
		rt.sequence = old.sequence
	}
	m.sessions[req.SessionID] = rt
	m.known[req.SessionID] = struct{}{}
	m.clearQuarantineLocked(req.SessionID)
	m.metrics["openCreated"]++
	m.log.Info("session opened", "sessionId", req.SessionID, "generation", req.Generation)
	return &protocol.OpenResult{Created: true, Session: m.snapshotLocked(rt)}, nil
}

// residentRuntime builds the runtime of a generation becoming resident.
func (m *Manager) residentRuntime(id string, generation int64, version string, policy *protocol.Policy, digest string) *runtime {
	return &runtime{
		id:         id,
		generation: generation,
		version:    version,
		policy:     *policy,
		digest:     digest,
		state:      protocol.StateIdle,
		lastUsed:   m.now(),
		subs:       make(map[Subscriber]struct{}),
	}
}

// turnSpec fixes what every turn of a generation runs with; nil without a model.
func (m *Manager) turnSpec(policy *protocol.Policy, c turn.Completer, conn *toolclient.Conn) *turn.Spec {
	if c == nil || policy.Model == nil {
		return nil
	}
	spec := &turn.Spec{
		Model:              c,
		ModelID:            policy.Model.ID,
		Reasoning:          reasoningEffort(policy.Model.ThinkingLevel),
		SystemPrompt:       policy.SystemPrompt,
		MaxToolOutputBytes: m.cfg.MaxToolOutputBytes,
	}
	if conn != nil {
		sum := conn.Summary()
		spec.Tools, spec.Operations, spec.Limits = conn, sum.Operations, sum.Limits
	}
	return spec
}

// busyLocked reports whether a runtime has a turn running or wakes queued. m.mu must be held.
func busyLocked(rt *runtime) bool {
	return rt.active != nil || len(rt.queue) > 0 || rt.admitting > 0
}

// openError keeps a coded transcript error and classes anything else as open_failed.
func openError(err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	return protocol.Errorf(protocol.CodeOpenFailed, "the session's transcript could not be opened")
}

func closeConv(f *transcript.File) {
	if f != nil {
		f.Close()
	}
}

// Reasons a sessionClosed event gives.
const (
	ReasonClosed   = "closed"
	ReasonReplaced = "replaced"
	ReasonDrained  = "shutdown"
)

// retireLocked ends a resident runtime: its subscribers get a last sessionClosed event and are
// dropped, so that older attachments become inert. m.mu must be held.
func (m *Manager) retireLocked(rt *runtime, data protocol.SessionClosedData) {
	rt.state = protocol.StateClosing
	data.Session = m.snapshotLocked(rt)
	data.Session.Sequence++ // the snapshot describes the session as of this, its last event
	m.emitLocked(rt, protocol.EventSessionClosed, "", data)
	rt.subs = nil
	delete(m.sessions, rt.id)
	if !rt.working && rt.active == nil {
		closeConv(rt.conv) // else the worker closes it when it stops
	}
}

// checkCwd refuses a cwd that is not an existing directory.
func checkCwd(cwd string) *protocol.Error {
	fi, err := os.Stat(cwd)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return protocol.Errorf(protocol.CodeOpenFailed, "cwd does not exist").With("field", "payload.cwd")
	case err != nil:
		return protocol.Errorf(protocol.CodeOpenFailed, "cwd cannot be read").With("field", "payload.cwd")
	case !fi.IsDir():
		return protocol.Errorf(protocol.CodeOpenFailed, "cwd is not a directory").With("field", "payload.cwd")
	}
	return nil
}

func staleGeneration(current, received int64) *protocol.Error {
	return protocol.Errorf(protocol.CodeStaleGeneration, "generation %d is older than the current generation %d", received, current).
		With("currentGeneration", current).With("receivedGeneration", received)
}

// Close ends the resident generation of a session. With retain it keeps the catalog record,
// dormant; without it deletes the session's durable records, resident or not.
func (m *Manager) Close(id string, generation int64, retain bool) (*protocol.CloseResult, error) {
	release := m.lockSession(id)
	defer release()

	rec, err := m.cfg.Store.Record(id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if !m.completed {
		// Recovery is still deciding what each session becomes.
		m.mu.Unlock()
		return nil, protocol.Retryable(protocol.CodeHostNotReady, "host is recovering").With("phase", m.recovery.Phase)
	}
	rt := m.sessions[id]
	if rt == nil && rec == nil {
		m.mu.Unlock()
		return nil, notFound(id)
	}
	current := int64(0)
	if rt != nil {
		current = rt.generation
	} else {
		current = rec.Generation
	}
	m.mu.Unlock()
	if generation < current {
		return nil, staleGeneration(current, generation)
	}
	if generation > current {
		return nil, notFound(id).With("currentGeneration", current).With("receivedGeneration", generation)
	}
	// No wake is admitted while the records change; a failed close lets the generation go on.
	setEnding := func(v bool) {
		if rt != nil {
			m.mu.Lock()
			rt.ending = v
			m.mu.Unlock()
		}
	}
	setEnding(true)
	if rt != nil {
		// Wakes admitted before ending was set may still be writing their journal entries:
		// the close changes the records only after they are written, so that a delete cannot
		// leave one behind for a session that no longer exists.
		m.mu.Lock()
		for rt.admitting > 0 {
			m.admitted.Wait()
		}
		m.mu.Unlock()
	}

	res := &protocol.CloseResult{Closed: rt != nil}
	if retain {
		if rec != nil && rec.Residency != protocol.Dormant {
			rec.Residency, rec.State = protocol.Dormant, protocol.StateIdle
			rec.UpdatedAt = m.now().UTC()
			if err := m.cfg.Store.SaveSession(rec, nil); err != nil {
				setEnding(false)
				return nil, err
			}
		}
	} else {
		existed, err := m.cfg.Store.DeleteSession(id)
		if err != nil {
			setEnding(false)
			return nil, err
		}
		res.Deleted = existed
	}

	m.mu.Lock()
	if !retain {
		delete(m.known, id)
		m.clearQuarantineLocked(id)
		// The journal went with the session: what is still queued or running ends without
		// a journal record.
		for _, j := range rt.jobsLocked() {
			j.rec.seq = 0
		}
		m.forgetSessionLocked(id)
	}
	var stopped chan struct{}
	if rt != nil && m.sessions[id] == rt {
		m.failQueueLocked(rt, protocol.Retryable(protocol.CodeAborted, "the session was closed"))
		m.retireLocked(rt, protocol.SessionClosedData{RetainSession: retain, Reason: ReasonClosed})
		m.metrics["closed"]++
		if rt.working {
			stopped = rt.stopped
		}
	}
	m.mu.Unlock()
	m.revoke(rt)
	if stopped != nil {
		// The aborted turn records its outcome and closes the transcript; an open of the same
		// generation, which waits for this close, must not meet its last append. Aborting
		// cancels the model call and the tool calls, so the wait is short; it is bounded all
		// the same.
		t := time.NewTimer(closeWait)
		select {
		case <-stopped:
		case <-t.C:
			m.log.Warn("closed session's aborted turn has not stopped", "sessionId", id, "waited", closeWait)
		}
		t.Stop()
	}
	m.log.Info("session closed", "sessionId", id, "generation", generation, "retain", retain)
	return res, nil
}

// closeWait bounds how long a close waits for the turn it aborted to stop.
const closeWait = 10 * time.Second

func notFound(id string) *protocol.Error {
	return protocol.Errorf(protocol.CodeSessionNotFound, "no such session").With("sessionId", id)
}

// resident returns the runtime of exactly this generation, or the error that says why there is
// none. m.mu must be held.
func (m *Manager) residentLocked(id string, generation int64, checkGen bool) (*runtime, *protocol.Error) {
	rt := m.sessions[id]
	if rt == nil {
		e := protocol.Errorf(protocol.CodeSessionNotFound, "session is not resident").With("sessionId", id)
		if _, ok := m.known[id]; ok {
			e.With("residency", protocol.Dormant)
		}
		return nil, e
	}
	if checkGen && generation < rt.generation {
		return nil, staleGeneration(rt.generation, generation)
	}
	if checkGen && generation > rt.generation {
		return nil, notFound(id).With("currentGeneration", rt.generation).With("receivedGeneration", generation)
	}
	return rt, nil
}

// Attach subscribes sub to the events of exactly this session generation.
func (m *Manager) Attach(id string, generation int64, sub Subscriber) (*protocol.AttachResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return nil, e
	}
	rt.subs[sub] = struct{}{}
	return &protocol.AttachResult{Attached: true, Generation: rt.generation, Sequence: rt.sequence}, nil
}

// Detach ends sub's subscription to this session generation.
func (m *Manager) Detach(id string, generation int64, sub Subscriber) (*protocol.DetachResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return nil, e
	}
	_, was := rt.subs[sub]
	delete(rt.subs, sub)
	return &protocol.DetachResult{Detached: was, Generation: rt.generation, Sequence: rt.sequence}, nil
}

// DetachAll drops every subscription of sub, when its connection ends.
func (m *Manager) DetachAll(sub Subscriber) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rt := range m.sessions {
		delete(rt.subs, sub)
	}
}

// emitLocked assigns the next sequence of rt to an event and delivers it to rt's subscribers.
// m.mu must be held, which orders every session's events.
func (m *Manager) emitLocked(rt *runtime, name, requestID string, data any) {
	rt.sequence++
	if len(rt.subs) == 0 {
		return
	}
	ev := &protocol.Event{
		ProtocolVersion: rt.version,
		Kind:            protocol.KindEvent,
		Event:           name,
		HostInstanceID:  m.cfg.HostInstanceID,
		SessionID:       rt.id,
		Generation:      rt.generation,
		Sequence:        rt.sequence,
		RequestID:       requestID,
		Data:            data,
	}
	line := m.cfg.EncodeEvent(ev)
	if line == nil {
		m.metrics["eventsDropped"]++
		return
	}
	for sub := range rt.subs {
		sub.Deliver(line)
	}
}

func (m *Manager) snapshotLocked(rt *runtime) protocol.SessionSnapshot {
	now := m.now()
	s := protocol.SessionSnapshot{
		SessionID:       rt.id,
		Generation:      rt.generation,
		ProtocolVersion: rt.version,
		Name:            rt.policy.Name,
		State:           rt.state,
		Residency:       protocol.Resident,
		Sequence:        rt.sequence,
		Attached:        len(rt.subs),
		LastUsedAt:      rt.lastUsed.UTC(),
		IdleForMs:       max(0, now.Sub(rt.lastUsed).Milliseconds()),
	}
	if rt.policy.Model != nil {
		s.Model = &protocol.ModelRef{Provider: rt.policy.Model.Provider, ID: rt.policy.Model.ID}
	}
	s.QueuedTurns = len(rt.queue)
	if rt.active != nil {
		s.ActiveRequestID = rt.active.rec.requestID
	}
	s.LastErrorCode = rt.lastError
	if rt.tools != nil {
		s.HostToolAdapterQueue = rt.tools.Telemetry()
	}
	return s
}

// Session returns the snapshot of a resident session. A generation, when given, must be the
// resident one.
func (m *Manager) Session(id string, generation int64, checkGen bool) (*protocol.SessionSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, checkGen)
	if e != nil {
		return nil, e
	}
	s := m.snapshotLocked(rt)
	return &s, nil
}

// Sequence returns the current sequence of a resident session, for response envelopes.
func (m *Manager) Sequence(id string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rt := m.sessions[id]; rt != nil {
		return rt.sequence, true
	}
	return 0, false
}

// HostView is the session part of host status.
type HostView struct {
	Ready       bool
	Draining    bool
	Recovery    protocol.RecoveryHealth
	Sessions    []protocol.SessionSnapshot
	Dormant     int
	ActiveTurns int
	QueuedTurns int
	Metrics     map[string]uint64
}

// Host returns the session part of host status. Sessions are in sessionId order.
func (m *Manager) Host() HostView {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := HostView{
		Draining: m.draining,
		Recovery: m.recoveryLocked(),
		Sessions: make([]protocol.SessionSnapshot, 0, len(m.sessions)),
		Dormant:  len(m.known) - len(m.sessions),
		Metrics:  make(map[string]uint64, len(m.metrics)),

		ActiveTurns: m.activeTurns,
		QueuedTurns: m.queuedTurns,
	}
	v.Ready = !m.draining && v.Recovery.Phase == protocol.PhaseReady
	for _, rt := range m.sessions {
		v.Sessions = append(v.Sessions, m.snapshotLocked(rt))
	}
	sort.Slice(v.Sessions, func(i, j int) bool { return v.Sessions[i].SessionID < v.Sessions[j].SessionID })
	for k, n := range m.metrics {
		v.Metrics[k] = n
	}
	return v
}

// Phase returns the recovery phase, without building a status snapshot.
func (m *Manager) Phase() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recovery.Phase
}

// Ready reports whether the host admits new work.
func (m *Manager) Ready() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.draining && m.recovery.Phase == protocol.PhaseReady
}

func (m *Manager) recoveryLocked() protocol.RecoveryHealth {
	r := m.recovery
	r.FailureCodes = make(map[string]int, len(m.recovery.FailureCodes))
	for k, n := range m.recovery.FailureCodes {
		r.FailureCodes[k] = n
	}
	r.QuarantinedSessions = append([]protocol.QuarantinedSession{}, m.recovery.QuarantinedSessions...)
	return r
}

// Drain stops admitting new work, tells every attached client, and revokes the host tool
// adapters' queues to new work. It waits up to timeout for the running turns to end, then
// aborts those still running; queued wakes stay journaled for the next start.
func (m *Manager) Drain(timeout time.Duration) *protocol.DrainResult {
	m.mu.Lock()
	if !m.draining {
		m.draining = true
		for _, rt := range m.sessions {
			m.emitLocked(rt, protocol.EventHostDraining, "", nil)
		}
		m.log.Info("host draining")
	}
	var wait chan struct{}
	if m.activeTurns > 0 {
		if m.turnsIdleCh == nil {
			m.turnsIdleCh = make(chan struct{})
		}
		wait = m.turnsIdleCh
	}
	m.mu.Unlock()

	res := &protocol.DrainResult{Draining: true, TimeoutMs: timeout.Milliseconds()}
	if wait != nil {
		t := time.NewTimer(timeout)
		select {
		case <-wait:
		case <-t.C:
			res.TimedOut = true
		}
		t.Stop()
	}
	m.mu.Lock()
	var revoke []*runtime
	for _, rt := range m.sessions {
		if rt.cancel != nil {
			rt.cancel(errors.New("the host is draining"))
			res.AbortedTurns++
		}
		revoke = append(revoke, rt)
	}
	m.mu.Unlock()
	// A draining host starts no new tool work; a turn still running sees its calls refused.
	for _, rt := range revoke {
		m.revoke(rt)
	}
	return res
}

// Shutdown retires every resident session: running turns are aborted, subscribers get
// sessionClosed, tool adapters are revoked, and the catalog keeps the records. Queued wakes stay
// queued in the journal, and the next start replays them; their waiting clients are told so.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	m.draining = true
	if !m.stopping {
		m.stopping = true
		close(m.stop)
	}
	m.cancel(errors.New("the host is shutting down"))
	var retired []*runtime
	for _, rt := range m.sessions {
		for _, j := range rt.queue {
			m.settleLocked(j, nil, stoppedBeforeRun(j.rec))
		}
		m.retireLocked(rt, protocol.SessionClosedData{RetainSession: true, Reason: ReasonDrained})
		retired = append(retired, rt)
	}
	m.mu.Unlock()
	m.workers.Wait()
	for _, rt := range retired {
		m.revoke(rt)
	}
	m.cfg.Tools.Close()
	m.mu.Lock()
	for _, c := range m.clients {
		if idle, ok := c.(interface{ CloseIdleConnections() }); ok {
			idle.CloseIdleConnections()
		}
	}
	m.mu.Unlock()
}

// bind connects and binds the host tool adapter an open grants, beneath the canonical cwd.
func (m *Manager) bind(ctx context.Context, req OpenRequest) (*toolclient.Conn, *protocol.Error) {
	root, e := tooladapter.CanonicalRoot(req.Policy.Cwd)
	if e != nil {
		return nil, e
	}
	return m.cfg.Tools.Open(ctx, req.Tools, toolclient.Options{Root: root, Logger: m.log})
}

// rebind replaces the failed adapter connection of a resident generation, for an open of the
// same generation and policy. Nothing durable changes; the answer is created:false.
func (m *Manager) rebind(ctx context.Context, rt *runtime, req OpenRequest) (*protocol.OpenResult, error) {
	if req.Tools == nil {
		return nil, protocol.Errorf(protocol.CodeSessionPolicyConflict, "the generation was opened with a tool adapter")
	}
	m.cfg.Tools.Revoke(req.Tools.Incarnation())
	conn, e := m.bind(ctx, req)
	if e != nil {
		return nil, e
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions[rt.id] != rt {
		// Closed or replaced meanwhile.
		m.cfg.Tools.Revoke(req.Tools.Incarnation())
		return nil, notFound(rt.id)
	}
	rt.tools, rt.revoked = conn, false
	if rt.spec != nil {
		spec := *rt.spec
		spec.Tools = conn
		rt.spec = &spec
	}
	rt.lastUsed = m.now()
	return &protocol.OpenResult{Created: false, Session: m.snapshotLocked(rt)}, nil
}

// revoke ends a runtime's adapter connection, if any: pending work fails, a best-effort revoke
// frame is sent and the socket closed. It may wait briefly, so m.mu must not be held.
func (m *Manager) revoke(rt *runtime) {
	if rt == nil {
		return
	}
	m.mu.Lock()
	conn := rt.tools
	if conn != nil {
		rt.revoked = true
	}
	m.mu.Unlock()
	if conn != nil {
		m.cfg.Tools.Revoke(conn.Incarnation())
	}
}

// Tool returns the adapter connection of exactly this resident generation.
func (m *Manager) Tool(id string, generation int64) (*toolclient.Conn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return nil, e
	}
	if rt.tools == nil {
		return nil, protocol.Errorf(tooladapter.CodeOperationDenied, "this session generation has no host tool adapter").
			With("indeterminate", false)
	}
	rt.lastUsed = m.now()
	return rt.tools, nil
}

// Describe returns the durable record of a session and its snapshot when resident.
func (m *Manager) Describe(id string) (*protocol.SessionDescription, error) {
	rec, err := m.cfg.Store.Record(id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, notFound(id)
	}
	d := &protocol.SessionDescription{Record: *rec}
	m.mu.Lock()
	if rt := m.sessions[id]; rt != nil && rt.generation == rec.Generation {
		s := m.snapshotLocked(rt)
		d.Snapshot = &s
	}
	m.mu.Unlock()
	return d, nil
}

// List returns a page of the durable catalog.
func (m *Manager) List(cursor string, limit int) (*protocol.SessionPage, error) {
	recs, next, err := m.cfg.Store.Page(cursor, limit)
	if err != nil {
		return nil, err
	}
	if recs == nil {
		recs = []protocol.CatalogRecord{}
	}
	return &protocol.SessionPage{Sessions: recs, NextCursor: next}, nil
}
