package session

// This file owns wake admission and the wake journal: Wake and its idempotent duplicates, the
// in-memory index of journal entries and tickets, their durable end and retention, Ticket,
// and the operator's Reconcile.

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
)

// StopReconciled is the stopReason of the result an operator's reconcile records for a wake
// that succeeded.
const StopReconciled = "reconciled"

// maxTerminalEntries bounds the terminal journal entries kept per session; the oldest are
// pruned when a new one is written. A variable so that tests can lower it.
var maxTerminalEntries = 256

// maxMemoryResultBytes bounds the results a memory session's terminal entries keep in memory,
// where the 256 of them could otherwise hold a model's answer of megabytes each; the newest
// result is kept whatever its size. A variable so that tests can lower it.
var maxMemoryResultBytes = 16 << 20

// jrec is the in-memory index entry of one wake: enough to deduplicate, to find its ticket and
// to prune. The durable entry (prompt, result) stays in the store.
type jrec struct {
	sessionID   string
	generation  int64
	key         string
	ticketID    string
	requestID   string
	fingerprint string
	source      string
	seq         uint64 // 0 for a memory session, whose wakes are not journaled
	state       string
	reconciled  bool
	createdAt   time.Time
	updatedAt   time.Time
	live        *job // while queued or running in this incarnation
	// unrecorded marks a wake whose turn ran but whose terminal record could not be written:
	// it is indeterminate here while the store still holds it accepted.
	unrecorded bool
	// result and err are kept here only for memory sessions; durable wakes read the store.
	result json.RawMessage
	err    *protocol.Error
}

func (r *jrec) durable() bool { return r.seq != 0 }

// WakeRequest is an admitted wake command.
type WakeRequest struct {
	SessionID      string
	Generation     int64
	IdempotencyKey string
	RequestID      string
	Payload        *protocol.WakePayload
}

// Wake admits one agent turn. A live duplicate (same key and fingerprint) joins the admitted
// wake; a key reused with another payload is idempotency_conflict; a finished duplicate gets
// the recorded outcome; a duplicate of a wake a restart left indeterminate, or whose outcome
// could not be recorded, is request_indeterminate.
//
// A durable wake is journaled queued before it is queued; with waitForTerminal false the
// answer is its ticket, otherwise Wake returns when the turn ends or ctx is done.
func (m *Manager) Wake(ctx context.Context, req WakeRequest) (any, error) {
	p := req.Payload
	fp := protocol.WakeFingerprint(req.SessionID, req.Generation, req.IdempotencyKey, p)

	m.mu.Lock()
	if e := m.admitting(); e != nil {
		m.mu.Unlock()
		return nil, e
	}
	rt, e := m.usableLocked(req.SessionID, req.Generation)
	if e != nil {
		m.mu.Unlock()
		return nil, e
	}
	if r := m.journal[req.SessionID][req.IdempotencyKey]; r != nil {
		m.mu.Unlock()
		return m.duplicate(ctx, r, fp, p.Wait())
	}
	if rt.ending {
		m.mu.Unlock()
		return nil, protocol.Retryable(protocol.CodeSessionBusy, "generation %d is being closed or replaced", rt.generation)
	}
	if rt.spec == nil {
		m.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeSessionPrecondition, "this session generation was opened without a model; open a generation with payload.model to run turns")
	}
	if rt.state == protocol.StateFailed {
		m.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeSessionFailed, "a turn of this generation failed (%s); open a higher generation to continue", rt.lastError).
			With("lastErrorCode", rt.lastError)
	}
	if len(rt.queue)+rt.admitting >= m.cfg.QueueDepth {
		m.mu.Unlock()
		return nil, protocol.Retryable(protocol.CodeSessionQueueFull, "the session already has %d wakes queued", m.cfg.QueueDepth).
			With("maxSessionQueueDepth", m.cfg.QueueDepth)
	}
	durable := rt.conv != nil
	if !durable && !p.Wait() {
		m.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeDurableAdmission, "a memory session journals nothing, so it cannot issue a ticket; wait for the turn (waitForTerminal true)")
	}
	now := m.now().UTC()
	r := &jrec{
		sessionID: req.SessionID, generation: req.Generation, key: req.IdempotencyKey,
		ticketID: protocol.TicketID(req.SessionID, req.IdempotencyKey), requestID: req.RequestID,
		fingerprint: fp, source: p.SourceText(), state: store.JournalQueued, createdAt: now, updatedAt: now,
	}
	j := &job{rec: r, prompt: p.Prompt, done: make(chan struct{})}
	r.live = j
	m.indexLocked(r)
	rt.admitting++
	m.mu.Unlock()

	if durable {
		entry, err := m.cfg.Store.AppendJournal(store.JournalEntry{
			SessionID: r.sessionID, Generation: r.generation, IdempotencyKey: r.key, RequestID: r.requestID,
			TicketID: r.ticketID, Fingerprint: fp, State: store.JournalQueued, Prompt: p.Prompt, Source: r.source,
			CreatedAt: now, UpdatedAt: now,
		})
		if err != nil {
			m.mu.Lock()
			m.admittedLocked(rt)
			m.unindexLocked(r)
			m.settleLocked(j, nil, protocol.AsError(err))
			m.mu.Unlock()
			return nil, err
		}
		m.mu.Lock()
		r.seq = entry.Seq
		m.mu.Unlock()
	}

	m.mu.Lock()
	m.admittedLocked(rt)
	if m.sessions[rt.id] != rt {
		// Closed or replaced while the entry was written: the close already failed the
		// session's queue, so this wake fails the same way.
		e := protocol.Retryable(protocol.CodeAborted, "the session generation ended before the wake was queued")
		m.mu.Unlock()
		m.finishDurable(j, nil, e)
		return nil, e
	}
	rt.queue = append(rt.queue, j)
	m.queuedTurns++
	m.emitLocked(rt, protocol.EventPromptAccepted, req.RequestID, protocol.PromptAcceptedData{
		IdempotencyKey: r.key, TicketID: r.ticketID, QueuedTurns: len(rt.queue)})
	m.startWorkerLocked(rt)
	m.mu.Unlock()
	return m.answer(ctx, j, p.Wait())
}

