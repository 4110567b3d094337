package session

// This file owns agent turns once admitted: a session's queue and its worker, running one
// turn, its events and records, and Control and Abort of queued and running wakes.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"time"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/transcript"
	"github.com/airlockhq/airlock/internal/turn"
)

// Defaults of the turn limits.
const (
	DefaultQueueDepth         = 32
	DefaultMaxConcurrentTurns = 4
	// maxControlKeys bounds the steer/followUp idempotency keys a generation remembers.
	maxControlKeys = 256
	// terminalRetention bounds the age of the terminal journal entries kept per session.
	terminalRetention = 7 * 24 * time.Hour
)

// job is one admitted wake, from admission to its terminal outcome.
type job struct {
	rec     *jrec
	prompt  string
	replay  bool          // recovered from the journal at startup
	done    chan struct{} // closed when result or err is set
	result  json.RawMessage
	err     *protocol.Error
	settled bool
}

// startWorkerLocked starts the session's worker if it has queued work and none runs. m.mu must
// be held.
func (m *Manager) startWorkerLocked(rt *runtime) {
	if rt.working || len(rt.queue) == 0 || m.stopping {
		return
	}
	rt.working = true
	rt.stopped = make(chan struct{})
	m.workers.Add(1)
	go m.work(rt)
}

// work runs a session's queued wakes one at a time, each under one of the host's turn slots.
// The slot is taken before a wake leaves the queue, so a wake is always either queued or the
// runtime's active one, where close, replace and shutdown find it.
func (m *Manager) work(rt *runtime) {
	defer m.workers.Done()
	for {
		if !m.workable(rt) {
			return
		}
		select {
		case m.slots <- struct{}{}:
		case <-m.stop:
			m.mu.Lock()
			m.stopWorkerLocked(rt)
			m.mu.Unlock()
			return
		}
		m.mu.Lock()
		if !m.workableLocked(rt) {
			m.mu.Unlock()
			<-m.slots
			return
		}
		j := rt.queue[0]
		rt.queue = rt.queue[1:]
		m.queuedTurns--
		ctx, cancel := context.WithCancelCause(m.ctx)
		rt.active, rt.cancel = j, cancel
		m.mu.Unlock()
		m.runJob(ctx, rt, j)
		cancel(nil)
		<-m.slots
	}
}

// workable reports whether the worker of rt goes on; when it does not, the worker is stopped.
func (m *Manager) workable(rt *runtime) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workableLocked(rt)
}

// workableLocked is workable with m.mu held.
func (m *Manager) workableLocked(rt *runtime) bool {
	if len(rt.queue) > 0 && m.sessions[rt.id] == rt && !m.draining && !m.stopping && rt.state != protocol.StateFailed {
		return true
	}
	m.stopWorkerLocked(rt)
	return false
}

// stopWorkerLocked records that rt's worker ends, closing the transcript of a retired runtime.
// m.mu must be held.
func (m *Manager) stopWorkerLocked(rt *runtime) {
	rt.working = false
	if m.sessions[rt.id] != rt {
		closeConv(rt.conv)
	}
	close(rt.stopped)
}

