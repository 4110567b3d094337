package daemon

// This file runs agents' adapter proposals (internal/proposal): proposeAdapter and
// listProposals on the owner socket, the same for an agent turn's tools, and the flow of
// each proposal: nothing runs before the operator approves execution (an approval.KindRun
// request showing the command, the argv and the SHA-256 of every file that will run); then
// the pins are checked again, the validator runs, and the adapter is registered as a
// temporary adapter owned by the session generation (lease; it ends with the generation);
// a publication, if asked, is a second approval.KindPublish request showing the validator's
// report and the descriptors it saw, and only those are published.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/proposal"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/roomhost"
	"github.com/airlockhq/airlock/internal/turn"
	"github.com/airlockhq/airlock/internal/validate"
)

// Proposal states, as listProposals shows them.
const (
	// ProposalPendingRun: the proposal waits for the operator's approval to run it.
	ProposalPendingRun = "pending_run"
	// ProposalStarting: approved; the pins are checked, the validator runs, and the adapter
	// is registered.
	ProposalStarting = "starting"
	// ProposalRunning: the adapter runs, owned by the session generation; no publication
	// was asked, or it was refused (publication says so).
	ProposalRunning = "running"
	// ProposalPendingPublish: the adapter runs and the publication waits for the operator.
	ProposalPendingPublish = "pending_publish"
	// ProposalPublished: the adapter runs and is published into the room.
	ProposalPublished = "published"
	// ProposalRefused: the operator denied running it, or nobody answered in time.
	ProposalRefused = "refused"
	// ProposalFailed: approved, but it did not run: a pinned file changed, the validator
	// failed it, or its registration failed. error says which.
	ProposalFailed = "failed"
	// ProposalEnded: its adapter was removed (the session generation ended, the lease ended,
	// the operator removed it), or the generation ended before it ran.
	ProposalEnded = "ended"
)

// Bounds of the proposals one daemon keeps.
const (
	// maxOpenProposalsPerSession bounds the proposals of one session generation that are not
	// over (refused, failed or ended).
	maxOpenProposalsPerSession = 8
	// maxProposals bounds the proposals kept; the oldest that is over makes room.
	maxProposals = 256
	// proposalApprovalTimeout is how long a proposal waits for each of its approvals: the
	// queue's maximum, since an operator reads a command and its digests, not a yes/no.
	proposalApprovalTimeout = approval.MaxTimeout
	// proposalValidateTimeout bounds the validator's run against a proposed adapter.
	proposalValidateTimeout = 2 * time.Minute
	// proposalReason is the Reason of a proposal's approval requests.
	proposalReason = "agent proposal"
)

// asker is where a proposal waits for the operator: the daemon's approval queue.
type asker interface {
	Ask(ctx context.Context, r approval.Request) (approval.Decision, error)
}

// proposals holds every proposal and owns their flows: one goroutine per proposal in
// progress, stopped by its session generation's end or by close.
type proposals struct {
	srv *Server
	log *slog.Logger
	ask asker

	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards the fields below and every field of the proposals they hold.
	mu     sync.Mutex
	byID   map[string]*prop
	order  []string // ids, oldest first
	closed bool
}

// prop is one proposal.
type prop struct {
	id         string
	session    string
	generation int64
	actor      gate.Actor
	p          *proposal.Proposal
	plan       *proposal.Plan
	state      string
	err        *protocol.Error
	report     *validate.Report
	pub        *PublicationStatus
	registered bool // its adapter was registered by this proposal
	created    time.Time
	updated    time.Time
	cancel     context.CancelFunc
}

// ProposalStatus is a proposal as listProposals and proposeAdapter show it.
type ProposalStatus struct {
	ID         string             `json:"id"`
	Name       string             `json:"name"`
	State      string             `json:"state"`
	SessionID  string             `json:"sessionId"`
	Generation int64              `json:"generation"`
	Proposal   *proposal.Proposal `json:"proposal"`
	// Plan is what runs: the command and argv as the adapter gets them, and the SHA-256 of
	// every file that runs, as the operator approves them.
	Plan *proposal.Plan `json:"plan"`
	// Error says why a proposal was refused, failed or ended.
	Error *protocol.Error `json:"error,omitempty"`
	// Report is the validator's report, once it ran.
	Report      *validate.Report   `json:"report,omitempty"`
	Publication *PublicationStatus `json:"publication,omitempty"`
	CreatedAt   time.Time          `json:"createdAt"`
	UpdatedAt   time.Time          `json:"updatedAt"`
}