// admittedLocked ends the admission of one of rt's wakes, waking a close that waits for the
// last one. m.mu must be held.
func (m *Manager) admittedLocked(rt *runtime) {
	rt.admitting--
	if rt.admitting == 0 {
		m.admitted.Broadcast()
	}
}

// duplicate answers a wake whose key this session has seen.
func (m *Manager) duplicate(ctx context.Context, r *jrec, fp string, wait bool) (any, error) {
	if r.fingerprint != fp {
		return nil, protocol.Errorf(protocol.CodeIdempotencyConflict, "idempotencyKey was used for a different wake").
			With("idempotencyKey", r.key)
	}
	m.mu.Lock()
	live, state := r.live, r.state
	switch {
	case live != nil:
		m.metrics["wakeDedupJoins"]++
	case state == store.JournalAccepted || state == store.JournalIndeterminate:
		m.metrics["wakeIndeterminateRefusals"]++
	}
	m.mu.Unlock()
	if live != nil {
		return m.answer(ctx, live, wait)
	}
	switch state {
	case store.JournalQueued:
		// Queued on disk, but this incarnation could not start it (see runJob): a restart
		// replays it.
		return nil, protocol.Errorf(protocol.CodeDurabilityFailed, "the wake could not be started; it stays journaled and runs after a restart")
	case store.JournalAccepted, store.JournalIndeterminate:
		return nil, protocol.Errorf(protocol.CodeRequestIndeterminate, "the wake with this key may or may not have run; reconcile its ticket").
			With("idempotencyKey", r.key).With("state", state).With("ticketId", r.ticketID)
	}
	t, err := m.ticket(r)
	if err != nil {
		return nil, err
	}
	if !wait {
		return &protocol.TicketResult{Ticket: *t}, nil
	}
	if t.Error != nil {
		return nil, t.Error
	}
	return m.wakeResult(r, t.Result)
}

// answer waits for a job when the client asked to, else returns its ticket at once.
func (m *Manager) answer(ctx context.Context, j *job, wait bool) (any, error) {
	if !wait {
		t, err := m.ticket(j.rec)
		if err != nil {
			return nil, err
		}
		return &protocol.TicketResult{Ticket: *t}, nil
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		return nil, protocol.Retryable(protocol.CodeHostDraining, "the request ended before its turn did; the wake keeps its ticket").
			With("ticketId", j.rec.ticketID)
	}
	if j.err != nil {
		return nil, j.err
	}
	return m.wakeResult(j.rec, j.result)
}

