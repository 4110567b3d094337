package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
)

// maxPromptBytes bounds a prompt read from stdin: 262144 characters of up to 4 bytes.
const maxPromptBytes = protocol.MaxPromptChars * 4

// keyFlag is --key, the idempotency key of a wake, steer or followUp.
func keyFlag(fs *flag.FlagSet) *string {
	return fs.String("key", "", "idempotency `key`; a retry with the same key never runs twice (default: a fresh one, printed)")
}

// freshKey returns k, or a new random key when k is empty.
func freshKey(k string) string {
	if k != "" {
		return k
	}
	return "cli-" + rand.Text()
}

// readText returns arg, or stdin when arg is "-", bounded by maxPromptBytes.
func (a *app) readText(arg, what string) (string, error) {
	if arg != "-" {
		return arg, nil
	}
	if a.stdin == nil {
		return "", usageErrorf("no stdin to read the %s from", what)
	}
	b, err := readBounded(a.stdin, maxPromptBytes, "the "+what+" on stdin")
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// wake runs one agent turn: airlock wake SESSION PROMPT|- --generation N [--key K] [--no-wait].
// While it waits it streams the model's text to stdout and the tool calls to stderr; with
// --json it prints only the final answer.
func (a *app) wake(ctx context.Context, args []string) int {
	o, fs := a.newCommand("wake")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {result, session}, or {ticket} with --no-wait")
	gen := generationFlag(fs)
	key := keyFlag(fs)
	source := fs.String("source", "", "where the prompt comes from, kept with the wake (at most 128 characters)")
	noWait := fs.Bool("no-wait", false, "return the ticket once the wake is journaled instead of waiting for the turn")
	timeout := fs.Duration("timeout", 30*time.Minute, "how long to wait for the turn")
	pos, code, done := a.parse(o, fs, args, "SESSION", "PROMPT")
	if done {
		return code
	}
	if err := checkGeneration(fs, *gen); err != nil {
		return a.failUsage(o, err)
	}
	if *timeout <= 0 {
		return a.failUsage(o, usageErrorf("--timeout must be positive"))
	}
	prompt, err := a.readText(pos[1], "prompt")
	if err != nil {
		return a.failUsage(o, err)
	}
	p := protocol.WakePayload{Prompt: prompt}
	if *source != "" {
		p.Source = source
	}
	if *noWait {
		wait := false
		p.WaitForTerminal = &wait
	}
	k := freshKey(*key)
	if *key == "" && !o.json {
		fmt.Fprintf(a.stderr, "idempotency key %s (pass --key to retry this wake)\n", k)
	}
	// The request id names this wake's events among those of the session's other wakes.
	cmd := client.Command{Operation: protocol.OpWake, SessionID: pos[0], Generation: gen, IdempotencyKey: k, Payload: p,
		RequestID: "cli-wake-" + rand.Text()}

	if *noWait {
		data, err := a.call(ctx, protocol.Version2, cmd)
		if err != nil {
			return o.fail(err)
		}
		var r protocol.TicketResult
		if err := decodeData(data, &r); err != nil {
			return o.fail(err)
		}
		return o.succeed(data, func(w io.Writer) {
			fmt.Fprintf(w, "%s %s\n", r.Ticket.TicketID, r.Ticket.State)
		})
	}

	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := a.dial(wctx, protocol.Version2)
	if err != nil {
		return o.fail(err)
	}
	defer c.Close()
	streamed, stop := make(chan struct{}), make(chan struct{})
	if !o.json {
		// Attach first, so the turn's events arrive on this connection as it runs.
		if _, err := exchange(wctx, c, client.Command{Operation: protocol.OpAttach, SessionID: pos[0], Generation: gen}); err != nil {
			return o.fail(err)
		}
		go func() {
			defer close(streamed)
			a.streamTurn(c.Events(), stop, cmd.RequestID)
		}()
	} else {
		close(streamed)
	}
	data, err := exchange(wctx, c, cmd)
	// The events the daemon wrote before its answer are already received: print them, then
	// report the answer. A duplicate of a finished wake has no events at all.
	close(stop)
	<-streamed
	if err != nil {
		return o.fail(err)
	}
	var r struct {
		Result protocol.TurnResult `json:"result"`
	}
	if err := decodeData(data, &r); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		if !a.streamed { // a duplicate of a finished wake: no events, only the answer
			fmt.Fprintf(w, "%s\n", r.Result.Text)
		}
		fmt.Fprintf(a.stderr, "turn %s: %d model call(s), %d tool call(s), %d tokens\n",
			clean(r.Result.StopReason), r.Result.ModelCalls, r.Result.ToolCalls, r.Result.Usage.TotalTokens)
	})
}

// streamTurn prints the events of one wake, the one with requestID, until stop is closed and
// what was already received is printed: text deltas to stdout as they come, tool calls as one
// line each to stderr. It reads every event of the session meanwhile, so that another wake's
// events never hold up the answer on the connection.
func (a *app) streamTurn(events <-chan json.RawMessage, stop <-chan struct{}, requestID string) {
	for {
		select {
		case line := <-events:
			a.printEvent(line, requestID)
		case <-stop:
			for {
				select {
				case line := <-events:
					a.printEvent(line, requestID)
				default:
					return
				}
			}
		}
	}
}