// PublicationStatus is the publication a proposal asked for: pending (not asked yet, or
// waiting for the operator), published, refused or failed (error says why), or withdrawn
// (the proposal ended while it was pending or published).
type PublicationStatus struct {
	Room  string          `json:"room"`
	State string          `json:"state"`
	Error *protocol.Error `json:"error,omitempty"`
}

// ProposalList is the data of listProposals.
type ProposalList struct {
	Proposals []ProposalStatus `json:"proposals"`
}

// runDetail is the Detail of a proposal's approval to run: everything that will run.
type runDetail struct {
	Proposal     string            `json:"proposal"`
	Name         string            `json:"name"`
	Workspace    string            `json:"workspace"`
	Command      string            `json:"command"`
	Argv         []string          `json:"argv"`
	Files        []proposal.File   `json:"files"`
	Capabilities []string          `json:"capabilities"`
	LeaseSeconds int64             `json:"leaseSeconds"`
	Publish      *proposal.Publish `json:"publish,omitempty"`
	AgentReason  string            `json:"agentReason,omitempty"`
}

// publishDetail is the Detail of a proposal's approval to publish: what the validator saw.
type publishDetail struct {
	Proposal    string                       `json:"proposal"`
	Name        string                       `json:"name"`
	Room        string                       `json:"room"`
	Publish     []proposal.PublishCapability `json:"publish"`
	Files       []proposal.File              `json:"files"`
	Descriptors []capadapter.Descriptor      `json:"descriptors"`
	Report      *validate.Report             `json:"report"`
}

func newProposals(s *Server, ask asker, log *slog.Logger) *proposals {
	ctx, cancel := context.WithCancel(context.Background())
	return &proposals{srv: s, log: log, ask: ask, ctx: ctx, cancel: cancel, byID: make(map[string]*prop)}
}

// close ends every flow (a proposal waiting for the operator is withdrawn) and waits for
// them. Adapters already registered stay, as every registration does over a restart.
func (m *proposals) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
}

func proposalError(err error) *protocol.Error {
	var pe *proposal.Error
	if errors.As(err, &pe) {
		e := protocol.Errorf(pe.Code, "%s", pe.Reason)
		if pe.Field != "" {
			e = e.With("field", "proposal."+pe.Field)
		}
		return e
	}
	return protocol.AsError(err)
}

// workspace returns the working directory and the rules of a resident generation.
func (m *proposals) workspace(id string, generation int64) (string, *policy.Policy, error) {
	rules, err := m.srv.sessions.Rules(id, generation)
	if err != nil {
		return "", nil, err
	}
	d, err := m.srv.sessions.Describe(id)
	if err != nil {
		return "", nil, err
	}
	if d.Record.Generation != generation {
		return "", nil, protocol.Errorf(protocol.CodeStaleGeneration, "the session's generation is %d", d.Record.Generation)
	}
	return d.Record.Policy.Cwd, rules, nil
}