// runJob marks a wake accepted, runs its turn and records its terminal outcome. The wake is
// already rt's active one, with ctx its turn's context.
func (m *Manager) runJob(ctx context.Context, rt *runtime, j *job) {
	r := j.rec
	m.mu.Lock()
	if m.stopping || m.draining {
		// The host stops before the turn began: the wake stays queued, on disk and in the
		// queue, for the next start (or for after the drain). Its waiters are told so.
		rt.active, rt.cancel = nil, nil
		rt.queue = append([]*job{j}, rt.queue...)
		m.queuedTurns++
		if m.stopping {
			m.settleLocked(j, nil, stoppedBeforeRun(r))
		}
		m.mu.Unlock()
		return
	}
	seq := r.seq
	m.mu.Unlock()
	if err := context.Cause(ctx); err != nil {
		// Closed or replaced between leaving the queue and starting: it never ran.
		m.endJob(rt, j, nil, protocol.Retryable(protocol.CodeAborted, "the turn was aborted before it started: %v", err))
		return
	}
	if seq != 0 {
		if _, err := m.cfg.Store.UpdateJournal(r.sessionID, seq, store.JournalAccepted, nil, nil, nil); err != nil {
			// Still queued on disk: a restart replays it. This incarnation gives up on it.
			m.log.Error("wake could not be marked accepted", "sessionId", r.sessionID, "requestId", r.requestID, "err", err)
			m.mu.Lock()
			rt.active, rt.cancel = nil, nil
			if j.replay {
				m.recovery.PendingReplays--
			}
			m.settleLocked(j, nil, protocol.AsError(err))
			r.live = nil
			m.mu.Unlock()
			return
		}
	}
	mb := &turn.Mailbox{}
	m.mu.Lock()
	r.state, r.updatedAt = store.JournalAccepted, m.now().UTC()
	spec := rt.spec
	rt.mailbox = mb
	rt.state = protocol.StateRunning
	rt.lastUsed = m.now()
	m.activeTurns++
	m.mu.Unlock()

	sink := &turnSink{m: m, rt: rt, requestID: r.requestID}
	res, e := turn.Run(ctx, spec, turn.Request{
		RequestID: r.requestID, CallScope: r.ticketID, Prompt: j.prompt, History: rt.history,
	}, mb, sink)
	var result json.RawMessage
	if e == nil {
		b, err := json.Marshal(res)
		if err != nil {
			e = protocol.Errorf(protocol.CodeInternal, "turn result not serializable")
		}
		result = b
	} else if e.Code != protocol.CodeAborted {
		m.log.Warn("turn failed", "sessionId", r.sessionID, "requestId", r.requestID, "code", e.Code)
	}
	rt.history = append(rt.history, sink.recorded...)
	if rt.conv == nil {
		rt.history = trimMemoryHistory(rt.history)
	}
	m.mu.Lock()
	m.activeTurns--
	if m.activeTurns == 0 && m.turnsIdleCh != nil {
		close(m.turnsIdleCh)
		m.turnsIdleCh = nil
	}
	m.mu.Unlock()
	m.endJob(rt, j, result, e)
}

// stoppedBeforeRun is what the waiters of a wake the host stopped before it ran are told: a
// durable wake stays queued for the next start; a memory session's is gone.
func stoppedBeforeRun(r *jrec) *protocol.Error {
	if !r.durable() {
		return protocol.Retryable(protocol.CodeAborted, "the host stopped before this wake of a memory session ran")
	}
	return protocol.Retryable(protocol.CodeHostDraining, "the host stopped before this wake ran; it stays queued and runs after the next start").
		With("ticketId", r.ticketID)
}

// maxMemoryHistory and maxMemoryHistoryBytes bound the messages a memory session keeps, which
// have no transcript to bound them: by count, and by their text as a transcript's file is
// bounded (a model's answer alone may be megabytes). Variables so that tests can lower them.
var (
	maxMemoryHistory      = 4096
	maxMemoryHistoryBytes = transcript.MaxFileBytes
)

// trimMemoryHistory drops a memory session's oldest turns until what is left is within
// maxMemoryHistory and maxMemoryHistoryBytes. It cuts only before a user message, so that the
// history never starts with a tool result whose call was cut away, which providers refuse;
// when even the newest turn is over a bound, nothing is kept.
func trimMemoryHistory(h []model.Message) []model.Message {
	size := 0
	for _, msg := range h {
		size += messageBytes(msg)
	}
	cut := 0
	for cut < len(h) && (len(h)-cut > maxMemoryHistory || size > maxMemoryHistoryBytes || h[cut].Role != model.RoleUser) {
		size -= messageBytes(h[cut])
		cut++
	}
	if cut == 0 {
		return h
	}
	// A new slice: the dropped messages' text must not stay reachable through the old array.
	return append([]model.Message(nil), h[cut:]...)
}

