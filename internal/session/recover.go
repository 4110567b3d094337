package session

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sort"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
)

// Recovery deadlines.
const (
	DefaultRecoveryOpenTimeout = 30 * time.Second
	DefaultRecoveryTimeout     = 120 * time.Second
)

// Recover is the startup step that brings back what a previous incarnation left: it restores
// the sessions that were resident, quarantines those whose authority did not survive the
// restart, indexes the wake journal, replays queued wakes (in the background, on the restored
// sessions' workers) and makes accepted wakes indeterminate.
//
//   - A session that held a host tool adapter is quarantined tool_adapter_reprovision_required:
//     it stays dormant, is never reopened without its tools nor given an invented handle, and
//     its queued wakes fail with that code.
//   - A session whose model provider is unconfigured or has no key now is quarantined
//     credentials_required the same way.
//   - A memory session stays dormant; it has no journal.
//   - A generation opened with lifetime "connection" is deleted: the connection it lived as
//     long as is gone, and its grant with the previous incarnation's adapters.
//   - Every other session that was resident is reopened on exactly its recorded transcript,
//     within RecoveryOpenTimeout each and RecoveryTimeout for the phase.
//
// Quarantines keep the host ready; failures and indeterminate wakes make it degraded until an
// operator reconciles them.
func (m *Manager) Recover() error {
	started := m.now().UTC()
	m.mu.Lock()
	m.recovery.Phase = protocol.PhaseRecovering
	m.recovery.StartedAt = &started
	m.mu.Unlock()

	if err := m.recover(started); err != nil {
		m.mu.Lock()
		m.failLocked(protocol.AsError(err).Code)
		m.completed, m.recoveryFailed = true, true
		m.recomputePhaseLocked()
		m.mu.Unlock()
		return err
	}
	done := m.now().UTC()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.completed = true
	m.recovery.CompletedAt = &done
	m.recomputePhaseLocked()
	m.log.Info("recovery finished", "phase", m.recovery.Phase, "restored", m.recovery.RestoredSessions,
		"quarantined", len(m.recovery.QuarantinedSessions), "pendingReplays", m.recovery.PendingReplays,
		"indeterminate", m.recovery.IndeterminateRequests, "failures", m.recovery.FailureCount, "took", done.Sub(started))
	return nil
}

