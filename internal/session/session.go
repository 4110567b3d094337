// Package session keeps the host's logical sessions: which generation of each is resident, the
// generation rules of open and close, attachments and events, and the durable catalog behind
// them.
//
// A Manager keeps all in-memory state behind one mutex and never holds it across I/O: every
// durable change happens under a per-session operation lock, so two commands for one session
// are applied in order while commands for different sessions proceed independently.
package session

// This file owns the Manager: its state, New, the per-session operation locks, admission and
// readiness, drain and shutdown.

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
	"github.com/airlockhq/airlock/internal/transcript"
	"github.com/airlockhq/airlock/internal/turn"
)

// DefaultMaxSessions bounds resident sessions.
const DefaultMaxSessions = 128

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
	// RoomTools, when set, gives the turns of a session whose policy names a room the
	// capabilities published into it as tools; id and generation name the session, whose
	// calls the audit journal records.
	RoomTools func(room, id string, generation int64) turn.RoomTools
	// MaxAttachments bounds the attachments of all sessions, MaxAttachmentsPerSession those of
	// one (DefaultMaxAttachments, DefaultMaxAttachmentsPerSession when 0).
	MaxAttachments           int
	MaxAttachmentsPerSession int
	// RecoveryOpenTimeout bounds the restore of one session at startup, RecoveryTimeout the
	// whole recovery phase (DefaultRecoveryOpenTimeout, DefaultRecoveryTimeout when 0).
	RecoveryOpenTimeout time.Duration
	RecoveryTimeout     time.Duration

	// GenerationEnded, when set, is told that generation of session id, and every older
	// generation of it, will never be resident again: a close of it succeeded, or an open of
	// a newer generation did. It runs synchronously at the end of that close or open, under
	// the session's operation lock but no Manager lock; it may call the Manager's read
	// methods (Session), not Open or Close of the same session. A shutdown ends no generation.
	GenerationEnded func(id string, generation int64)

	// GateTools, when set, wraps the host tool adapter a turn of generation of session id
	// calls, so that the model's tool calls pass the daemon's gate (internal/gate) with the
	// session's rules; without it a turn calls the connection directly (tests of this package).
	// What it returns finds the generation's connection at each call (Manager.GatedTool),
	// so that a turn goes on with the connection a Regrant binds in place of the one it began
	// with.
	GateTools func(id string, generation int64, rules *policy.Policy) turn.Invoker

	// HostTools, when set, gives the turns of generation of session id the tools the daemon
	// serves itself (the adapter proposal tools when rules allow proposals); it returns nil
	// for none.
	HostTools func(id string, generation int64, rules *policy.Policy) turn.HostTools
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
	// attachments counts the subscriptions of every resident runtime; attachClock orders
	// them (see Attach).
	attachments int
	attachClock uint64

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
	subs       map[Subscriber]*attachment
	tools      *toolclient.Conn // the bound host tool adapter, if the policy grants one
	rules      *policy.Policy   // the session's policy (policy.Rules parsed); nil: none of its own
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
	if cfg.MaxAttachments <= 0 {
		cfg.MaxAttachments = DefaultMaxAttachments
	}
	if cfg.MaxAttachmentsPerSession <= 0 {
		cfg.MaxAttachmentsPerSession = DefaultMaxAttachmentsPerSession
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