// messageBytes is the text a message holds.
func messageBytes(msg model.Message) int {
	n := len(msg.Role) + len(msg.Content) + len(msg.ToolCallID)
	for _, c := range msg.ToolCalls {
		n += len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	return n
}

// endJob ends rt's active wake: the session is idle again, or failed with the queue behind the
// failed turn failing too, and the outcome is recorded and announced.
func (m *Manager) endJob(rt *runtime, j *job, result json.RawMessage, e *protocol.Error) {
	r := j.rec
	m.mu.Lock()
	rt.active, rt.cancel, rt.mailbox = nil, nil, nil
	switch {
	case e == nil, e.Code == protocol.CodeAborted:
		rt.state = protocol.StateIdle
	default:
		rt.state, rt.lastError = protocol.StateFailed, e.Code
		// The wakes behind a failed turn would only be refused session_failed when they
		// started; they are refused now, and a higher generation can replace this one.
		m.failQueueLocked(rt, protocol.Errorf(protocol.CodeSessionFailed, "an earlier turn of this generation failed (%s)", e.Code).
			With("lastErrorCode", e.Code))
	}
	m.mu.Unlock()

	m.finishDurable(j, result, e)

	m.mu.Lock()
	if m.sessions[rt.id] == rt {
		if e != nil {
			m.emitLocked(rt, protocol.EventRequestFailed, r.requestID, protocol.RequestFailedData{Error: e})
		}
		if len(rt.queue) == 0 {
			m.emitLocked(rt, protocol.EventSessionIdle, "", nil)
		}
	}
	m.mu.Unlock()
}

// turnSink delivers a turn's events to the session's attached clients and records its messages
// in the transcript.
type turnSink struct {
	m         *Manager
	rt        *runtime
	requestID string
	recorded  []model.Message
}

func (s *turnSink) Emit(event string, data any) {
	s.m.mu.Lock()
	if s.m.sessions[s.rt.id] == s.rt {
		s.m.emitLocked(s.rt, event, s.requestID, data)
	}
	s.m.mu.Unlock()
}

func (s *turnSink) Record(msgs ...model.Message) error {
	if s.rt.conv != nil {
		if err := s.rt.conv.Append(entriesOf(s.requestID, msgs)...); err != nil {
			return err
		}
	}
	s.recorded = append(s.recorded, msgs...)
	return nil
}

// Control delivers a steer or followUp message into the generation's running turn. The same
// key with the same message is accepted once for the generation's life (up to maxControlKeys
// keys); with another message it conflicts.
func (m *Manager) Control(id string, generation int64, op, key, message string) (*protocol.QueuedResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return nil, e
	}
	if rt.active == nil || rt.mailbox == nil {
		return nil, protocol.Retryable(protocol.CodeSessionNotRunning, "the session has no turn running").With("state", rt.state)
	}
	sum := sha256.Sum256([]byte(op + "\x00" + message))
	digest := string(sum[:])
	if prev, ok := rt.controls[key]; ok {
		if prev != digest {
			return nil, protocol.Errorf(protocol.CodeIdempotencyConflict, "idempotencyKey was used for a different %s", op).
				With("idempotencyKey", key)
		}
		return &protocol.QueuedResult{Queued: true}, nil
	}
	delivered := false
	if op == protocol.OpSteer {
		delivered = rt.mailbox.Steer(message)
	} else {
		delivered = rt.mailbox.FollowUp(message)
	}
	if !delivered { // the turn is ending and would never read it
		return nil, protocol.Retryable(protocol.CodeSessionNotRunning, "the session's turn is ending").With("state", rt.state)
	}
	if rt.controls == nil {
		rt.controls = make(map[string]string)
	}
	if len(rt.controlOrder) == maxControlKeys {
		delete(rt.controls, rt.controlOrder[0])
		rt.controlOrder = rt.controlOrder[1:]
	}
	rt.controls[key] = digest
	rt.controlOrder = append(rt.controlOrder, key)
	return &protocol.QueuedResult{Queued: true}, nil
}

// Abort cancels the generation's running turn, if any. Tool calls in flight get the adapter's
// abort; the wake fails aborted and the session is idle again.
func (m *Manager) Abort(id string, generation int64) (*protocol.AbortResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt, e := m.residentLocked(id, generation, true)
	if e != nil {
		return nil, e
	}
	if rt.cancel == nil {
		return &protocol.AbortResult{Aborted: false}, nil
	}
	rt.cancel(turn.ErrAborted)
	m.metrics["turnsAborted"]++
	return &protocol.AbortResult{Aborted: true}, nil
}

// failQueueLocked ends every queued wake of a runtime that stops being resident, and aborts its
// running turn. m.mu must be held; the journal writes happen on a goroutine the Manager owns.
func (m *Manager) failQueueLocked(rt *runtime, e *protocol.Error) {
	if rt.cancel != nil {
		rt.cancel(errors.New(e.Message))
	}
	queued := rt.queue
	rt.queue = nil
	m.queuedTurns -= len(queued)
	if len(queued) == 0 {
		return
	}
	m.workers.Add(1)
	go func() {
		defer m.workers.Done()
		for _, j := range queued {
			m.finishDurable(j, nil, e)
		}
	}()
}

// jobsLocked lists a runtime's queued and running wakes. m.mu must be held.
func (rt *runtime) jobsLocked() []*job {
	if rt == nil {
		return nil
	}
	jobs := append([]*job(nil), rt.queue...)
	if rt.active != nil {
		jobs = append(jobs, rt.active)
	}
	return jobs
}