func newProposalID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// propose files a proposal of actor's session generation: checked, resolved against the
// workspace and pinned, then its flow starts, waiting for the operator's approval to run.
func (m *proposals) propose(actor gate.Actor, raw json.RawMessage) (*ProposalStatus, error) {
	if actor.Session == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidField, "a proposal names its session and generation").With("field", "sessionId")
	}
	cwd, rules, err := m.workspace(actor.Session, actor.Generation)
	if err != nil {
		return nil, err
	}
	if !rules.AllowsProposals() {
		return nil, protocol.Errorf(proposal.CodeNotAllowed, "the session's policy does not allow adapter proposals")
	}
	if m.srv.gate.Host().DeniesProposals() {
		// The stricter policy wins, as for calls: the host's "proposals": "deny" was read
		// and then ignored (TestHostPolicyDeniesProposals).
		return nil, protocol.Errorf(proposal.CodeNotAllowed, "the host's policy does not allow adapter proposals")
	}
	p, err := proposal.Parse(raw)
	if err != nil {
		return nil, proposalError(err)
	}
	plan, err := proposal.Resolve(p, cwd)
	if err != nil {
		return nil, proposalError(err)
	}
	if _, taken := m.srv.adapters.status(p.Name); taken {
		return nil, protocol.Errorf(proposal.CodeNameTaken, "an adapter named %q is registered already", p.Name)
	}
	now := time.Now().UTC()
	pr := &prop{id: newProposalID(), session: actor.Session, generation: actor.Generation, actor: actor,
		p: p, plan: plan, state: ProposalPendingRun, created: now, updated: now}
	if p.Publish != nil {
		pr.pub = &PublicationStatus{Room: p.Publish.Room, State: "pending"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, protocol.Retryable(protocol.CodeHostDraining, "the daemon is stopping")
	}
	open := 0
	for _, q := range m.byID {
		if q.session != pr.session || q.generation != pr.generation || over(q.state) {
			continue
		}
		open++
		if q.p.Name == p.Name {
			return nil, protocol.Errorf(proposal.CodeNameTaken, "proposal %s of this session proposes %q already", q.id, p.Name)
		}
	}
	if open >= maxOpenProposalsPerSession {
		return nil, protocol.Retryable(proposal.CodeTooMany, "the session has %d proposals in progress", open)
	}
	if len(m.byID) >= maxProposals && !m.evictLocked() {
		return nil, protocol.Retryable(proposal.CodeTooMany, "the daemon keeps %d proposals in progress", len(m.byID))
	}
	ctx, cancel := context.WithCancel(m.ctx)
	pr.cancel = cancel
	m.byID[pr.id] = pr
	m.order = append(m.order, pr.id)
	m.wg.Go(func() {
		defer cancel()
		m.run(ctx, pr)
	})
	m.log.Info("adapter proposed", "proposal", pr.id, "adapter", p.Name, "sessionId", pr.session, "generation", pr.generation)
	st := m.statusLocked(pr)
	return &st, nil
}

// over reports whether a proposal in state s is over: nothing more happens to it.
func over(s string) bool { return s == ProposalRefused || s == ProposalFailed || s == ProposalEnded }

// evictLocked forgets the oldest proposal that is over; false when none is.
func (m *proposals) evictLocked() bool {
	for i, id := range m.order {
		if over(m.byID[id].state) {
			delete(m.byID, id)
			m.order = slices.Delete(m.order, i, i+1)
			return true
		}
	}
	return false
}

func (m *proposals) statusLocked(pr *prop) ProposalStatus {
	st := ProposalStatus{ID: pr.id, Name: pr.p.Name, State: pr.state, SessionID: pr.session, Generation: pr.generation,
		Proposal: pr.p, Plan: pr.plan, Error: pr.err, Report: pr.report, CreatedAt: pr.created, UpdatedAt: pr.updated}
	if pr.pub != nil {
		pub := *pr.pub
		st.Publication = &pub
	}
	return st
}

// list returns the proposals of a session generation (every proposal when session is ""),
// oldest first, or only the one whose id is one (unknown_proposal when there is none).
func (m *proposals) list(session string, generation int64, one string) (*ProposalList, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []ProposalStatus{}
	for _, id := range m.order {
		pr := m.byID[id]
		if session != "" && (pr.session != session || pr.generation != generation) {
			continue
		}
		if one != "" && id != one {
			continue
		}
		out = append(out, m.statusLocked(pr))
	}
	if one != "" && len(out) == 0 {
		return nil, protocol.Errorf(proposal.CodeUnknown, "no proposal %s", one)
	}
	return &ProposalList{Proposals: out}, nil
}

// set changes a proposal's state (and error) unless it is over already; it reports whether
// it changed it.
func (m *proposals) set(pr *prop, state string, e *protocol.Error) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if over(pr.state) {
		return false
	}
	pr.state, pr.err, pr.updated = state, e, time.Now().UTC()
	return true
}

