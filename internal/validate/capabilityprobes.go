package validate

// This file owns the capability probes: list, describe with the runtime's startup handshake,
// observe, invoke, unsupported_action, unknown_capability, invalid_args, unsupported_method,
// protocol_version, stdin_close, and the deadline, bounds and screens the calls add up to.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

func (h *harness) probeList() bool {
	c, err := h.spawn()
	if err != nil {
		h.noStart = true
		h.fail(ProbeList, describeErr(err))
		return false
	}
	h.child = c
	resp, err := h.call(c, "list", capadapter.Request{Method: capadapter.MethodList})
	if err != nil {
		h.fail(ProbeList, describeErr(err))
		return false
	}
	if resp.ErrorCode != "" {
		h.fail(ProbeList, "answered error "+resp.ErrorCode)
		return false
	}
	var items []json.RawMessage
	trimmed := bytes.TrimSpace(resp.Result)
	if len(trimmed) == 0 || trimmed[0] != '[' || json.Unmarshal(trimmed, &items) != nil {
		h.fail(ProbeList, "the result is not a JSON array")
		return false
	}
	var problems []string
	if len(items) == 0 || len(items) > capadapter.MaxCapabilities {
		problems = append(problems, fmt.Sprintf("%d descriptors listed, want 1 to %d", len(items), capadapter.MaxCapabilities))
	}
	for i, item := range items {
		label := fmt.Sprintf("descriptor %d", i)
		h.screenDescriptor(label, item)
		d, cb, err := capadapter.ParseDescriptor(item)
		switch {
		case capadapter.CodeOf(err) == capadapter.CodeTooLarge: // measured as the runtime measures it
			h.bounds = append(h.bounds, label+": "+describeErr(err))
		case compactLen(item) > capadapter.MaxDescriptorBytes:
			h.bounds = append(h.bounds, fmt.Sprintf("%s: %d bytes, over %d", label, compactLen(item), capadapter.MaxDescriptorBytes))
		}
		if err != nil {
			problems = append(problems, label+": "+describeErr(err))
			continue
		}
		for _, prev := range h.descs {
			if prev.CapabilityID == d.CapabilityID {
				problems = append(problems, label+": capability id "+quote(d.CapabilityID)+" listed twice")
			}
		}
		if d.CapabilityID == probeCapability {
			problems = append(problems, label+": capability id "+quote(d.CapabilityID)+" is reserved for the unknown_capability probe")
		}
		h.descs = append(h.descs, d)
		h.canon = append(h.canon, cb)
	}
	if len(problems) > 0 {
		h.fail(ProbeList, strings.Join(problems, "; "))
		return false
	}
	h.pass(ProbeList, fmt.Sprintf("%d valid descriptor(s): %s", len(h.descs), strings.Join(h.ids(), ", ")))
	return true
}

func (h *harness) ids() []string {
	ids := make([]string, len(h.descs))
	for i, d := range h.descs {
		ids[i] = d.CapabilityID
	}
	return ids
}

func (h *harness) probeDescribe() {
	var problems []string
	for i, d := range h.descs {
		label := "describe " + d.CapabilityID
		c, err := h.live()
		if err != nil {
			problems = append(problems, label+": "+err.Error())
			continue
		}
		req := capadapter.Request{Method: capadapter.MethodDescribe, CapabilityID: d.CapabilityID}
		resp, err := h.call(c, label, req)
		label += " (" + requestText(req) + ")"
		if err != nil {
			problems = append(problems, label+": "+describeErr(err))
			continue
		}
		if resp.ErrorCode != "" {
			problems = append(problems, label+": answered error "+resp.ErrorCode)
			continue
		}
		h.screenDescriptor(label, resp.Result)
		_, cb, err := capadapter.ParseDescriptor(resp.Result)
		if err != nil {
			problems = append(problems, label+": "+describeErr(err))
			continue
		}
		if !bytes.Equal(cb, h.canon[i]) {
			problems = append(problems, label+": differs from the listed descriptor after canonical encoding")
		}
	}
	if len(problems) == 0 {
		problems = nonEmpty(h.startup())
	}
	h.result(ProbeDescribe, problems, fmt.Sprintf("%d descriptor(s) byte-identical to list; startup handshake accepted", len(h.descs)))
}

