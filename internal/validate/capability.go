// Package validate is the conformance harness behind `airlock validate capability`: it runs
// a capability adapter under test through the probes of protocol v1, and runs built-in
// misbehaving adapters to show that the runtime (capclient.Client) rejects each fault.
//
// The harness is stricter than the original validator: besides list, describe, observe and a
// known-valid invoke it checks unsupported_action, unknown_capability, invalid_args generated
// from the descriptor, the handling of a wrong protocolVersion, unsupported_method, the call
// deadline, the frame and payload bounds, the sensitive-name and URL screens of descriptors
// and results, and a clean exit on stdin close. Every child it starts is reaped before
// RunCapability returns.
//
// It fails only what the runtime would refuse. A descriptor that fails a screen is refused
// (the adapter does not register); an observe or invoke result that fails one is not: the
// runtime withholds that result from its caller (result_withheld) and the adapter serves on.
// Such a result passes its probe with a warning that names the call, the screen and what was
// found, so that an author whose adapter echoes caller text learns to screen it.
//
// The invoke and invalid_args probes call the adapter's actions (invalid_args with generated
// args that a conforming adapter refuses, but a lax one may act on): validate an adapter
// against a test device, not one in use.
//
// Two probes ask more of an adapter than the runtime needs today, as defence in depth: the
// runtime checks both before a request reaches an adapter, but an adapter must not rely on
// whoever talks to it having done so.
//   - A wrong protocolVersion: following the reference adapter, the expected answer is
//     invalid_request in a version 1 envelope carrying the request's id, after which the
//     adapter keeps serving; exiting without an answer is also accepted, since the runtime
//     then discards the child. An invalid_request carrying another id (Free4Chat's CUPS
//     adapter answers with the id "invalid") passes with a warning: the protocol does not
//     define that case and the runtime never sends a wrong version, and a validator fails
//     only what the runtime would refuse.
//   - Invoke args that break the declared input (a required property missing, one of the
//     wrong type, an undeclared key) must be answered invalid_args.
//
// Every failure names the request the harness sent (requestText), arguments included.
//
// Probes talk to the adapter through capclient.Client, the runtime's own client, so an
// adapter that passes is one the runtime accepts; where the harness needs the raw result (the
// screens), it checks it itself and also asks the runtime.
package validate

// This file owns the run of the capability harness: the probe names, the configuration, the
// report both harnesses fill, the harness's state and the order of its probes, the calls it
// makes through the runtime's client and how their errors read, and the reaping of every child.
// capabilityprobes.go owns the probes.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
)

// Probe names, in report order.
const (
	ProbeList              = "list"
	ProbeDescribe          = "describe"
	ProbeObserve           = "observe"
	ProbeInvoke            = "invoke"
	ProbeUnsupportedAction = "unsupported_action"
	ProbeUnknownCapability = "unknown_capability"
	ProbeInvalidArgs       = "invalid_args"
	ProbeProtocolVersion   = "protocol_version"
	ProbeUnsupportedMethod = "unsupported_method"
	ProbeDeadline          = "deadline"
	ProbeBounds            = "bounds"
	ProbeScreens           = "screens"
	ProbeStdinClose        = "stdin_close"
)

// StdinCloseBound is how long an adapter has to exit with status 0 once its stdin closes:
// the runtime's graceful wait, after which it signals the process group.
const StdinCloseBound = 300 * time.Millisecond

// Names the probes send on purpose, none of which a valid descriptor can declare for real
// (the capability id has a dot and a dash, which no adapter is likely to use; the harness
// checks that the listed ids and actions differ from them anyway).
const (
	probeAction     = "airlock_unsupported_probe"
	probeCapability = "airlock.unknown-probe"
	probeMethod     = "airlock_unknown_method"
	probeProperty   = "airlock_undeclared_probe"
	probeVersion    = 2
)