// wakeResult answers a wake that completed with its result and, when its generation is still
// resident, the session's snapshot.
func (m *Manager) wakeResult(r *jrec, result json.RawMessage) (any, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res := &protocol.WakeResult{Result: result}
	if rt := m.sessions[r.sessionID]; rt != nil && rt.generation == r.generation {
		s := m.snapshotLocked(rt)
		res.Session = &s
	}
	return res, nil
}

// indexLocked adds r to the journal index. m.mu must be held.
func (m *Manager) indexLocked(r *jrec) {
	keys := m.journal[r.sessionID]
	if keys == nil {
		keys = make(map[string]*jrec)
		m.journal[r.sessionID] = keys
	}
	keys[r.key] = r
	m.tickets[r.ticketID] = r
}

// unindexLocked forgets r. m.mu must be held.
func (m *Manager) unindexLocked(r *jrec) {
	if keys := m.journal[r.sessionID]; keys[r.key] == r {
		delete(keys, r.key)
		if len(keys) == 0 {
			delete(m.journal, r.sessionID)
		}
	}
	if m.tickets[r.ticketID] == r {
		delete(m.tickets, r.ticketID)
	}
}

// forgetSessionLocked drops the journal index of a deleted session. m.mu must be held.
func (m *Manager) forgetSessionLocked(id string) {
	for _, r := range m.journal[id] {
		delete(m.tickets, r.ticketID)
		if r.state == store.JournalIndeterminate && !r.reconciled {
			m.recovery.IndeterminateRequests--
		}
	}
	delete(m.journal, id)
	delete(m.terminals, id)
	m.recomputePhaseLocked()
}

// settleLocked sets a job's outcome once and wakes its waiters. m.mu must be held.
func (m *Manager) settleLocked(j *job, result json.RawMessage, e *protocol.Error) {
	if j.settled {
		return
	}
	j.settled = true
	j.result, j.err = result, e
	close(j.done)
}