func (m *Manager) recover(started time.Time) error {
	recs, err := m.cfg.Store.Records()
	if err != nil {
		return fmt.Errorf("recover catalog: %w", err)
	}
	if recs, err = m.dropConnectionScoped(recs); err != nil {
		return fmt.Errorf("recover catalog: %w", err)
	}
	manifests, err := m.cfg.Store.Manifests()
	if err != nil {
		return fmt.Errorf("recover manifests: %w", err)
	}
	entries, err := m.cfg.Store.RecoverJournal()
	if err != nil {
		return fmt.Errorf("recover journal: %w", err)
	}
	deadline := started.Add(m.cfg.RecoveryTimeout)

	// What happens to each session that was resident: restored, quarantined with a code, or
	// dormant (a memory session, or one that failed to restore). Dormant sessions stay so.
	quarantined := make(map[string]string)
	conditions := make(map[string]protocol.RecoveryCondition)
	restored := make(map[string]*runtime)
	closed := make(map[string]bool)
	var dormant []string
	var candidates []*protocol.CatalogRecord
	for i := range recs {
		rec := &recs[i]
		m.mu.Lock()
		m.known[rec.SessionID] = struct{}{}
		m.mu.Unlock()
		if rec.Recovery != nil {
			// Quarantined by an earlier restart and never reprovisioned.
			quarantined[rec.SessionID] = rec.Recovery.Code
			m.addQuarantine(rec.SessionID, rec.Generation, rec.Recovery.Code)
			continue
		}
		if rec.Residency == protocol.Resident {
			candidates = append(candidates, rec)
		} else {
			closed[rec.SessionID] = true
		}
	}
	outcomes := m.restoreAll(candidates, manifests, deadline)
	for i, rec := range candidates {
		code, rt, err := outcomes[i].code, outcomes[i].rt, outcomes[i].err
		switch {
		case err != nil:
			m.log.Error("session not restored", "sessionId", rec.SessionID, "generation", rec.Generation, "err", err)
			m.mu.Lock()
			m.failLocked(protocol.AsError(err).Code)
			m.mu.Unlock()
			dormant = append(dormant, rec.SessionID)
		case code != "":
			quarantined[rec.SessionID] = code
			conditions[rec.SessionID] = protocol.RecoveryCondition{State: protocol.RecoveryReprovisionRequired, Code: code, Retryable: true}
		case rt != nil:
			restored[rec.SessionID] = rt
		default:
			dormant = append(dormant, rec.SessionID)
		}
	}

	// One transaction settles the catalog; restored sessions are resident already.
	if err := m.cfg.Store.SettleRecovery(dormant, conditions); err != nil {
		m.mu.Lock()
		for _, rt := range restored {
			delete(m.sessions, rt.id)
			closeConv(rt.conv)
		}
		m.recovery.RestoredSessions, m.recovery.OpenedSessions = 0, 0
		m.mu.Unlock()
		return fmt.Errorf("recover catalog: %w", err)
	}

	for i := range entries {
		m.recoverEntry(&entries[i], restored, quarantined, closed)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rt := range restored {
		m.startWorkerLocked(rt)
	}
	return nil
}

// dropConnectionScoped deletes the sessions whose generation lived as long as a connection of
// the previous incarnation (lifetime "connection"), records, manifests and journal alike, before
// recovery reads the rest, and returns the other records.
func (m *Manager) dropConnectionScoped(recs []protocol.CatalogRecord) ([]protocol.CatalogRecord, error) {
	kept := recs[:0]
	for _, rec := range recs {
		if rec.Policy.Lifetime != protocol.LifetimeConnection {
			kept = append(kept, rec)
			continue
		}
		if _, err := m.cfg.Store.DeleteSession(rec.SessionID); err != nil {
			return nil, err
		}
		m.log.Info("connection-scoped session deleted after restart", "sessionId", rec.SessionID, "generation", rec.Generation)
	}
	return kept, nil
}

type restoreOutcome struct {
	code string
	rt   *runtime
	err  error
}

// restoreAll restores the candidates on a few goroutines at once: each restore is mostly
// waiting for the filesystem (a transcript to open and read), and a restart may bring back
// thousands of sessions. Outcomes are in the candidates' order.
func (m *Manager) restoreAll(candidates []*protocol.CatalogRecord, manifests map[string]*store.Manifest, deadline time.Time) []restoreOutcome {
	out := make([]restoreOutcome, len(candidates))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(candidates), 2*goruntime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rec := candidates[i]
				o := &out[i]
				o.code, o.rt, o.err = m.restore(rec, manifests[rec.SessionID], deadline)
			}
		}()
	}
	for i := range candidates {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// restore brings one session that was resident back, or quarantines it. It returns the
// quarantine code, the restored runtime, or the error that failed it; nothing for a memory
// session, which has no manifest. The caller records the outcome in the catalog.
func (m *Manager) restore(rec *protocol.CatalogRecord, man *store.Manifest, deadline time.Time) (string, *runtime, error) {
	if man == nil {
		return "", nil, nil // a memory session: nothing to reopen
	}
	if man.Generation != rec.Generation {
		return "", nil, protocol.Errorf(protocol.CodeManifestGenerationDiffer,
			"the manifest of session %q is for generation %d, its catalog record for %d", rec.SessionID, man.Generation, rec.Generation)
	}
	code := ""
	if len(man.Policy.ToolAdapter) > 0 {
		code = protocol.CodeReprovisionRequired
	} else if _, e := m.modelFor(man.Policy.Model); e != nil {
		code = protocol.CodeCredentialsRequired
	}
	if code != "" {
		m.addQuarantine(rec.SessionID, rec.Generation, code)
		m.log.Warn("session quarantined after restart", "sessionId", rec.SessionID, "generation", rec.Generation, "code", code)
		return code, nil, nil
	}

	// Restores run in parallel: a slot is reserved before the work, as an open does.
	m.mu.Lock()
	full := len(m.sessions)+m.reserved >= m.cfg.MaxSessions
	if !full {
		m.reserved++
	}
	m.mu.Unlock()
	if full {
		return "", nil, protocol.Retryable(protocol.CodeSessionCapacity, "the host's %d resident sessions are taken; session %q stays dormant", m.cfg.MaxSessions, rec.SessionID)
	}
	held := true // until the runtime takes the slot
	defer func() {
		if held {
			m.mu.Lock()
			m.reserved--
			m.mu.Unlock()
		}
	}()
	if !time.Now().Before(deadline) {
		return "", nil, protocol.Errorf(protocol.CodeRecoveryDeadline, "the recovery phase ran out of time before session %q was restored", rec.SessionID)
	}
	openBy := time.Now().Add(m.cfg.RecoveryOpenTimeout)
	if deadline.Before(openBy) {
		openBy = deadline
	}
	ctx, cancel := context.WithDeadline(context.Background(), openBy)
	defer cancel()
	completer, _ := m.modelFor(man.Policy.Model)
	ref := rec.Conversation
	if ref == nil {
		ref = man.Conversation
	}
	if ref == nil {
		return "", nil, protocol.Errorf(protocol.CodeConversationMissing, "session %q has a manifest but no recorded transcript", rec.SessionID)
	}
	conv, hist, err := m.conversation(ctx, rec.SessionID, &man.Policy, ref)
	if err == nil && ctx.Err() != nil {
		closeConv(conv)
		err = ctx.Err()
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return "", nil, protocol.Retryable(protocol.CodeRecoveryOpenTimeout,
				"restoring session %q took longer than %v; restart required", rec.SessionID, m.cfg.RecoveryOpenTimeout)
		}
		return "", nil, err
	}

	pol := man.Policy
	rt := m.residentRuntime(rec.SessionID, rec.Generation, man.ProtocolVersion, &pol, rec.PolicyDigest)
	rt.conv, rt.history = conv, hist
	rt.spec = m.turnSpec(rt, completer, nil)
	m.mu.Lock()
	m.sessions[rec.SessionID] = rt
	m.reserved--
	held = false
	m.recovery.RestoredSessions++
	m.recovery.OpenedSessions++
	m.mu.Unlock()
	return "", rt, nil
}