// Config is one run of the harness.
type Config struct {
	// Command and Args start the adapter under test, without a shell.
	Command string
	Args    []string
	// Action and ActionArgs name a known-valid invoke; without Action the invoke probe is
	// skipped. ActionArgs defaults to {}.
	Action     string
	ActionArgs json.RawMessage
	// Timeout is the deadline of each call; zero means capclient.DefaultCallTimeout. It must
	// lie within [capclient.MinCallTimeout, capclient.MaxCallTimeout].
	Timeout time.Duration
	// PassEnv names variables the adapter gets from this process's environment besides the
	// allowlisted ones, as a registration's passEnv does (see capclient.CheckPassEnv).
	PassEnv []string
	// Fault returns the command and arguments of the built-in misbehaving adapter mode (see
	// FaultModes and RunFaultAdapter); nil skips the fault probes.
	Fault func(mode string) (command string, args []string)
	// ShowAdapterText makes the report quote what the adapter wrote: the last lines of its
	// stderr in a failure caused by a child that died or was killed and in a failed
	// stdin_close (the traceback or complaint its author needs), and the text of a result the
	// runtime would withhold, or a wrong id it answered with. Only for the author who runs the
	// harness (airlock validate capability): the daemon, which validates agents' proposals and
	// shows the report to the proposing session, leaves it off, so that no adapter text
	// reaches a caller through a report (an adapter reading a secret and answering it would
	// otherwise pass it to the agent as a warning); the report then gives the text's length.
	ShowAdapterText bool
}

// Check reports whether c can be run.
func (c Config) Check() error {
	if c.Command == "" {
		return errors.New("no adapter command")
	}
	if c.Timeout != 0 && (c.Timeout < capclient.MinCallTimeout || c.Timeout > capclient.MaxCallTimeout) {
		return fmt.Errorf("timeout %v outside [%v, %v]", c.Timeout, capclient.MinCallTimeout, capclient.MaxCallTimeout)
	}
	if c.Action == "" && len(c.ActionArgs) > 0 {
		return errors.New("args given without an action")
	}
	if len(c.ActionArgs) > 0 && !json.Valid(c.ActionArgs) {
		return errors.New("args are not one JSON value")
	}
	return capclient.CheckPassEnv(c.PassEnv)
}