func (m *proposals) setPublication(pr *prop, state string, e *protocol.Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pr.pub != nil {
		pr.pub.State, pr.pub.Error = state, e
		pr.updated = time.Now().UTC()
	}
}

// fail ends a proposal in state with e, and logs why (the code, never a file's content).
func (m *proposals) fail(pr *prop, state string, e *protocol.Error) {
	if m.set(pr, state, e) {
		m.log.Info("adapter proposal "+state, "proposal", pr.id, "adapter", pr.p.Name, "code", e.Code)
	}
}

// run is one proposal's flow.
func (m *proposals) run(ctx context.Context, pr *prop) {
	detail, _ := json.Marshal(runDetail{Proposal: pr.id, Name: pr.p.Name, Workspace: pr.plan.Workspace,
		Command: pr.plan.Command, Argv: pr.plan.Args, Files: pr.plan.Files, Capabilities: pr.p.Capabilities,
		LeaseSeconds: pr.p.Lease(), Publish: pr.p.Publish, AgentReason: pr.p.Reason})
	_, err := m.ask.Ask(ctx, approval.Request{Kind: approval.KindRun, Actor: pr.actor, Target: "adapter " + pr.p.Name,
		Reason: proposalReason, Detail: detail, Timeout: proposalApprovalTimeout})
	if err != nil {
		m.refused(ctx, pr, ProposalRefused, err)
		return
	}
	if !m.set(pr, ProposalStarting, nil) {
		return
	}
	m.log.Info("adapter proposal approved to run", "proposal", pr.id, "adapter", pr.p.Name)

	// What the operator approved is what runs: the files are hashed again now, and the
	// supervisor's own digests are compared below.
	if f, changed := pr.plan.Current(); changed {
		m.fail(pr, ProposalFailed, protocol.Errorf(capadapter.CodeAdapterChanged,
			"the %s %s changed after it was proposed; propose it again", f.Role, f.Path))
		return
	}
	vctx, cancel := context.WithTimeout(ctx, proposalValidateTimeout)
	rep := validate.RunCapability(vctx, validate.Config{Command: pr.plan.Command, Args: pr.plan.Args})
	cancel()
	m.mu.Lock()
	pr.report = &rep
	m.mu.Unlock()
	if ctx.Err() != nil {
		m.refused(ctx, pr, ProposalEnded, ctx.Err())
		return
	}
	if !rep.Pass {
		m.fail(pr, ProposalFailed, protocol.Errorf(proposal.CodeValidationFailed, "%d probe(s) of the validator failed: %s", rep.Failed, failedProbes(&rep)))
		return
	}
	for _, c := range pr.p.Capabilities {
		if !slices.ContainsFunc(rep.Descriptors, func(d capadapter.Descriptor) bool { return d.CapabilityID == c }) {
			m.fail(pr, ProposalFailed, protocol.Errorf(proposal.CodeMissingCapability, "the validated adapter serves no capability %q", c))
			return
		}
	}
	if len(rep.Descriptors) != len(pr.p.Capabilities) {
		m.fail(pr, ProposalFailed, protocol.Errorf(proposal.CodeUnvalidated, "the adapter serves %d capabilities; the proposal expects %d", len(rep.Descriptors), len(pr.p.Capabilities)))
		return
	}

	if e := m.register(ctx, pr, rep.Descriptors); e != nil {
		m.fail(pr, ProposalFailed, e)
		return
	}
	if pr.p.Publish == nil {
		m.set(pr, ProposalRunning, nil)
		return
	}
	if !m.set(pr, ProposalPendingPublish, nil) {
		return
	}
	m.publish(ctx, pr, &rep)
}

// refused ends a proposal whose wait ended with err: the operator's denial or timeout, or
// the end of its generation or of the daemon (ctx).
func (m *proposals) refused(ctx context.Context, pr *prop, state string, err error) {
	if ctx.Err() != nil {
		m.fail(pr, ProposalEnded, protocol.Errorf(capclient.ReasonSessionEnded, "the session generation ended, or the daemon stopped, before it ran"))
		return
	}
	m.fail(pr, state, protocol.AsError(err))
}

