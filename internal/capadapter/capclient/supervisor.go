package capclient

// This file owns the Supervisor: its registrations and their capabilities, Register, Restore,
// Remove and Close, and the calls it routes to the child that owns a capability.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// Restart policy defaults.
const (
	// DefaultBackoffMin is the first restart delay after a crash: long enough that a crash
	// loop costs little, short enough that a one-off crash is barely noticed.
	DefaultBackoffMin = 250 * time.Millisecond
	// DefaultBackoffMax caps the doubling delay, so a recovered dependency (a device back on
	// the network) is picked up within half a minute.
	DefaultBackoffMax = 30 * time.Second
	// DefaultHealthyAfter is how long a child must run before a crash no longer counts
	// against it: the next delay starts from DefaultBackoffMin again.
	DefaultHealthyAfter = time.Minute
	// DefaultMaxRestartFailures is how many consecutive unhealthy starts (failed handshakes or
	// crashes before DefaultHealthyAfter) the supervisor tries before it marks the adapter
	// failed and stops restarting it: with the default delays, about five minutes.
	DefaultMaxRestartFailures = 16
)

// State is an adapter's lifecycle state.
type State string

const (
	StateStarting State = "starting" // a child is being started and validated
	StateReady    State = "ready"    // a validated child serves the capabilities
	StateBackoff  State = "backoff"  // the child died; a restart is scheduled
	StateStopped  State = "stopped"  // removed or the supervisor closed
	StateFailed   State = "failed"   // restarts gave up; register again to retry
	StateChanged  State = "changed"  // its executable or script changed; approve it to start it
)

// Options tune a Supervisor. The zero value uses the defaults.
type Options struct {
	// CallTimeout is the deadline of each observe or invoke; StartTimeout bounds each start
	// (the handshake). Zero means the default; both must lie within [MinCallTimeout,
	// MaxCallTimeout].
	CallTimeout  time.Duration
	StartTimeout time.Duration
	// BackoffMin, BackoffMax, HealthyAfter and MaxRestartFailures shape restarts after a
	// crash; zero means the default. BackoffMin must lie within [1 ms, 1 min] and BackoffMax
	// within [BackoffMin, 10 min].
	BackoffMin         time.Duration
	BackoffMax         time.Duration
	HealthyAfter       time.Duration
	MaxRestartFailures int
	// Children, when set, records every child's process group (ClientOptions.Children).
	Children ChildRecorder
}

func (o Options) withDefaults() (Options, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.CallTimeout, DefaultCallTimeout)
	def(&o.StartTimeout, DefaultStartTimeout)
	def(&o.BackoffMin, DefaultBackoffMin)
	def(&o.BackoffMax, DefaultBackoffMax)
	def(&o.HealthyAfter, DefaultHealthyAfter)
	if o.MaxRestartFailures == 0 {
		o.MaxRestartFailures = DefaultMaxRestartFailures
	}
	switch {
	case o.CallTimeout < MinCallTimeout || o.CallTimeout > MaxCallTimeout,
		o.StartTimeout < MinCallTimeout || o.StartTimeout > MaxCallTimeout:
		return o, fmt.Errorf("capadapter: call and start timeouts must lie within [%v, %v]", MinCallTimeout, MaxCallTimeout)
	case o.BackoffMin < time.Millisecond || o.BackoffMin > time.Minute,
		o.BackoffMax < o.BackoffMin || o.BackoffMax > 10*time.Minute:
		return o, fmt.Errorf("capadapter: backoff must satisfy 1ms ≤ min ≤ 1m and min ≤ max ≤ 10m")
	case o.HealthyAfter < 0 || o.MaxRestartFailures < 0:
		return o, fmt.Errorf("capadapter: negative restart policy")
	}
	return o, nil
}

// instance is one running adapter child as the supervisor sees it; *Client is the real one.
type instance interface {
	PID() int
	Descriptors() []capadapter.Descriptor
	canonical() [][]byte
	Done() <-chan struct{}
	Failure() error
	startResult(ctx context.Context, req capadapter.Request, done func(json.RawMessage, error)) // see Client.StartObserve
	Close(ctx context.Context) error
}