// Probe is the outcome of one probe. A skipped probe passes; Detail says why it was skipped,
// what failed, or (for a pass) a note worth reading. A probe that passes with Warning saw
// behaviour the harness would rather not see but the runtime never meets or refuses (see
// probeProtocolVersion); Detail says what and why it is not a failure.
type Probe struct {
	Name    string `json:"name"`
	Pass    bool   `json:"pass"`
	Skipped bool   `json:"skipped,omitempty"`
	Warning bool   `json:"warning,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// Report is the outcome of a run: Pass holds when every probe passed. A probe that passed
// with a warning counts in Passed and in Warnings.
type Report struct {
	Probes   []Probe `json:"probes"`
	Pass     bool    `json:"pass"`
	Passed   int     `json:"passed"`
	Failed   int     `json:"failed"`
	Skipped  int     `json:"skipped"`
	Warnings int     `json:"warnings"`
	// Descriptors are the valid descriptors the capability harness listed, in list order:
	// what the run saw, and so what a validated adapter may be trusted to serve (an agent's
	// adapter proposal publishes nothing else). The tool-adapter harness sets none.
	Descriptors []capadapter.Descriptor `json:"descriptors,omitempty"`
}

func (r *Report) add(p Probe) {
	r.Probes = append(r.Probes, p)
	switch {
	case !p.Pass:
		r.Failed++
	case p.Skipped:
		r.Skipped++
	default:
		r.Passed++
		if p.Warning {
			r.Warnings++
		}
	}
	r.Pass = r.Failed == 0
}

// Probe returns the probe called name, if the report has one.
func (r *Report) Probe(name string) (Probe, bool) {
	for _, p := range r.Probes {
		if p.Name == name {
			return p, true
		}
	}
	return Probe{}, false
}

// RunCapability runs every probe against the adapter cfg names, then the fault probes, and
// reaps every child it started before it returns.
func RunCapability(ctx context.Context, cfg Config) Report {
	var rep Report
	if err := cfg.Check(); err != nil {
		rep.add(Probe{Name: "config", Detail: err.Error()})
		return rep
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = capclient.DefaultCallTimeout
	}
	if len(bytes.TrimSpace(cfg.ActionArgs)) == 0 {
		cfg.ActionArgs = json.RawMessage("{}")
	}
	h := &harness{ctx: ctx, cfg: cfg, rep: &rep}
	h.run()
	h.closeAll()
	rep.Descriptors = h.descs
	if cfg.Fault != nil && ctx.Err() == nil {
		runFaultProbes(ctx, cfg.Fault, &rep)
	}
	return rep
}

// onSpawn, when set (by tests), sees every child the harness and the fault probes start.
var onSpawn func(*capclient.Client)

// harness is the state of one run against the adapter under test.
type harness struct {
	ctx context.Context
	cfg Config
	rep *Report

	child    *capclient.Client   // the current child, replaced when a probe kills it
	children []*capclient.Client // every child started, all closed at the end

	descs []capadapter.Descriptor
	canon [][]byte

	calls    []callRecord
	screens  []string // screen violations found in descriptors, for the screens probe
	withheld []string // results the runtime would withhold, for the screens probe's warning
	bounds   []string // bound violations found, for the bounds probe
	largest  int      // the largest result seen
	noStart  bool     // the adapter could not be started at all
}

type callRecord struct {
	label string
	took  time.Duration
	code  string // CodeOf the call's error; "" when it returned a response
}

func (h *harness) run() {
	listed := h.probeList()
	if listed {
		h.probeDescribe()
		h.probeObserve()
		h.probeInvoke()
		h.probeUnsupportedAction()
		h.probeUnknownCapability()
		h.probeInvalidArgs()
	} else {
		reason := "not run: list failed"
		if h.noStart {
			reason = "not run: the adapter did not start"
		}
		for _, name := range []string{ProbeDescribe, ProbeObserve, ProbeInvoke, ProbeUnsupportedAction,
			ProbeUnknownCapability, ProbeInvalidArgs} {
			h.rep.add(Probe{Name: name, Pass: true, Skipped: true, Detail: reason})
		}
	}
	if h.noStart {
		for _, name := range []string{ProbeUnsupportedMethod, ProbeProtocolVersion, ProbeStdinClose, ProbeDeadline,
			ProbeBounds, ProbeScreens} {
			h.rep.add(Probe{Name: name, Pass: true, Skipped: true, Detail: "not run: the adapter did not start"})
		}
		return
	}
	h.probeUnsupportedMethod()
	h.probeProtocolVersion()
	h.probeStdinClose()
	h.probeDeadline()
	h.probeBounds()
	h.probeScreens()
}

// text is how the report shows a text the adapter wrote: quoted for its author
// (Config.ShowAdapterText), else by its length only.
func (h *harness) text(s string) string {
	if h.cfg.ShowAdapterText {
		return quote(s)
	}
	return fmt.Sprintf("(a text of %d characters, not shown)", utf8.RuneCountInString(s))
}

func (h *harness) pass(name, detail string) { h.rep.add(Probe{Name: name, Pass: true, Detail: detail}) }
func (h *harness) fail(name, detail string) { h.rep.add(Probe{Name: name, Detail: detail}) }
func (h *harness) warn(name, detail string) {
	h.rep.add(Probe{Name: name, Pass: true, Warning: true, Detail: detail})
}

// result adds a probe that passes when problems is empty, with note as the detail of a pass.
func (h *harness) result(name string, problems []string, note string) {
	if len(problems) == 0 {
		h.pass(name, note)
		return
	}
	h.fail(name, strings.Join(problems, "; "))
}

// resultWarn adds a probe that fails when problems is not empty and otherwise passes with the
// warning.
func (h *harness) resultWarn(name string, problems []string, warning string) {
	if len(problems) == 0 {
		h.warn(name, warning)
		return
	}
	h.fail(name, strings.Join(problems, "; "))
}

// spawn starts a fresh child of the adapter under test.
func (h *harness) spawn() (*capclient.Client, error) {
	c, err := capclient.Spawn(h.cfg.Command, h.cfg.Args, capclient.ClientOptions{CallTimeout: h.cfg.Timeout, PassEnv: h.cfg.PassEnv})
	if err != nil {
		return nil, err
	}
	h.children = append(h.children, c)
	if onSpawn != nil {
		onSpawn(c)
	}
	return c, nil
}

// live returns a healthy child: the current one, or a fresh one that has answered list (as the
// runtime starts every child) when a probe killed the last.
func (h *harness) live() (*capclient.Client, error) {
	if h.child != nil && h.child.Failure() == nil {
		return h.child, nil
	}
	c, err := h.spawn()
	if err != nil {
		return nil, errors.New(describeErr(err))
	}
	h.child = c
	resp, err := h.call(c, "list", capadapter.Request{Method: capadapter.MethodList})
	if err != nil {
		return nil, fmt.Errorf("a fresh child failed list: %s", describeErr(err))
	}
	if resp.ErrorCode != "" {
		return nil, fmt.Errorf("a fresh child answered list with %s", resp.ErrorCode)
	}
	return c, nil
}

// requestText renders a request as the harness sends it, without its id, for failure
// messages: an author must see which capability, action and arguments failed.
func requestText(req capadapter.Request) string {
	v := req.ProtocolVersion
	if v == 0 {
		v = capadapter.ProtocolVersion
	}
	w := struct {
		ProtocolVersion int             `json:"protocolVersion"`
		Method          string          `json:"method"`
		CapabilityID    string          `json:"capabilityId,omitempty"`
		Action          string          `json:"action,omitempty"`
		Args            json.RawMessage `json:"args,omitempty"`
	}{v, req.Method, req.CapabilityID, req.Action, req.Args}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(w) != nil {
		return req.Method
	}
	return "sent " + strings.TrimSpace(buf.String())
}

// call makes one call and records how it went, for the deadline and bounds probes.
func (h *harness) call(c *capclient.Client, label string, req capadapter.Request) (capadapter.Response, error) {
	start := time.Now()
	resp, err := c.Call(h.ctx, req)
	h.calls = append(h.calls, callRecord{label: label, took: time.Since(start), code: capadapter.CodeOf(err)})
	if capadapter.CodeOf(err) == capadapter.CodeTooLarge {
		h.bounds = append(h.bounds, label+": "+describeErr(err))
	}
	if err != nil && c.Failure() != nil {
		err = &stderrError{err: err, ending: processEnding(c, h.cfg.ShowAdapterText)}
	}
	return resp, err
}

// stderrLines is how many of its last stderr lines a failed child's ending quotes.
const stderrLines = 4

// stderrError is a call's error with the ending of the child that failed (see processEnding).
type stderrError struct {
	err    error
	ending string
}

func (e *stderrError) Error() string { return e.err.Error() }
func (e *stderrError) Unwrap() error { return e.err }

// endingWait bounds processEnding's wait for a killed child to be reaped: only a process stuck
// in the kernel outlives SIGKILL for long.
const endingWait = 2 * time.Second

// processEnding waits until c, which has failed or is stopping, is reaped (its failure or Close
// kills what is left of it, so the wait is short), and says how its process ended and, with
// stderr (Config.ShowAdapterText), what it wrote to stderr last.
func processEnding(c *capclient.Client, stderr bool) string {
	timer := time.NewTimer(endingWait)
	defer timer.Stop()
	select {
	case <-c.Done():
	case <-timer.C:
		return "the process has not exited " + endingWait.String() + " after it was killed"
	}
	ending := "the process ended"
	if st := c.ProcessState(); st != nil {
		ending += " with " + st.String()
	}
	if !stderr {
		return ending
	}
	var tail []string
	lines := c.Logs()
	for i := len(lines) - 1; i >= 0 && len(tail) < stderrLines; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "[airlock] ") { // the runtime's own notes
			tail = append(tail, l)
		}
	}
	if len(tail) == 0 {
		return ending + " and wrote nothing to stderr"
	}
	slices.Reverse(tail)
	return ending + "; its last stderr lines: " + strings.Join(tail, " | ")
}

// expectCode makes a call that must be answered with the error code want, and returns the
// problem, if any.
func (h *harness) expectCode(label, want string, req capadapter.Request) string {
	c, err := h.live()
	if err != nil {
		return label + ": " + err.Error()
	}
	resp, err := h.call(c, label, req)
	label += " (" + requestText(req) + ")"
	switch {
	case err != nil:
		return label + ": " + describeErr(err)
	case resp.ErrorCode == "":
		return label + ": answered with a result, want error " + want
	case resp.ErrorCode != want:
		return label + ": answered " + resp.ErrorCode + ", want " + want
	}
	return ""
}

// resultCall makes an observe or invoke call that must succeed with a result the runtime
// accepts, and returns the problem, if any, and a warning when the runtime would withhold the
// result: a well-formed result that fails a screen is no protocol violation (the runtime
// withholds it from that caller, result_withheld, and the adapter serves on), but its callers
// never see it, so the author must know.
func (h *harness) resultCall(label string, req capadapter.Request) (problem, warning string) {
	c, err := h.live()
	if err != nil {
		return label + ": " + err.Error(), ""
	}
	resp, err := h.call(c, label, req)
	label += " (" + requestText(req) + ")"
	if err != nil {
		return label + ": " + describeErr(err), ""
	}
	if resp.ErrorCode != "" {
		return label + ": answered error " + resp.ErrorCode, ""
	}
	if len(resp.Result) > h.largest {
		h.largest = len(resp.Result)
	}
	if len(resp.Result) > capadapter.MaxResultBytes {
		msg := fmt.Sprintf("%s: result of %d bytes, over %d", label, len(resp.Result), capadapter.MaxResultBytes)
		h.bounds = append(h.bounds, msg)
		return msg, ""
	}
	// The runtime's own screens decide; the harness's checks say what they found.
	var e *capadapter.Error
	switch err := capadapter.ScreenResult(resp.Result, true); {
	case err == nil:
		return "", ""
	case !errors.As(err, &e) || e.Code != capadapter.CodeResultWithheld:
		if p := checkSemantic(resp.Result); p != "" {
			return label + ": " + p, ""
		}
		return label + ": the runtime refuses the result: " + describeErr(err), ""
	}
	found := screenResult(resp.Result, h.text)
	if p := checkSemantic(resp.Result); p != "" {
		found = append(found, p)
	}
	w := label + ": the runtime would withhold this result (result_withheld: it fails the " + e.Screen + " screen"
	if len(found) > 0 {
		w += ": " + strings.Join(found, ", ")
	}
	w += ")"
	h.withheld = append(h.withheld, w)
	return "", w
}

// withheldAdvice ends a warning of results the runtime would withhold.
const withheldAdvice = "; the adapter keeps running, but its callers would get result_withheld instead of the result: " +
	"an adapter that echoes what a caller gave it must screen that text itself (see docs/adapter-authoring.md)"

// closeAll stops every child the harness started and waits until each is reaped.
func (h *harness) closeAll() {
	ctx := context.WithoutCancel(h.ctx)
	for _, c := range h.children {
		_ = c.Close(ctx)
		<-c.Done()
	}
}

// describeErr renders a capadapter error as "code: detail".
func describeErr(err error) string {
	var ending string
	if se, ok := err.(*stderrError); ok {
		err, ending = se.err, " ("+se.ending+")"
	}
	var e *capadapter.Error
	if errors.As(err, &e) {
		if e.Detail == "" {
			return e.Code + ending
		}
		return e.Code + ": " + e.Detail + ending
	}
	return err.Error() + ending
}

func describeResp(resp capadapter.Response, err error) string {
	if err != nil {
		return describeErr(err)
	}
	return "answered error " + resp.ErrorCode
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func compactLen(raw []byte) int {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return len(raw)
	}
	return buf.Len()
}