func failedProbes(rep *validate.Report) string {
	var names []string
	for _, p := range rep.Probes {
		if !p.Pass {
			names = append(names, p.Name)
		}
	}
	return fmt.Sprint(names)
}

// register registers the validated adapter as a temporary adapter of the proposal's
// session generation, and checks that what runs is what was approved and validated: the
// supervisor's digests are the pinned ones, and its descriptors the validated ones. Anything
// else is removed again.
func (m *proposals) register(ctx context.Context, pr *prop, validated []capadapter.Descriptor) *protocol.Error {
	a := m.srv.adapters
	reg := capclient.Registration{Name: pr.p.Name, Command: pr.plan.Command, Args: pr.plan.Args,
		Session: pr.session, Generation: pr.generation,
		LeaseExpires: time.Now().Add(time.Duration(pr.p.Lease()) * time.Second).UTC().Round(time.Millisecond)}
	got, e := a.registerNew(ctx, reg)
	if e != nil {
		return e
	}
	var bad *protocol.Error
	if f, changed := pr.plan.Changed(got.Digests); changed {
		bad = protocol.Errorf(capadapter.CodeAdapterChanged, "the %s %s changed after it was approved; propose it again", f.Role, f.Path)
	} else if e := m.sameDescriptors(validated); e != nil {
		bad = e
	}
	if bad != nil {
		if _, err := a.remove(context.WithoutCancel(ctx), pr.p.Name); err != nil {
			m.log.Error("a proposed adapter that differs from its approval was not removed", "proposal", pr.id, "adapter", pr.p.Name, "err", err)
		}
		return bad
	}
	// From now on a removal of the adapter ends the proposal (adapterRemoved); the removal
	// above is the proposal's own failure.
	m.mu.Lock()
	pr.registered = true
	m.mu.Unlock()
	m.log.Info("proposed adapter registered", "proposal", pr.id, "adapter", pr.p.Name, "sessionId", pr.session, "generation", pr.generation)
	return nil
}

// sameDescriptors checks that the running adapter serves exactly the validated descriptors.
func (m *proposals) sameDescriptors(validated []capadapter.Descriptor) *protocol.Error {
	for _, v := range validated {
		d, err := m.srv.adapters.sup.Describe(v.CapabilityID)
		if err != nil {
			return protocol.Errorf(proposal.CodeUnvalidated, "the running adapter does not serve capability %q, which the validator saw", v.CapabilityID)
		}
		a, _ := json.Marshal(d)
		b, _ := json.Marshal(v)
		if string(a) != string(b) {
			return protocol.Errorf(proposal.CodeUnvalidated, "the running adapter describes capability %q otherwise than the validator saw", v.CapabilityID)
		}
	}
	return nil
}