// spawnFunc starts and validates one child within ctx.
type spawnFunc func(ctx context.Context, reg Registration, log *logRing) (instance, error)

// CapabilitySummary is one capability as List shows it.
type CapabilitySummary struct {
	CapabilityID string   `json:"capabilityId"`
	Title        string   `json:"title"`
	Version      string   `json:"version"`
	Observe      bool     `json:"observe"`
	Actions      []string `json:"actions"`
	Adapter      string   `json:"adapter"`
	// Available is whether its adapter is ready and its latest calls did not all end
	// unavailable (see UnavailableAfter); when it is false, UnavailableReason says which.
	Available         bool   `json:"available"`
	UnavailableReason string `json:"unavailableReason,omitempty"`
}

// AdapterStatus is one registration's state, for the operator.
type AdapterStatus struct {
	Name         string   `json:"name"`
	Command      string   `json:"command"`
	Args         []string `json:"args"`
	State        State    `json:"state"`
	PID          int      `json:"pid,omitempty"`
	Restarts     int      `json:"restarts"`
	LastFailure  string   `json:"lastFailure,omitempty"`
	Capabilities []string `json:"capabilities"`

	// UnavailableCapabilities are those of Capabilities whose last UnavailableAfter calls
	// ended unavailable (List shows them unavailable, UnavailableCalls).
	UnavailableCapabilities []string `json:"unavailableCapabilities,omitempty"`
	// PassEnv are the names of the variables passed from the daemon's environment (see
	// Registration.PassEnv), never their values.
	PassEnv []string `json:"passEnv,omitempty"`
	// PassEnvUnset are those of PassEnv that the daemon's environment does not set now: the
	// adapter starts without them (a variable exported to the operator's shell but not to
	// the daemon's service, say).
	PassEnvUnset []string `json:"passEnvUnset,omitempty"`

	// The ties and lease of a temporary adapter (see Registration).
	Room         string    `json:"room,omitempty"`
	Session      string    `json:"sessionId,omitempty"`
	Generation   int64     `json:"generation,omitempty"`
	LeaseExpires time.Time `json:"leaseExpiresAt,omitzero"`
	// Digests shows the recorded digests by prefix, and while the state is changed what the
	// files hash to now.
	Digests []DigestStatus `json:"digests"`

	// Withheld counts the results withheld since the registration was installed: observe and
	// invoke results that failed a screen (capadapter.CodeResultWithheld), each withheld from
	// its caller while the child served on. LastWithheld describes the latest.
	Withheld     int           `json:"withheld,omitempty"`
	LastWithheld *WithheldCall `json:"lastWithheld,omitempty"`
}

// WithheldCall describes a call whose result was withheld, for the operator: which
// capability, which call, which screen. It never holds the result, its text or the call's
// arguments.
type WithheldCall struct {
	CapabilityID string    `json:"capabilityId"`
	Method       string    `json:"method"`           // observe or invoke
	Action       string    `json:"action,omitempty"` // the invoke's action
	Screen       string    `json:"screen"`           // one of the capadapter.Screen constants
	At           time.Time `json:"at"`
}

// adapter is one registration. Its descriptors are fixed when it registers; the fields after
// mu-guarded are guarded by Supervisor.mu.
type adapter struct {
	reg    Registration
	log    *logRing
	descs  []capadapter.Descriptor
	canon  [][]byte
	ctx    context.Context // cancelled to stop the monitor
	cancel context.CancelFunc
	done   chan struct{} // closed when the monitor returns

	// mu-guarded
	state       State
	inst        instance // the serving child while ready
	pid         int
	restarts    int
	lastFailure string
	current     []FileDigest // while changed: the digests the files have now
	withheld    int
	last        *WithheldCall // the latest withheld result

	// hmu guards failing; it is a leaf lock, taken under Supervisor.mu or alone (by a call's
	// done, on whichever goroutine ends the call).
	hmu     sync.Mutex
	failing map[string]int // capability id → its run of unavailable calls, capped at UnavailableAfter
}