// recoverEntry indexes one journal entry and settles what the restart decided for it: a
// queued wake is replayed on its restored session, or fails terminally when its session is
// quarantined, was closed before the restart, or could not be restored; an indeterminate wake
// waits for reconciliation.
func (m *Manager) recoverEntry(e *store.JournalEntry, restored map[string]*runtime, quarantined map[string]string, closed map[string]bool) {
	r := &jrec{
		sessionID: e.SessionID, generation: e.Generation, key: e.IdempotencyKey, ticketID: e.TicketID,
		requestID: e.RequestID, fingerprint: e.Fingerprint, source: e.Source, seq: e.Seq, state: e.State,
		reconciled: e.Reconciled, createdAt: e.CreatedAt, updatedAt: e.UpdatedAt,
	}
	m.mu.Lock()
	m.indexLocked(r)
	switch e.State {
	case store.JournalCompleted, store.JournalFailed:
		m.terminals[r.sessionID] = append(m.terminals[r.sessionID], r)
		m.mu.Unlock()
		return
	case store.JournalIndeterminate:
		m.recovery.IndeterminateRequests++
		m.mu.Unlock()
		// host.recovery only counts them: the log is where an operator whose client is gone
		// finds the ticket to reconcile.
		m.log.Warn("wake indeterminate since a restart: reconcile its ticket (airlock reconcile TICKET --outcome succeeded|failed)",
			"sessionId", r.sessionID, "generation", r.generation, "ticketId", r.ticketID, "requestId", r.requestID)
		return
	}
	m.mu.Unlock()

	// Queued.
	rt := restored[e.SessionID]
	if rt != nil && rt.generation == e.Generation {
		j := &job{rec: r, prompt: e.Prompt, replay: true, done: make(chan struct{})}
		m.mu.Lock()
		r.live = j
		rt.queue = append(rt.queue, j)
		m.queuedTurns++
		m.recovery.PendingReplays++
		m.mu.Unlock()
		return
	}
	var fail *protocol.Error
	if code, ok := quarantined[e.SessionID]; ok {
		switch code {
		case protocol.CodeReprovisionRequired:
			fail = protocol.Retryable(code, "host tool adapter capability must be re-provisioned after restart")
		default:
			fail = protocol.Retryable(code, "the session's model provider credentials must be provided again after restart")
		}
	} else if closed[e.SessionID] {
		// A close records the session dormant first and fails its queue after, in the
		// background: a crash in between leaves the wakes queued. They fail as the close
		// failed them, and nothing failed to restore, so the host is not degraded for them.
		fail = protocol.Retryable(protocol.CodeAborted, "the session was closed")
	} else {
		fail = protocol.Errorf(protocol.CodeRestoreWakeFailed, "the wake's session generation was not restored after the restart")
		m.mu.Lock()
		m.failLocked(protocol.CodeRestoreWakeFailed)
		m.mu.Unlock()
	}
	m.finishDurable(&job{rec: r, done: make(chan struct{})}, nil, fail)
}