// printEvent prints one event of the wake with requestID; others are skipped.
func (a *app) printEvent(line json.RawMessage, requestID string) {
	var ev struct {
		Event     string `json:"event"`
		RequestID string `json:"requestId"`
		Data      struct {
			Delta     string          `json:"delta"`
			Operation string          `json:"operation"`
			Name      string          `json:"name"`
			OK        bool            `json:"ok"`
			Error     *protocol.Error `json:"error"`
		} `json:"data"`
	}
	if line == nil || json.Unmarshal(line, &ev) != nil || ev.RequestID != requestID {
		return
	}
	switch ev.Event {
	case protocol.EventMessageUpdate:
		io.WriteString(a.stdout, ev.Data.Delta)
		a.streamed = true
	case protocol.EventMessageEnd:
		if a.streamed {
			io.WriteString(a.stdout, "\n")
		}
	case protocol.EventToolStart:
		fmt.Fprintf(a.stderr, "-> %s\n", clean(firstOf(ev.Data.Operation, ev.Data.Name)))
	case protocol.EventToolEnd:
		if !ev.Data.OK && ev.Data.Error != nil {
			fmt.Fprintf(a.stderr, "<- %s failed: %s\n", clean(firstOf(ev.Data.Operation, ev.Data.Name)), clean(ev.Data.Error.Code))
		}
	}
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// control sends a steer or followUp message into a running turn.
func (a *app) control(ctx context.Context, name, op string, args []string) int {
	o, fs := a.newCommand(name)
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {queued}")
	gen := generationFlag(fs)
	key := keyFlag(fs)
	pos, code, done := a.parse(o, fs, args, "SESSION", "MESSAGE")
	if done {
		return code
	}
	if err := checkGeneration(fs, *gen); err != nil {
		return a.failUsage(o, err)
	}
	msg, err := a.readText(pos[1], "message")
	if err != nil {
		return a.failUsage(o, err)
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: op, SessionID: pos[0], Generation: gen,
		IdempotencyKey: freshKey(*key), Payload: protocol.MessagePayload{Message: msg}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) { fmt.Fprintf(w, "queued into the running turn of %s\n", clean(pos[0])) })
}

func (a *app) steer(ctx context.Context, args []string) int {
	return a.control(ctx, "steer", protocol.OpSteer, args)
}

func (a *app) followUp(ctx context.Context, args []string) int {
	return a.control(ctx, "follow-up", protocol.OpFollowUp, args)
}

// abort cancels a session's running turn.
func (a *app) abort(ctx context.Context, args []string) int {
	o, fs := a.newCommand("abort")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {aborted}")
	gen := generationFlag(fs)
	pos, code, done := a.parse(o, fs, args, "SESSION")
	if done {
		return code
	}
	if err := checkGeneration(fs, *gen); err != nil {
		return a.failUsage(o, err)
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpAbort, SessionID: pos[0], Generation: gen})
	if err != nil {
		return o.fail(err)
	}
	var r protocol.AbortResult
	if err := decodeData(data, &r); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		if r.Aborted {
			fmt.Fprintf(w, "aborted the running turn of %s\n", clean(pos[0]))
		} else {
			fmt.Fprintf(w, "%s had no running turn\n", clean(pos[0]))
		}
	})
}

// ticket shows the durable state of a wake.
func (a *app) ticket(ctx context.Context, args []string) int {
	o, fs := a.newCommand("ticket")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {ticket}")
	pos, code, done := a.parse(o, fs, args, "TICKET")
	if done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpTicket, Payload: protocol.TicketPayload{TicketID: pos[0]}})
	if err != nil {
		return o.fail(err)
	}
	return a.printTicket(o, data)
}

// reconcile records an operator's verdict on an indeterminate wake.
func (a *app) reconcile(ctx context.Context, args []string) int {
	o, fs := a.newCommand("reconcile")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {ticket}")
	outcome := fs.String("outcome", "", "what happened: succeeded or failed (required)")
	pos, code, done := a.parse(o, fs, args, "TICKET")
	if done {
		return code
	}
	if *outcome != protocol.OutcomeSucceeded && *outcome != protocol.OutcomeFailed {
		return a.failUsage(o, usageErrorf("--outcome must be succeeded or failed"))
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpReconcile,
		Payload: protocol.ReconcilePayload{TicketID: pos[0], Outcome: *outcome}})
	if err != nil {
		return o.fail(err)
	}
	return a.printTicket(o, data)
}

func (a *app) printTicket(o *output, data json.RawMessage) int {
	var r protocol.TicketResult
	if err := decodeData(data, &r); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		t := r.Ticket
		fmt.Fprintf(w, "%s %s\n  session %s generation %d key %s request %s\n  submitted %s updated %s\n",
			t.TicketID, t.State, clean(t.SessionID), t.Generation, clean(t.IdempotencyKey), clean(t.RequestID),
			t.SubmittedAt.Format(time.RFC3339), t.UpdatedAt.Format(time.RFC3339))
		if t.Reconciled {
			fmt.Fprintf(w, "  reconciled by an operator\n")
		}
		if t.Error != nil {
			fmt.Fprintf(w, "  error %s: %s\n", clean(t.Error.Code), clean(t.Error.Message))
		}
		var res protocol.TurnResult
		if len(t.Result) > 0 && json.Unmarshal(t.Result, &res) == nil {
			fmt.Fprintf(w, "  %s\n", clean(res.Text))
		}
	})
}