// publish asks the operator's approval to publish, showing the validator's report and
// descriptors, and publishes exactly the proposal's capabilities and actions, each of which
// the validator saw.
func (m *proposals) publish(ctx context.Context, pr *prop, rep *validate.Report) {
	pub := pr.p.Publish
	for i, c := range pub.Capabilities {
		j := slices.IndexFunc(rep.Descriptors, func(d capadapter.Descriptor) bool { return d.CapabilityID == c.CapabilityID })
		d := rep.Descriptors[j] // Check holds publish to the expected capabilities, which the validator saw
		for _, a := range c.Actions {
			if !slices.ContainsFunc(d.Actions, func(x capadapter.Action) bool { return x.Name == a }) {
				m.publicationOver(pr, "failed", protocol.Errorf(proposal.CodeUnvalidated, "the validator saw no action %q of capability %q", a, c.CapabilityID).
					With("field", fmt.Sprintf("proposal.publish.capabilities[%d].actions", i)))
				return
			}
		}
		if c.Observe && !d.Observe {
			m.publicationOver(pr, "failed", protocol.Errorf(proposal.CodeUnvalidated, "the validator saw no observation of capability %q", c.CapabilityID))
			return
		}
		if len(c.Actions) == 0 && len(d.Actions) > 0 {
			// A publication without actions publishes every action: the proposal names them.
			m.publicationOver(pr, "failed", protocol.Errorf(proposal.CodeInvalid, "name the actions to publish; none publishes every action of the capability").
				With("field", fmt.Sprintf("proposal.publish.capabilities[%d].actions", i)))
			return
		}
	}
	detail, err := json.Marshal(publishDetail{Proposal: pr.id, Name: pr.p.Name, Room: pub.Room, Publish: pub.Capabilities,
		Files: pr.plan.Files, Descriptors: rep.Descriptors, Report: rep})
	if err == nil && len(detail) > approval.MaxDetailBytes {
		// The probes' details are the long part; their names and outcomes stay.
		short := *rep
		short.Probes = slices.Clone(rep.Probes)
		for i := range short.Probes {
			short.Probes[i].Detail = ""
		}
		detail, _ = json.Marshal(publishDetail{Proposal: pr.id, Name: pr.p.Name, Room: pub.Room, Publish: pub.Capabilities,
			Files: pr.plan.Files, Descriptors: rep.Descriptors, Report: &short})
	}
	_, err = m.ask.Ask(ctx, approval.Request{Kind: approval.KindPublish, Actor: pr.actor, Target: "adapter " + pr.p.Name,
		Reason: proposalReason, Detail: detail, Timeout: proposalApprovalTimeout})
	if err != nil {
		if ctx.Err() != nil {
			return // the generation ended: sessionEnded set the state
		}
		m.publicationOver(pr, "refused", protocol.AsError(err))
		return
	}
	// The code that serves now must still be what the validator saw.
	if e := m.sameDescriptors(rep.Descriptors); e != nil {
		m.publicationOver(pr, "failed", e)
		return
	}
	svc := m.srv.rooms.Load()
	if svc == nil {
		m.publicationOver(pr, "failed", protocol.Retryable(capadapter.CodeUnavailable, "the room service is not running"))
		return
	}
	for _, c := range pub.Capabilities {
		if _, err := svc.Publish(ctx, roomhost.Publish{Room: pub.Room, Capability: c.CapabilityID, Actions: c.Actions, Observe: c.Observe}); err != nil {
			m.publicationOver(pr, "failed", protocol.AsError(err))
			return
		}
	}
	m.setPublication(pr, "published", nil)
	m.set(pr, ProposalPublished, nil)
	m.log.Info("proposed adapter published", "proposal", pr.id, "adapter", pr.p.Name, "room", pub.Room)
}

// publicationOver ends the publication step: the adapter keeps running for the session.
func (m *proposals) publicationOver(pr *prop, state string, e *protocol.Error) {
	m.setPublication(pr, state, e)
	m.set(pr, ProposalRunning, nil)
	m.log.Info("adapter proposal's publication "+state, "proposal", pr.id, "adapter", pr.p.Name, "code", e.Code)
}

// sessionEnded is part of the session manager's GenerationEnded hook: the flows of the
// proposals of generation (and older ones) of session id end, and those proposals are over.
// Their adapters, tied to the generation, are removed by adapterHost.sessionEnded.
func (m *proposals) sessionEnded(id string, generation int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pr := range m.byID {
		if pr.session != id || pr.generation > generation || over(pr.state) {
			continue
		}
		m.endLocked(pr, protocol.Errorf(capclient.ReasonSessionEnded, "the session generation ended"))
	}
}

// endLocked ends a proposal that is not over with e: its flow stops, and a publication it
// made or still asked for is withdrawn with its adapter (it said published after the room
// had lost it). m.mu is held.
func (m *proposals) endLocked(pr *prop, e *protocol.Error) {
	pr.state, pr.err, pr.updated = ProposalEnded, e, time.Now().UTC()
	if pr.pub != nil && (pr.pub.State == "pending" || pr.pub.State == "published") {
		pr.pub.State = "withdrawn"
	}
	pr.cancel()
}

