package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
)

// status prints the host status: v2 status without a sessionId.
func (a *app) status(ctx context.Context, args []string) int {
	o, fs := a.newCommand("status")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is the host snapshot")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpStatus})
	if err != nil {
		return o.fail(err)
	}
	var h protocol.HostSnapshot
	if err := decodeData(data, &h); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) { printHost(w, &h) })
}

func printHost(w io.Writer, h *protocol.HostSnapshot) {
	t := newTable(w)
	fmt.Fprintf(t, "host\t%s\n", orDash(h.HostInstanceID))
	fmt.Fprintf(t, "ready\t%t\n", h.Ready)
	fmt.Fprintf(t, "phase\t%s\n", orDash(h.Recovery.Phase))
	fmt.Fprintf(t, "draining\t%t\n", h.Draining)
	fmt.Fprintf(t, "uptime\t%s\n", millis(h.UptimeMs))
	fmt.Fprintf(t, "connections\t%d\n", h.Connections)
	fmt.Fprintf(t, "sessions\t%d resident, %d dormant\n", len(h.Sessions), h.DormantSessions)
	fmt.Fprintf(t, "turns\t%d running, %d queued\n", h.ActiveTurns, h.QueuedTurns)
	r := h.Recovery
	if r.PendingReplays > 0 || r.ReplayedRequests > 0 || r.IndeterminateRequests > 0 || r.FailureCount > 0 {
		fmt.Fprintf(t, "recovery\t%d replayed, %d pending, %d indeterminate, %d failures%s\n",
			r.ReplayedRequests, r.PendingReplays, r.IndeterminateRequests, r.FailureCount, failureCodes(r.FailureCodes))
	}
	t.Flush()
	fmt.Fprintln(w)
	t = newTable(w)
	fmt.Fprintln(t, "SESSION\tGEN\tSTATE\tQUEUED\tSEQ\tATTACHED\tIDLE")
	for _, s := range h.Sessions {
		fmt.Fprintf(t, "%s\t%d\t%s\t%d\t%d\t%d\t%s\n", orDash(s.SessionID), s.Generation, orDash(s.State), s.QueuedTurns, s.Sequence, s.Attached, millis(s.IdleForMs))
	}
	t.Flush()
	if len(r.QuarantinedSessions) > 0 {
		fmt.Fprintln(w)
		t = newTable(w)
		fmt.Fprintln(t, "QUARANTINED\tGEN\tCODE")
		for _, q := range r.QuarantinedSessions {
			fmt.Fprintf(t, "%s\t%d\t%s\n", orDash(q.SessionID), q.Generation, orDash(q.Code))
		}
		t.Flush()
	}
	if len(h.Adapters) > 0 {
		fmt.Fprintln(w)
		printAdapters(w, h.Adapters)
	}
}

// failureCodes lists recovery failure codes as " (code=count, …)" in code order, or "" when
// there is none; Go's map syntax ("map[]") is no output for people.
func failureCodes(codes map[string]int) string {
	if len(codes) == 0 {
		return ""
	}
	var b strings.Builder
	for i, c := range slices.Sorted(maps.Keys(codes)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", c, codes[c])
	}
	return " (" + b.String() + ")"
}

// drain tells the daemon to stop admitting new residency. The daemon answers once no turn is
// active or its timeout passed, so the call may take that long.
func (a *app) drain(ctx context.Context, args []string) int {
	o, fs := a.newCommand("drain")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is the drain result")
	timeoutMs := fs.Int64("timeout-ms", protocol.DefaultDrainMs, "how long active turns may take before they are aborted; sent only when given")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	var p protocol.DrainPayload
	if isSet(fs, "timeout-ms") {
		p.TimeoutMs = json.RawMessage(strconv.FormatInt(*timeoutMs, 10)) // the daemon checks the bounds
	}
	// The daemon answers after at most its timeout; the usual margin comes on top.
	wait := time.Duration(max(*timeoutMs, 0))*time.Millisecond + callTimeout
	data, err := a.callWithin(ctx, wait, protocol.Version2, client.Command{Operation: protocol.OpDrain, Payload: p})
	if err != nil {
		return o.fail(err)
	}
	var r protocol.DrainResult
	if err := decodeData(data, &r); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		fmt.Fprintf(w, "draining timeoutMs=%d timedOut=%t abortedTurns=%d\n", r.TimeoutMs, r.TimedOut, r.AbortedTurns)
	})
}