// startup runs the runtime's own startup handshake (list, then describe of every listed id,
// all within one deadline) on a healthy child, so that what the runtime would refuse at
// registration fails here too, and returns the problem, if any.
func (h *harness) startup() string {
	c, err := h.live()
	if err != nil {
		return "startup handshake: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.Timeout)
	defer cancel()
	label := "startup handshake (list and every describe)"
	start := time.Now()
	_, err = c.Handshake(ctx)
	h.calls = append(h.calls, callRecord{label: label, took: time.Since(start), code: capadapter.CodeOf(err)})
	if err != nil {
		return label + ": the runtime refuses it: " + describeErr(err)
	}
	return ""
}

func (h *harness) probeObserve() {
	var problems, warnings []string
	n := 0
	for _, d := range h.descs {
		if !d.Observe {
			continue
		}
		n++
		label := "observe " + d.CapabilityID
		p, w := h.resultCall(label, capadapter.Request{Method: capadapter.MethodObserve, CapabilityID: d.CapabilityID})
		if p != "" {
			problems = append(problems, p)
			continue
		}
		// The runtime's own screens of the result, on a second observe (observe has no side
		// effect): the harness's checks must not be laxer than the runtime's.
		c, err := h.live()
		if err != nil {
			problems = append(problems, label+": "+err.Error())
			continue
		}
		start := time.Now()
		_, err = c.Observe(h.ctx, d.CapabilityID)
		h.calls = append(h.calls, callRecord{label: label, took: time.Since(start), code: capadapter.CodeOf(err)})
		switch {
		case err == nil:
		case capadapter.CodeOf(err) == capadapter.CodeResultWithheld && c.Failure() == nil:
			if w == "" {
				w = label + ": the runtime would withhold this result (" + describeErr(err) + ")"
				h.withheld = append(h.withheld, w)
			}
		default:
			problems = append(problems, label+": the runtime refuses the result: "+describeErr(err))
		}
		if w != "" {
			warnings = append(warnings, w)
		}
	}
	if n == 0 && len(problems) == 0 {
		h.pass(ProbeObserve, "no capability observes")
		return
	}
	note := fmt.Sprintf("%d observable capability(ies) answered with bounded semantic data", n)
	if len(warnings) > 0 {
		h.resultWarn(ProbeObserve, problems, "warning: "+strings.Join(warnings, "; ")+withheldAdvice)
		return
	}
	h.result(ProbeObserve, problems, note)
}

func (h *harness) probeInvoke() {
	if h.cfg.Action == "" {
		h.rep.add(Probe{Name: ProbeInvoke, Pass: true, Skipped: true,
			Detail: "no --action given: pass --action A --args JSON to check a known-valid invoke"})
		return
	}
	for _, d := range h.descs {
		a, ok := d.Action(h.cfg.Action)
		if !ok {
			continue
		}
		if err := capadapter.ValidateArgs(a.Input, h.cfg.ActionArgs); err != nil {
			h.fail(ProbeInvoke, "the given args do not satisfy the declared input of "+d.CapabilityID+"."+a.Name+": "+describeErr(err))
			return
		}
		label := "invoke " + d.CapabilityID + "." + a.Name
		p, w := h.resultCall(label, capadapter.Request{Method: capadapter.MethodInvoke, CapabilityID: d.CapabilityID,
			Action: a.Name, Args: h.cfg.ActionArgs})
		if w != "" {
			h.resultWarn(ProbeInvoke, nonEmpty(p), "warning: "+w+withheldAdvice)
			return
		}
		h.result(ProbeInvoke, nonEmpty(p), label+" succeeded")
		return
	}
	h.fail(ProbeInvoke, "no listed capability declares the action "+quote(h.cfg.Action))
}

func (h *harness) probeUnsupportedAction() {
	var problems []string
	for _, d := range h.descs {
		if _, ok := d.Action(probeAction); ok {
			problems = append(problems, d.CapabilityID+" declares the reserved action "+probeAction)
			continue
		}
		p := h.expectCode("invoke "+d.CapabilityID+"."+probeAction, capadapter.CodeUnsupportedAction,
			capadapter.Request{Method: capadapter.MethodInvoke, CapabilityID: d.CapabilityID, Action: probeAction, Args: json.RawMessage("{}")})
		problems = append(problems, nonEmpty(p)...)
	}
	h.result(ProbeUnsupportedAction, problems, "an undeclared action is answered unsupported_action")
}

func (h *harness) probeUnknownCapability() {
	action := probeAction
	if len(h.descs) > 0 && len(h.descs[0].Actions) > 0 {
		action = h.descs[0].Actions[0].Name // a real action name, so only the id is wrong
	}
	var problems []string
	for _, req := range []capadapter.Request{
		{Method: capadapter.MethodDescribe, CapabilityID: probeCapability},
		{Method: capadapter.MethodObserve, CapabilityID: probeCapability},
		{Method: capadapter.MethodInvoke, CapabilityID: probeCapability, Action: action, Args: json.RawMessage("{}")},
	} {
		problems = append(problems, nonEmpty(h.expectCode(req.Method+" "+probeCapability, capadapter.CodeUnknownCapability, req))...)
	}
	h.result(ProbeUnknownCapability, problems, "describe, observe and invoke of an unknown id are answered unknown_capability")
}

func (h *harness) probeInvalidArgs() {
	var problems []string
	n := 0
	for _, d := range h.descs {
		for _, a := range d.Actions {
			for _, ac := range invalidArgCases(a.Input) {
				n++
				label := "invoke " + d.CapabilityID + "." + a.Name + " with " + ac.what
				p := h.expectCode(label, capadapter.CodeInvalidArgs, capadapter.Request{Method: capadapter.MethodInvoke,
					CapabilityID: d.CapabilityID, Action: a.Name, Args: ac.args})
				if p != "" {
					problems = append(problems, p)
				}
			}
		}
	}
	note := fmt.Sprintf("%d generated violation(s) answered invalid_args", n)
	if n == 0 {
		note = "no action to violate"
	}
	h.result(ProbeInvalidArgs, problems, note)
}

func (h *harness) probeUnsupportedMethod() {
	p := h.expectCode("method "+probeMethod, capadapter.CodeUnsupportedMethod, capadapter.Request{Method: probeMethod})
	h.result(ProbeUnsupportedMethod, nonEmpty(p), "an unknown method is answered unsupported_method")
}

// probeProtocolVersion sends list with protocolVersion 2 to a fresh child. Following the
// reference adapter, the expected answer is invalid_request (in a version 1 envelope with the
// request's id), after which the adapter keeps serving; an adapter may instead exit without
// answering, which the runtime treats as the loss of that child. An invalid_request with
// another id, after which the adapter keeps serving, passes with a warning (see otherID).
// Anything else fails: a result, another code, a malformed answer, or no answer before the
// deadline.
func (h *harness) probeProtocolVersion() {
	c, err := h.spawn()
	if err != nil {
		h.fail(ProbeProtocolVersion, describeErr(err))
		return
	}
	req := capadapter.Request{ProtocolVersion: probeVersion, Method: capadapter.MethodList}
	label := "list with protocolVersion 2 (" + requestText(req) + ")"
	resp, err := h.call(c, label, req)
	switch {
	case err != nil && capadapter.CodeOf(err) == capadapter.CodeUnavailable && c.Failure() != nil:
		h.pass(ProbeProtocolVersion, "the adapter exited without answering (allowed; answering invalid_request is preferred)")
		return
	case capadapter.CodeOf(err) == capadapter.CodeMalformedResponse:
		// The runtime's client saw an answer it cannot pair with the request; look at it.
		if warning, problem := h.otherID(req); problem == "" {
			h.warn(ProbeProtocolVersion, warning)
			return
		} else if problem != "-" {
			h.fail(ProbeProtocolVersion, label+": "+problem)
			return
		}
		h.fail(ProbeProtocolVersion, label+": "+describeErr(err))
		return
	case err != nil:
		h.fail(ProbeProtocolVersion, label+": "+describeErr(err))
		return
	case resp.ErrorCode != capadapter.CodeInvalidRequest:
		what := "a result"
		if resp.ErrorCode != "" {
			what = resp.ErrorCode
		}
		h.fail(ProbeProtocolVersion, label+": answered "+what+", want invalid_request in a version 1 response")
		return
	}
	resp, err = h.call(c, "list after the wrong version", capadapter.Request{Method: capadapter.MethodList})
	if err != nil || resp.ErrorCode != "" {
		h.fail(ProbeProtocolVersion, "answered invalid_request, but a list afterwards failed: "+describeResp(resp, err))
		return
	}
	h.pass(ProbeProtocolVersion, "answered invalid_request and kept serving")
}

// probeStdinClose closes the stdin of a healthy child, which must exit with status 0 within
// StdinCloseBound.
func (h *harness) probeStdinClose() {
	c, err := h.live()
	if err != nil {
		h.fail(ProbeStdinClose, err.Error())
		return
	}
	start := time.Now()
	err = c.Close(h.ctx)
	d := time.Since(start)
	took := d.Round(time.Millisecond).String()
	var problem string
	switch {
	case err == nil && d <= StdinCloseBound:
		h.pass(ProbeStdinClose, "exited with status 0 "+took+" after stdin closed")
		return
	case err == nil:
		problem = "the adapter exited " + took + " after stdin closed, over " + StdinCloseBound.String()
	case d > StdinCloseBound:
		// Close signals the group once the bound has passed.
		problem = "the adapter did not exit within " + StdinCloseBound.String() + " of stdin close: it was signalled, and ended " + took + " after stdin closed"
	default:
		problem = "the adapter exited " + took + " after stdin closed, but not with status 0"
	}
	h.fail(ProbeStdinClose, problem+" ("+processEnding(c, h.cfg.ShowAdapterText)+")")
}

func (h *harness) probeDeadline() {
	var problems []string
	var slowest callRecord
	for _, r := range h.calls {
		if r.code == capadapter.CodeTimeout {
			problems = append(problems, r.label+": no answer within "+h.cfg.Timeout.String())
		}
		if r.took > slowest.took && r.code != capadapter.CodeTimeout {
			slowest = r
		}
	}
	h.result(ProbeDeadline, problems, fmt.Sprintf("%d call(s) within %v; slowest %s took %v", len(h.calls), h.cfg.Timeout,
		slowest.label, slowest.took.Round(time.Millisecond)))
}

func (h *harness) probeBounds() {
	h.result(ProbeBounds, h.bounds, fmt.Sprintf("frames within %d bytes, descriptors within %d, results within %d (largest %d)",
		capadapter.MaxFrameBytes, capadapter.MaxDescriptorBytes, capadapter.MaxResultBytes, h.largest))
}

// probeScreens fails for a descriptor that fails the screens (the runtime refuses the
// adapter), and warns for results the runtime would withhold (it withholds them from their
// callers and keeps the adapter).
func (h *harness) probeScreens() {
	note := "no URL or sensitive name in descriptors and results"
	if len(h.withheld) > 0 {
		h.resultWarn(ProbeScreens, h.screens, fmt.Sprintf("warning: %d result(s) the runtime would withhold: %s%s",
			len(h.withheld), strings.Join(h.withheld, "; "), withheldAdvice))
		return
	}
	h.result(ProbeScreens, h.screens, note)
}

func (h *harness) screenDescriptor(label string, raw []byte) {
	if v := screenDescriptor(raw); len(v) > 0 {
		h.screens = append(h.screens, label+": "+strings.Join(v, ", "))
	}
}

// otherID replays req, with a wrong protocolVersion, on a fresh child outside the runtime's
// client (rawExchange), followed by a valid list. When the first answer is invalid_request in
// a valid version 1 envelope whose id is not the request's, and the list afterwards is
// answered, it returns the warning to report. problem is "-" when the first answer is
// something else (the caller reports the client's own error), and says what failed when the
// list afterwards was not answered.
//
// Such an answer is a warning, not a failure: the protocol defines no answer to a request of
// another version (an adapter cannot know how a future version frames its id), and the runtime
// never sends one, so it never meets the answer; a validator fails only what the runtime would
// refuse. Echoing the request's id remains the better answer.
func (h *harness) otherID(req capadapter.Request) (warning, problem string) {
	const wrongID, listID = "1", "2"
	first, err := capadapter.EncodeRequest(req, wrongID)
	if err != nil {
		return "", "-"
	}
	list, err := capadapter.EncodeRequest(capadapter.Request{Method: capadapter.MethodList}, listID)
	if err != nil {
		return "", "-"
	}
	answers := h.rawExchange([][]byte{first, list})
	if len(answers) == 0 {
		return "", "-"
	}
	var env struct {
		ID json.RawMessage `json:"id"`
	}
	var id string
	if json.Unmarshal(answers[0], &env) != nil || json.Unmarshal(env.ID, &id) != nil || id == wrongID {
		return "", "-"
	}
	resp, err := capadapter.DecodeResponse(answers[0], id)
	if err != nil || resp.ErrorCode != capadapter.CodeInvalidRequest {
		return "", "-"
	}
	if len(answers) < 2 {
		return "", "answered invalid_request with the id " + h.text(id) + " instead of the request's, but did not answer a list afterwards"
	}
	if resp, err := capadapter.DecodeResponse(answers[1], listID); err != nil || resp.ErrorCode != "" {
		return "", "answered invalid_request with the id " + h.text(id) + " instead of the request's, but a list afterwards failed: " + describeResp(resp, err)
	}
	return "warning: answered invalid_request with the id " + h.text(id) + ", not the request's id, and kept serving. " +
		"Not a failure: the protocol does not define an answer to a request of another protocolVersion, and the runtime " +
		"never sends one (it would discard an answer with another id); echoing the request's id is preferred", ""
}