// finishDurable records a wake's terminal outcome in the journal, then settles it. A turn that
// completed but whose terminal record cannot be written fails durability_completion_failed and
// stays accepted: a restart makes it indeterminate rather than guessing.
//
// A result too large for its journal entry (a model's answer of a megabyte) is the one failure
// to record that is known before anything is written: the wake is recorded failed
// journal_record_too_large instead, so that a model cannot leave a wake indeterminate, and the
// host degraded after a restart, by answering at length. The answer is in the transcript, and
// the turn's events (turnEnd) stand: the turn did complete.
func (m *Manager) finishDurable(j *job, result json.RawMessage, e *protocol.Error) {
	r := j.rec
	to := store.JournalCompleted
	if e != nil {
		to = store.JournalFailed
	}
	m.mu.Lock()
	seq := r.seq
	retired := m.pruneLocked(r, result)
	m.mu.Unlock()
	if seq != 0 {
		_, err := m.cfg.Store.UpdateJournal(r.sessionID, seq, to, result, e, durableSeqs(retired))
		if e == nil && errors.Is(err, &protocol.Error{Code: protocol.CodeJournalRecordTooLarge}) {
			m.log.Warn("turn result too large for the wake journal: the wake is recorded failed", "sessionId", r.sessionID, "requestId", r.requestID, "resultBytes", len(result))
			e = protocol.Errorf(protocol.CodeJournalRecordTooLarge,
				"the turn completed, but its result (%d bytes) is too large to record; its answer is in the session's transcript", len(result)).
				With("limit", store.MaxJournalRecordBytes).With("ticketId", r.ticketID)
			to, result = store.JournalFailed, nil
			_, err = m.cfg.Store.UpdateJournal(r.sessionID, seq, to, nil, e, durableSeqs(retired))
		}
		if err != nil {
			m.log.Error("terminal journal record not written", "sessionId", r.sessionID, "requestId", r.requestID, "err", err)
			// The entry keeps the state the store holds: accepted for a turn that ran (a
			// restart makes it indeterminate), queued for a wake that never started (a
			// restart replays it).
			m.mu.Lock()
			r.live = nil
			if j.replay {
				m.recovery.PendingReplays--
			}
			fail := protocol.Errorf(protocol.CodeDurabilityCompletion,
				"the turn ended but its outcome could not be recorded; the wake is indeterminate").With("ticketId", r.ticketID)
			unrecorded := r.state != store.JournalQueued
			if !unrecorded {
				fail = protocol.Errorf(protocol.CodeDurabilityFailed, "the wake's end could not be recorded; it stays journaled and runs after a restart")
			} else {
				// Indeterminate now, as a restart would find it: its ticket says so, it
				// holds the host degraded, and an operator can reconcile it without a
				// restart once the store writes again.
				r.state, r.unrecorded = store.JournalIndeterminate, true
				m.recovery.IndeterminateRequests++
				m.recomputePhaseLocked()
			}
			m.settleLocked(j, nil, fail)
			m.mu.Unlock()
			if unrecorded {
				m.log.Warn("wake indeterminate: its outcome could not be recorded; reconcile its ticket (airlock reconcile TICKET --outcome succeeded|failed)",
					"sessionId", r.sessionID, "generation", r.generation, "ticketId", r.ticketID, "requestId", r.requestID)
			}
			return
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetRetiredLocked(r.sessionID, retired)
	r.state, r.updatedAt, r.live = to, m.now().UTC(), nil
	if !r.durable() {
		r.result, r.err = result, e
	}
	m.terminals[r.sessionID] = append(m.terminals[r.sessionID], r)
	if j.replay {
		m.recovery.PendingReplays--
		m.recovery.ReplayedRequests++
	}
	m.settleLocked(j, result, e)
}

// pruneLocked picks the terminal entries of r's session that retention retires once r ends
// with result: beyond maxTerminalEntries, or older than terminalRetention. Memory sessions'
// entries, which live only in the index, are retired by the same rule, and also while the
// results they keep (to answer a retry) and result are over maxMemoryResultBytes. m.mu must
// be held.
func (m *Manager) pruneLocked(r *jrec, result json.RawMessage) []*jrec {
	list := m.terminals[r.sessionID]
	cut := max(0, len(list)+1-maxTerminalEntries)
	old := m.now().Add(-terminalRetention)
	for cut < len(list) && list[cut].updatedAt.Before(old) {
		cut++
	}
	if !r.durable() {
		kept := len(result)
		for _, t := range list[cut:] {
			kept += len(t.result)
		}
		for cut < len(list) && kept > maxMemoryResultBytes {
			kept -= len(list[cut].result)
			cut++
		}
	}
	return append([]*jrec(nil), list[:cut]...)
}

// durableSeqs lists the journal seqs of the durable entries among recs.
func durableSeqs(recs []*jrec) []uint64 {
	var seqs []uint64
	for _, t := range recs {
		if t.durable() {
			seqs = append(seqs, t.seq)
		}
	}
	return seqs
}

// forgetRetiredLocked drops retired entries from the index. m.mu must be held.
func (m *Manager) forgetRetiredLocked(id string, retired []*jrec) {
	if len(retired) == 0 {
		return
	}
	gone := make(map[*jrec]bool, len(retired))
	for _, t := range retired {
		gone[t] = true
		m.unindexLocked(t)
	}
	list := m.terminals[id][:0]
	for _, t := range m.terminals[id] {
		if !gone[t] {
			list = append(list, t)
		}
	}
	m.terminals[id] = list
}

// Ticket returns the durable state of a wake by its ticket id.
func (m *Manager) Ticket(ticketID string) (*protocol.TicketResult, error) {
	m.mu.Lock()
	r, e := m.ticketLocked(ticketID)
	m.mu.Unlock()
	if e != nil {
		return nil, e
	}
	t, err := m.ticket(r)
	if err != nil {
		return nil, err
	}
	return &protocol.TicketResult{Ticket: *t}, nil
}

// ticketLocked finds a wake by its ticket id, once the journal is indexed. m.mu must be held.
func (m *Manager) ticketLocked(ticketID string) (*jrec, *protocol.Error) {
	if !m.completed {
		return nil, protocol.Retryable(protocol.CodeHostNotReady, "the wake journal is still being recovered").With("phase", m.recovery.Phase)
	}
	r := m.tickets[ticketID]
	if r == nil {
		return nil, protocol.Errorf(protocol.CodeTicketNotFound, "no wake has this ticket").With("ticketId", ticketID)
	}
	return r, nil
}

// ticket builds the ticket resource of r, reading a durable outcome from the journal.
func (m *Manager) ticket(r *jrec) (*protocol.TicketResource, error) {
	m.mu.Lock()
	t := &protocol.TicketResource{
		TicketID: r.ticketID, RequestID: r.requestID, IdempotencyKey: r.key, Operation: "prompt",
		State: ticketState(r.state, r.live != nil), SubmittedAt: r.createdAt, UpdatedAt: r.updatedAt,
		SessionID: r.sessionID, Generation: r.generation, Reconciled: r.reconciled,
		Result: r.result, Error: r.err,
	}
	durable, seq, terminal := r.durable(), r.seq, r.state == store.JournalCompleted || r.state == store.JournalFailed
	m.mu.Unlock()
	if durable && terminal {
		e, err := m.cfg.Store.JournalEntry(r.sessionID, seq)
		if err != nil {
			return nil, err
		}
		if e != nil {
			t.Result, t.Error, t.UpdatedAt = e.Result, e.Error, e.UpdatedAt
		}
	}
	return t, nil
}

// ticketState names a journal state as tickets do. An accepted wake that nothing runs any more
// (its outcome could not be recorded) is indeterminate already; the journal says so after the
// next restart.
func ticketState(s string, live bool) string {
	switch s {
	case store.JournalAccepted:
		if !live {
			return protocol.TicketIndeterminate
		}
		return protocol.TicketRunning
	case store.JournalCompleted:
		return protocol.TicketSucceeded
	}
	return s // queued, failed and indeterminate keep their names
}

// Reconcile records an operator's verdict on an indeterminate wake. Only an indeterminate
// ticket can be reconciled; the host leaves degraded once none is left.
func (m *Manager) Reconcile(ticketID, outcome string) (*protocol.TicketResult, error) {
	m.mu.Lock()
	r, e := m.ticketLocked(ticketID)
	m.mu.Unlock()
	if e != nil {
		return nil, e
	}
	release := m.lockSession(r.sessionID) // one reconcile of a ticket at a time
	defer release()
	m.mu.Lock()
	state := r.state
	shown := ticketState(r.state, r.live != nil)
	m.mu.Unlock()
	if state != store.JournalIndeterminate {
		return nil, protocol.Errorf(protocol.CodeTicketNotIndeterminate, "only an indeterminate ticket can be reconciled; this one is %s", shown).
			With("ticketId", ticketID).With("state", shown)
	}
	m.mu.Lock()
	unrecorded := r.unrecorded
	m.mu.Unlock()
	if unrecorded {
		// The store still holds it accepted: it becomes indeterminate there first, so that
		// the verdict is recorded as an operator's, as after a restart.
		if _, err := m.cfg.Store.UpdateJournal(r.sessionID, r.seq, store.JournalIndeterminate, nil, nil, nil); err != nil {
			return nil, err
		}
		m.mu.Lock()
		r.unrecorded = false
		m.mu.Unlock()
	}
	// The verdict is what a duplicate of the wake gets from now on: an empty result that says
	// it was reconciled, or an error that says so.
	to, verdict := store.JournalCompleted, (*protocol.Error)(nil)
	result, _ := json.Marshal(&protocol.TurnResult{RequestID: r.requestID, StopReason: StopReconciled})
	if outcome == protocol.OutcomeFailed {
		to, result = store.JournalFailed, nil
		verdict = protocol.Errorf(protocol.CodeRequestIndeterminate, "an operator reconciled this indeterminate wake as failed")
	}
	entry, err := m.cfg.Store.UpdateJournal(r.sessionID, r.seq, to, result, verdict, nil)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	r.state, r.updatedAt, r.reconciled = to, entry.UpdatedAt, true
	m.terminals[r.sessionID] = append(m.terminals[r.sessionID], r)
	m.recovery.IndeterminateRequests--
	m.recomputePhaseLocked()
	m.metrics["reconciled"]++
	m.mu.Unlock()
	m.log.Info("wake reconciled", "sessionId", r.sessionID, "ticketId", ticketID, "outcome", outcome)
	return m.Ticket(ticketID)
}