// Supervisor runs many adapters, each under a registration name, and routes capability
// operations to them by capability id. Capability ids are unique across the Supervisor.
// All methods are safe for concurrent use.
//
// Lifecycle: Register starts and validates a child before it returns; a child that dies is
// restarted with exponential backoff while its capabilities report unavailable; Remove and
// Close stop children and reap them. Register, Remove and Close are serialized.
type Supervisor struct {
	opts  Options
	spawn spawnFunc

	life sync.Mutex // serializes Register, Remove and Close

	mu         sync.Mutex
	adapters   map[string]*adapter
	owners     map[string]*adapter // capability id → its adapter
	failedLogs map[string]*logRing // stderr of the last failed registration per unregistered name
	closed     bool
	hooks      []func(Removal)
	changed    []func(Registration) // OnChanged hooks
	leases     leaseLoop
}

// New returns a Supervisor with no adapters.
func New(opts Options) (*Supervisor, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{
		opts:       opts,
		adapters:   map[string]*adapter{},
		owners:     map[string]*adapter{},
		failedLogs: map[string]*logRing{},
	}
	s.spawn = s.startChild
	s.leases.init()
	return s, nil
}

func (s *Supervisor) startChild(ctx context.Context, reg Registration, log *logRing) (instance, error) {
	c, err := Start(ctx, reg.Command, reg.Args, ClientOptions{CallTimeout: s.opts.CallTimeout, PassEnv: reg.PassEnv, Children: s.opts.Children, log: log})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Register validates reg (see NormalizeRegistration), starts its adapter and validates it
// (the handshake, within the start timeout and ctx), checks that no other registration owns
// its capability ids, and only then installs it, replacing any registration of the same
// name: the old child is stopped and reaped before Register returns. It returns the
// normalized registration, which is what the caller should persist, and only after success.
// A failed Register changes nothing; the stderr of its child stays readable through Logs.
//
// Register records the SHA-256 of the command and of its script (see ScriptPath) in the
// returned registration. When a registration of the same name exists and a file it recorded
// (same role and path) now hashes differently, Register fails with adapter_changed and changes
// nothing: only Approve accepts changed code. A lease that has already ended is lease_expired;
// a lease beyond MaxLease is invalid_registration.
func (s *Supervisor) Register(ctx context.Context, reg Registration) (Registration, error) {
	return s.register(ctx, reg, modeRegister)
}

// Restore installs a registration persisted earlier, at daemon startup. It is Register,
// except that a failure to start (or a capability conflict) does not refuse the
// registration: it is installed in state backoff and restarted like a crashed adapter,
// adopting its descriptors at its first successful start. Restore fails only for an invalid
// registration, a closed or full supervisor, and an ended lease (lease_expired).
//
// The files are checked against reg.Digests first: when one changed, the registration is
// installed in state changed and not started until Approve. A registration without digests
// (stored before they existed) has them recorded now, in the returned registration, which the
// caller should persist.
func (s *Supervisor) Restore(ctx context.Context, reg Registration) (Registration, error) {
	return s.register(ctx, reg, modeRestore)
}

// registerMode says which of Register, Restore and Approve a register call serves.
type registerMode int

const (
	modeRegister registerMode = iota
	modeRestore
	modeApprove
)

func (s *Supervisor) register(ctx context.Context, reg Registration, mode registerMode) (Registration, error) {
	norm, err := NormalizeRegistration(reg)
	if err != nil {
		return Registration{}, err
	}
	if !norm.LeaseExpires.IsZero() {
		if !time.Now().Before(norm.LeaseExpires) {
			return Registration{}, newError(capadapter.CodeLeaseExpired, fmt.Sprintf("the lease of adapter %q has ended", norm.Name))
		}
		if mode == modeRegister && time.Until(norm.LeaseExpires) > MaxLease {
			return Registration{}, invalidRegistration("a lease is at most 30 days")
		}
	}
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	closed, full := s.closed, s.adapters[norm.Name] == nil && len(s.adapters) >= MaxAdapters
	s.mu.Unlock()
	switch {
	case closed:
		return Registration{}, newError(capadapter.CodeUnavailable, "the supervisor is closed")
	case full:
		return Registration{}, newError(capadapter.CodeTooManyAdapters, fmt.Sprintf("the supervisor already runs %d adapters", MaxAdapters))
	}

	current, derr := fileDigests(norm)
	changed := false
	switch mode {
	case modeRegister, modeApprove:
		if derr != nil {
			return Registration{}, invalidRegistration("cannot hash the command or its script: " + derr.Error())
		}
		s.mu.Lock()
		old := s.adapters[norm.Name]
		s.mu.Unlock()
		if old != nil && mode == modeRegister {
			if d, bad := conflictingDigest(old.reg.Digests, current); bad {
				return Registration{}, newError(capadapter.CodeAdapterChanged, fmt.Sprintf(
					"the %s %s of adapter %q changed since it was approved; approve it with airlock adapter approve", d.Role, d.Path, norm.Name))
			}
		}
		norm.Digests = current
	case modeRestore:
		if len(norm.Digests) == 0 && derr == nil {
			norm.Digests = current // a registration stored before digests existed
		} else if !sameDigests(norm.Digests, current) {
			changed = true
		}
	}

	log := newLogRing()
	var inst instance
	if changed {
		err = newError(capadapter.CodeAdapterChanged, fmt.Sprintf("the executable or script of adapter %q changed since it was approved", norm.Name))
	} else {
		sctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
		inst, err = s.spawn(sctx, norm, log)
		cancel()
	}
	var descs []capadapter.Descriptor
	if err == nil {
		descs = inst.Descriptors()
		s.mu.Lock()
		for _, d := range descs {
			if owner := s.owners[d.CapabilityID]; owner != nil && owner.reg.Name != norm.Name {
				err = newError(capadapter.CodeCapabilityConflict, fmt.Sprintf("capability %q belongs to adapter %q", d.CapabilityID, owner.reg.Name))
				break
			}
		}
		s.mu.Unlock()
		if err != nil {
			_ = inst.Close(context.WithoutCancel(ctx))
			inst, descs = nil, nil
		}
	}
	if err != nil && mode != modeRestore {
		s.mu.Lock()
		if s.adapters[norm.Name] == nil {
			if len(s.failedLogs) >= MaxAdapters { // keep the bound: forget an older failure
				for k := range s.failedLogs {
					delete(s.failedLogs, k)
					break
				}
			}
			s.failedLogs[norm.Name] = log
		}
		s.mu.Unlock()
		return Registration{}, err
	}

	s.mu.Lock()
	old := s.adapters[norm.Name]
	s.mu.Unlock()
	if old != nil {
		// The hooks withdraw what the old registration was trusted with before the new
		// code serves its capabilities.
		s.notify(removalOf(old, ReasonReplaced))
	}

	actx, acancel := context.WithCancel(context.Background())
	a := &adapter{reg: norm, log: log, ctx: actx, cancel: acancel, done: make(chan struct{}), state: StateBackoff}
	switch {
	case inst != nil:
		a.descs, a.canon = descs, inst.canonical()
		a.state, a.inst, a.pid = StateReady, inst, inst.PID()
	case changed:
		a.state, a.lastFailure, a.current = StateChanged, capadapter.CodeAdapterChanged, current
		log.note("not started: its executable or script changed since it was approved; approve it to start it")
	default:
		a.lastFailure = capadapter.CodeOf(err)
		log.note("start failed (" + a.lastFailure + "); retrying with backoff")
	}
	s.mu.Lock()
	if old != nil { // life is held: s.adapters[norm.Name] is still old
		for _, d := range old.descs {
			if s.owners[d.CapabilityID] == old {
				delete(s.owners, d.CapabilityID)
			}
		}
		old.cancel()
	}
	for _, d := range descs {
		s.owners[d.CapabilityID] = a
	}
	s.adapters[norm.Name] = a
	delete(s.failedLogs, norm.Name)
	s.mu.Unlock()

	if changed {
		close(a.done) // nothing to monitor until Approve
		s.notifyChanged(norm)
	} else {
		go s.monitor(a, inst)
	}
	if !norm.LeaseExpires.IsZero() {
		s.leases.wake(s)
	}
	if old != nil {
		s.stopAdapter(context.WithoutCancel(ctx), old)
	}
	return norm, nil
}

// Remove stops the adapter registered as name and reaps its child. ctx bounds the graceful
// part of the stop; the child is killed when it ends. The removal hooks are told, with reason
// ReasonRemoved, once its capabilities no longer route to it and before its child stops.
func (s *Supervisor) Remove(ctx context.Context, name string) error {
	return s.RemoveBecause(ctx, name, ReasonRemoved)
}

// RemoveBecause is Remove, telling the removal hooks reason instead.
func (s *Supervisor) RemoveBecause(ctx context.Context, name, reason string) error {
	return s.remove(ctx, name, reason, nil)
}

// remove stops and forgets name; when only is set, only if name still holds that adapter.
func (s *Supervisor) remove(ctx context.Context, name, reason string, only *adapter) error {
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	a := s.adapters[name]
	if a == nil || (only != nil && a != only) {
		s.mu.Unlock()
		return newError(capadapter.CodeUnknownAdapter, fmt.Sprintf("no adapter is registered as %q", name))
	}
	delete(s.adapters, name)
	for _, d := range a.descs {
		if s.owners[d.CapabilityID] == a {
			delete(s.owners, d.CapabilityID)
		}
	}
	a.cancel() // under mu: a monitor that is adopting a child sees it
	s.mu.Unlock()
	s.notify(removalOf(a, reason)) // before the child stops
	s.stopAdapter(ctx, a)
	return nil
}

// Close stops every adapter, concurrently, and reaps every child; later operations fail with
// unavailable. The daemon calls it at shutdown; registrations stay persisted by the caller.
// ctx bounds the graceful part of each stop (see Client.Close); a child still not reaped when
// its stop gives up (one stuck in the kernel even after SIGKILL) makes Close return a timeout
// *capadapter.Error naming the adapters concerned, after every stop has ended.
func (s *Supervisor) Close(ctx context.Context) error {
	s.leases.stop() // before life: an expiry in progress takes it
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	s.closed = true
	all := make([]*adapter, 0, len(s.adapters))
	for _, a := range s.adapters {
		a.cancel()
		all = append(all, a)
	}
	clear(s.adapters)
	clear(s.owners)
	s.mu.Unlock()
	unreaped := make([]string, len(all))
	var wg sync.WaitGroup
	for i, a := range all {
		wg.Go(func() {
			if !s.stopAdapter(ctx, a) {
				unreaped[i] = a.reg.Name
			}
		})
	}
	wg.Wait()
	unreaped = slices.DeleteFunc(unreaped, func(n string) bool { return n == "" })
	if len(unreaped) == 0 {
		return nil
	}
	sort.Strings(unreaped)
	return newError(capadapter.CodeTimeout, fmt.Sprintf("the children of adapters %q were not reaped in time", unreaped))
}

// stopAdapter stops a's monitor, then stops and reaps its child. It reports whether the
// child, if any, was reaped.
func (s *Supervisor) stopAdapter(ctx context.Context, a *adapter) bool {
	a.cancel()
	<-a.done
	s.mu.Lock()
	inst := a.inst
	a.inst, a.state, a.pid = nil, StateStopped, 0
	s.mu.Unlock()
	if inst == nil {
		a.log.note("stopped")
		return true
	}
	_ = inst.Close(ctx) // waits, bounded, for the child to be reaped
	select {
	case <-inst.Done():
		a.log.note("stopped")
		return true
	default:
		a.log.note("stopped, but the child was not reaped in time")
		return false
	}
}

func (s *Supervisor) setState(a *adapter, st State) {
	s.mu.Lock()
	a.state = st
	s.mu.Unlock()
}

// lookup returns the adapter owning capability id, its descriptor and its serving child (nil
// while not ready).
func (s *Supervisor) lookup(id string) (*adapter, capadapter.Descriptor, instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, capadapter.Descriptor{}, nil, newError(capadapter.CodeUnavailable, "the supervisor is closed")
	}
	a := s.owners[id]
	if a == nil {
		return nil, capadapter.Descriptor{}, nil, newError(capadapter.CodeUnknownCapability, "no adapter serves this capability")
	}
	for _, d := range a.descs {
		if d.CapabilityID == id {
			var inst instance
			if a.state == StateReady {
				inst = a.inst
			}
			return a, d, inst, nil
		}
	}
	return nil, capadapter.Descriptor{}, nil, newError(capadapter.CodeUnknownCapability, "no adapter serves this capability")
}