// failLocked counts one recovery failure. m.mu must be held.
func (m *Manager) failLocked(code string) {
	m.recovery.FailureCount++
	m.recovery.FailureCodes[code]++
}

// recomputePhaseLocked derives the recovery phase from its counters: recovering until
// recovery has run, then degraded while any failure or unreconciled indeterminate wake
// remains, else ready. Quarantines never count. m.mu must be held.
func (m *Manager) recomputePhaseLocked() {
	switch {
	case m.recovery.Phase == protocol.PhaseNotStarted && !m.completed:
	case !m.completed:
		m.recovery.Phase = protocol.PhaseRecovering
	case m.recovery.FailureCount > 0 || m.recovery.IndeterminateRequests > 0:
		m.recovery.Phase = protocol.PhaseDegraded
	default:
		m.recovery.Phase = protocol.PhaseReady
	}
}

// addQuarantine lists a quarantined session in host status, sorted by session id.
func (m *Manager) addQuarantine(id string, generation int64, code string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clearQuarantineLocked(id)
	q := append(m.recovery.QuarantinedSessions, protocol.QuarantinedSession{
		SessionID: id, Generation: generation,
		RecoveryCondition: protocol.RecoveryCondition{State: protocol.RecoveryReprovisionRequired, Code: code, Retryable: true},
	})
	sort.Slice(q, func(i, j int) bool { return q[i].SessionID < q[j].SessionID })
	m.recovery.QuarantinedSessions = q
}

// usableLocked is residentLocked (with the generation checked) for the commands that use a
// generation's authority, wake and invokeTool: a generation that is dormant because a restart
// quarantined it answers its recovery code (tool_adapter_reprovision_required or
// credentials_required, retryable, with the session and generation in details) rather than
// session_not_found, so that a person sees what to do. m.mu must be held.
func (m *Manager) usableLocked(id string, generation int64) (*runtime, *protocol.Error) {
	rt, e := m.residentLocked(id, generation, true)
	if rt != nil || e.Code != protocol.CodeSessionNotFound {
		return rt, e
	}
	for _, q := range m.recovery.QuarantinedSessions {
		if q.SessionID == id && q.Generation == generation {
			return nil, protocol.Retryable(q.Code, "session generation is quarantined since a restart: reopen it with the same generation and policy").
				With("sessionId", id).With("generation", generation).With("recoveryState", q.State)
		}
	}
	return nil, e
}

// clearQuarantineLocked drops a session from the quarantine list. m.mu must be held.
func (m *Manager) clearQuarantineLocked(id string) {
	q := m.recovery.QuarantinedSessions[:0]
	for _, s := range m.recovery.QuarantinedSessions {
		if s.SessionID != id {
			q = append(q, s)
		}
	}
	m.recovery.QuarantinedSessions = q
}