// adapterRemoved is an OnAdapterRemoved hook: a proposal whose adapter was removed is over.
func (m *proposals) adapterRemoved(r capclient.Removal) {
	if r.Reason == capclient.ReasonReplaced {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pr := range m.byID {
		if !pr.registered || over(pr.state) || pr.p.Name != r.Registration.Name || pr.session != r.Registration.Session ||
			pr.generation != r.Registration.Generation {
			continue
		}
		m.endLocked(pr, protocol.Errorf(r.Reason, "its adapter was removed: %s", r.Reason))
	}
}

// registerNew registers reg as registerAdapter does, but only under a name that no adapter
// holds: a proposal never replaces a registration.
func (a *adapterHost) registerNew(ctx context.Context, reg capclient.Registration) (capclient.Registration, *protocol.Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.status(reg.Name); taken {
		return capclient.Registration{}, protocol.Errorf(proposal.CodeNameTaken, "an adapter named %q is registered already", reg.Name)
	}
	if _, err := a.sessions.Session(reg.Session, reg.Generation, true); err != nil {
		return capclient.Registration{}, protocol.AsError(err)
	}
	got, err := a.sup.Register(ctx, reg)
	if err != nil {
		return capclient.Registration{}, adapterError(err, false)
	}
	st, _ := a.status(got.Name)
	rec := toStore(got, st.Capabilities)
	if err := a.store.PutRegistration(rec); err != nil {
		a.sup.Remove(context.WithoutCancel(ctx), got.Name)
		return capclient.Registration{}, protocol.AsError(err)
	}
	a.record(rec)
	return got, nil
}

// runProposals serves proposeAdapter and listProposals.
func (s *Server) runProposals(c *conn, cmd *protocol.Command) (any, error) {
	switch cmd.Operation {
	case protocol.OpProposeAdapter:
		var p protocol.ProposeAdapterPayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		if e := s.sessions.Admitting(); e != nil {
			return nil, e
		}
		return s.proposals.propose(s.actor(c, cmd), p.Proposal)
	default:
		var p protocol.ListProposalsPayload
		if e := decodeValid(cmd, &p); e != nil {
			return nil, e
		}
		if cmd.HasSession && !cmd.HasGeneration {
			return nil, protocol.Errorf(protocol.CodeInvalidField, "listProposals of a session names its generation").With("field", "generation")
		}
		return s.proposals.list(cmd.SessionID, cmd.Generation, p.ID)
	}
}

// proposalTools are the proposal tools of an agent turn of a session generation whose policy
// allows proposals (session.Config.HostTools).
type proposalTools struct {
	srv        *Server
	id         string
	generation int64
}

var _ turn.HostTools = (*proposalTools)(nil)

// proposalTools returns the turn's proposal tools, nil when rules do not allow proposals.
func (s *Server) proposalTools(id string, generation int64, rules *policy.Policy) turn.HostTools {
	if !rules.AllowsProposals() || s.gate.Host().DeniesProposals() {
		return nil
	}
	return &proposalTools{srv: s, id: id, generation: generation}
}

// Tools lists adapter_propose and adapter_proposals.
func (t *proposalTools) Tools() []model.Tool {
	in, _ := json.Marshal(proposal.InputSchema())
	st, _ := json.Marshal(proposal.StatusSchema())
	return []model.Tool{
		{Name: proposal.ToolPropose, Description: proposal.ProposeDescription, Parameters: in},
		{Name: proposal.ToolStatus, Description: proposal.StatusDescription, Parameters: st},
	}
}

// Call files a proposal, or lists them, for the turn's session generation.
func (t *proposalTools) Call(_ context.Context, name string, args json.RawMessage) (json.RawMessage, *protocol.Error) {
	var data any
	var err error
	switch name {
	case proposal.ToolPropose:
		if e := t.srv.sessions.Admitting(); e != nil {
			return nil, e
		}
		actor := gate.Actor{Door: gate.DoorTurn, UID: t.srv.ownerUID, Session: t.id, Generation: t.generation}
		data, err = t.srv.proposals.propose(actor, args)
	default:
		var p protocol.ListProposalsPayload
		if e := protocol.DecodePayload(&protocol.Command{Payload: args}, &p); e != nil {
			return nil, e
		}
		if e := p.Validate(); e != nil {
			return nil, e
		}
		data, err = t.srv.proposals.list(t.id, t.generation, p.ID)
	}
	if err != nil {
		return nil, protocol.AsError(err)
	}
	out, merr := json.Marshal(data)
	if merr != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "the proposal is not serializable")
	}
	return out, nil
}