func unavailableAdapter(a *adapter) *capadapter.Error {
	return newError(capadapter.CodeUnavailable, fmt.Sprintf("adapter %q is not ready", a.reg.Name))
}

// List returns every capability in capability id order, with whether it is available: its
// adapter is ready and its last UnavailableAfter calls did not all end unavailable.
func (s *Supervisor) List() []CapabilitySummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CapabilitySummary, 0, len(s.owners))
	for _, a := range s.adapters {
		for _, d := range a.descs {
			names := make([]string, 0, len(d.Actions))
			for _, act := range d.Actions {
				names = append(names, act.Name)
			}
			why := a.unavailableReasonLocked(d.CapabilityID)
			out = append(out, CapabilitySummary{
				CapabilityID: d.CapabilityID, Title: d.Title, Version: d.Version, Observe: d.Observe,
				Actions: names, Adapter: a.reg.Name, Available: why == "", UnavailableReason: why,
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CapabilityID < out[j].CapabilityID })
	return out
}

// Describe returns the validated descriptor of capability id, whether or not its adapter is
// ready (List tells which); unknown_capability when no adapter serves it.
func (s *Supervisor) Describe(id string) (capadapter.Descriptor, error) {
	_, d, _, err := s.lookup(id)
	return d, err
}

// Ready reports whether capability id's adapter is ready to serve it. List's Available also
// weighs the capability's latest calls (see UnavailableReason).
func (s *Supervisor) Ready(id string) bool {
	_, _, inst, err := s.lookup(id)
	return err == nil && inst != nil
}

// Observe returns capability id's observation: bounded semantic data (see checkResult).
// It fails with unknown_capability, unsupported_method when the capability does not observe,
// unavailable while its adapter is not ready, or the call's own error: result_withheld for an
// observation that fails a screen, which is noted in the adapter's log and status while its
// child serves on.
func (s *Supervisor) Observe(ctx context.Context, id string) (json.RawMessage, error) {
	return await(func(done func(json.RawMessage, error)) { s.StartObserve(ctx, id, done) })
}

// StartObserve is Observe without the wait: done receives exactly what Observe would return,
// exactly once, before StartObserve returns when the call is refused, else on the goroutine
// that ends it (see Client.StartObserve, whose rules done must follow). No lock of s is held
// when done runs.
func (s *Supervisor) StartObserve(ctx context.Context, id string, done func(json.RawMessage, error)) {
	a, d, inst, err := s.lookup(id)
	switch {
	case err != nil:
		done(nil, err)
	case !d.Observe:
		done(nil, newError(capadapter.CodeUnsupportedMethod, "this capability does not observe"))
	case inst == nil:
		done(nil, unavailableAdapter(a))
	default:
		req := capadapter.Request{Method: capadapter.MethodObserve, CapabilityID: id}
		inst.startResult(ctx, req, s.noteWithheld(a, req, a.track(ctx, id, done)))
	}
}

// noteWithheld returns done, recording first for the operator a result_withheld outcome of req
// on a's child: a line in a's log and its status (see WithheldCall). The line names the
// capability, the call and the screen, never the result.
func (s *Supervisor) noteWithheld(a *adapter, req capadapter.Request, done func(json.RawMessage, error)) func(json.RawMessage, error) {
	return func(raw json.RawMessage, err error) {
		if e, ok := err.(*capadapter.Error); ok && e.Code == capadapter.CodeResultWithheld {
			w := &WithheldCall{CapabilityID: req.CapabilityID, Method: req.Method, Action: req.Action, Screen: e.Screen, At: time.Now().UTC()}
			call := req.Method
			if req.Action != "" {
				call += " " + req.Action
			}
			a.log.note(fmt.Sprintf("result withheld: capability %s, %s: the result failed the %s screen; the adapter keeps running",
				req.CapabilityID, call, e.Screen))
			s.mu.Lock()
			a.withheld++
			a.last = w
			s.mu.Unlock()
		}
		done(raw, err)
	}
}

// Invoke runs action on capability id with args. Before the child is called, the action must
// be declared (else unsupported_action) and args must satisfy its input (else too_large or
// invalid_args, see capadapter.ValidateArgs).
func (s *Supervisor) Invoke(ctx context.Context, id, action string, args json.RawMessage) (json.RawMessage, error) {
	return await(func(done func(json.RawMessage, error)) { s.StartInvoke(ctx, id, action, args, done) })
}

// StartInvoke is Invoke without the wait, as StartObserve is Observe without it.
func (s *Supervisor) StartInvoke(ctx context.Context, id, action string, args json.RawMessage, done func(json.RawMessage, error)) {
	a, d, inst, err := s.lookup(id)
	if err != nil {
		done(nil, err)
		return
	}
	act, ok := d.Action(action)
	if !ok {
		done(nil, newError(capadapter.CodeUnsupportedAction, "the capability declares no such action"))
		return
	}
	if err := capadapter.ValidateArgs(act.Input, args); err != nil {
		done(nil, err)
		return
	}
	if inst == nil {
		done(nil, unavailableAdapter(a))
		return
	}
	req := capadapter.Request{Method: capadapter.MethodInvoke, CapabilityID: id, Action: action, Args: args}
	inst.startResult(ctx, req, s.noteWithheld(a, req, a.track(ctx, id, done)))
}

// Status returns every registration's state in name order.
func (s *Supervisor) Status() []AdapterStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]AdapterStatus, 0, len(s.adapters))
	for _, a := range s.adapters {
		ids := make([]string, 0, len(a.descs))
		var failing []string
		for _, d := range a.descs {
			ids = append(ids, d.CapabilityID)
			if a.callsUnavailable(d.CapabilityID) {
				failing = append(failing, d.CapabilityID)
			}
		}
		out = append(out, AdapterStatus{
			Name: a.reg.Name, Command: a.reg.Command, Args: append([]string{}, a.reg.Args...),
			PassEnv: slices.Clone(a.reg.PassEnv), UnavailableCapabilities: failing, State: a.state, PID: a.pid, Restarts: a.restarts, LastFailure: a.lastFailure, Capabilities: ids,
			Room: a.reg.Room, Session: a.reg.Session, Generation: a.reg.Generation, LeaseExpires: a.reg.LeaseExpires,
			Digests: digestStatus(a.reg.Digests, a.current), Withheld: a.withheld, PassEnvUnset: unsetEnv(a.reg.PassEnv),
		})
		if a.last != nil {
			last := *a.last
			out[len(out)-1].LastWithheld = &last
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// unsetEnv returns the names of names this process's environment does not set.
func unsetEnv(names []string) []string {
	var out []string
	for _, n := range names {
		if _, ok := os.LookupEnv(n); !ok {
			out = append(out, n)
		}
	}
	return out
}

// Registrations returns the current registrations in name order, with their recorded
// digests.
func (s *Supervisor) Registrations() []Registration {
	s.mu.Lock()
	out := make([]Registration, 0, len(s.adapters))
	for _, a := range s.adapters {
		r := a.reg
		r.Args, r.Digests, r.PassEnv = slices.Clone(r.Args), slices.Clone(r.Digests), slices.Clone(r.PassEnv)
		out = append(out, r)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Logs returns the kept stderr lines of the adapter registered as name (or of its last
// failed registration), oldest first. They are for the operator only: never project them.
func (s *Supervisor) Logs(name string) ([]string, error) {
	s.mu.Lock()
	var ring *logRing
	if a := s.adapters[name]; a != nil {
		ring = a.log
	} else {
		ring = s.failedLogs[name]
	}
	s.mu.Unlock()
	if ring == nil {
		return nil, newError(capadapter.CodeUnknownAdapter, fmt.Sprintf("no adapter is registered as %q", name))
	}
	return ring.snapshot(), nil
}
