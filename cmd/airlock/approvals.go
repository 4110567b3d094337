package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/visible"
)

// The approval queue's verbs: every request waiting for the operator (a local call a policy
// marks ask, a room call to an approve-each publication, an agent's proposal), decided by
// id; remembered approvals listed and forgotten. room approvals, room approve and room deny
// are aliases of approvals, approve and deny.

// approvalView is a waiting request as listApprovals answers it.
type approvalView struct {
	ID            string          `json:"id"`
	Kind          string          `json:"kind"`
	Actor         gate.Actor      `json:"actor"`
	Target        string          `json:"target"`
	Path          string          `json:"path"`
	Args          json.RawMessage `json:"args"`
	ArgsTruncated bool            `json:"argsTruncated"`
	ArgsBytes     int             `json:"argsBytes"`
	ArgsDigest    string          `json:"argsDigest"`
	Reason        string          `json:"reason"`
	Detail        json.RawMessage `json:"detail"`
	Rememberable  bool            `json:"rememberable"`
	Expires       time.Time       `json:"expiresAt"`
}

// text is a peer's string made safe for a terminal: hidden characters shown as escapes,
// control characters replaced.
func text(s string) string { return clean(visible.Show(s)) }

func (a *app) approvalsList(ctx context.Context, name string, args []string) int {
	return a.roomSimple(ctx, name, protocol.OpListApprovals, args, "", nil, func(w io.Writer, data json.RawMessage) {
		var r struct {
			Approvals []approvalView `json:"approvals"`
		}
		_ = json.Unmarshal(data, &r)
		if len(r.Approvals) == 0 {
			fmt.Fprintln(w, "nothing waits for approval")
			return
		}
		for i, p := range r.Approvals {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s  %s %s, until %s\n", p.ID, p.Kind, text(p.Target), p.Expires.Local().Format(time.TimeOnly))
			fmt.Fprintf(w, "  who   %s\n", text(p.Actor.Describe()))
			if p.Path != "" {
				fmt.Fprintf(w, "  path  %s\n", text(p.Path))
			}
			fmt.Fprintf(w, "  why   %s\n", text(p.Reason))
			if len(p.Args) > 0 {
				if p.ArgsTruncated {
					var s string
					_ = json.Unmarshal(p.Args, &s)
					// What runs is the whole: its SHA-256 is what the operator can check it by.
					fmt.Fprintf(w, "  args  (first bytes of %d, SHA-256 of all %s) %s\n", p.ArgsBytes, text(p.ArgsDigest), strconv.QuoteToASCII(s))
				} else {
					fmt.Fprintf(w, "  args  %s\n", terminalJSON(p.Args))
				}
			}
			if len(p.Detail) > 0 {
				fmt.Fprintf(w, "  detail %s\n", terminalJSON(p.Detail))
			}
			if p.Rememberable {
				fmt.Fprintf(w, "  (approve --remember to let the same call run again without asking)\n")
			}
		}
	})
}

func (a *app) approvals(ctx context.Context, args []string) int {
	return a.approvalsList(ctx, "approvals", args)
}

func (a *app) roomApprovals(ctx context.Context, args []string) int {
	return a.approvalsList(ctx, "room approvals", args)
}

func (a *app) decide(ctx context.Context, name string, approve bool, args []string) int {
	o, fs := a.newCommand(name)
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {approvalId, approved, memory?}")
	var remember, anyArgs *bool
	var pattern *string
	if approve {
		remember = fs.Bool("remember", false, "remember the approval for the rest of the caller's session generation (or room membership): the same call (target and path, or target and exact arguments) runs again without asking")
		pattern = fs.String("pattern", "", "with --remember, an fs call: remember every path matching this `GLOB` (policy path syntax, e.g. src/**; it must match this call's path)")
		anyArgs = fs.Bool("any-args", false, "with --remember, a capability action: remember it with any arguments")
	}
	pos, code, done := a.parse(o, fs, args, "ID")
	if done {
		return code
	}
	p := protocol.DecideApprovalPayload{ApprovalID: pos[0], Approve: &approve}
	if approve {
		if (*pattern != "" || *anyArgs) && !*remember {
			return a.failUsage(o, usageErrorf("--pattern and --any-args go with --remember"))
		}
		p.Remember, p.Pattern, p.AnyArgs = *remember, *pattern, *anyArgs
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpDecideApproval, Payload: p})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var r struct {
			ID     string `json:"approvalId"`
			Memory *struct {
				ID string `json:"id"`
			} `json:"memory"`
		}
		_ = json.Unmarshal(data, &r)
		verb := "denied"
		if approve {
			verb = "approved"
		}
		fmt.Fprintf(w, "%s %s\n", verb, r.ID)
		if r.Memory != nil {
			fmt.Fprintf(w, "remembered as %s (airlock approvals forget %s revokes it)\n", r.Memory.ID, r.Memory.ID)
		}
	})
}

func (a *app) approve(ctx context.Context, args []string) int {
	return a.decide(ctx, "approve", true, args)
}
func (a *app) deny(ctx context.Context, args []string) int { return a.decide(ctx, "deny", false, args) }
func (a *app) roomApprove(ctx context.Context, args []string) int {
	return a.decide(ctx, "room approve", true, args)
}
func (a *app) roomDeny(ctx context.Context, args []string) int {
	return a.decide(ctx, "room deny", false, args)
}

func (a *app) approvalsRemembered(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "approvals remembered", protocol.OpListRememberedApprovals, args, "", nil, func(w io.Writer, data json.RawMessage) {
		var r struct {
			Remembered []struct {
				ID    string `json:"id"`
				Scope struct {
					Session    string `json:"session"`
					Generation int64  `json:"generation"`
					Room       string `json:"room"`
					Host       string `json:"host"`
				} `json:"scope"`
				Target  string          `json:"target"`
				Path    string          `json:"path"`
				Pattern string          `json:"pattern"`
				Args    json.RawMessage `json:"args"`
				AnyArgs bool            `json:"anyArgs"`
				By      string          `json:"by"`
				Uses    int64           `json:"uses"`
			} `json:"remembered"`
		}
		_ = json.Unmarshal(data, &r)
		t := newTable(w)
		fmt.Fprintln(t, "MEMORY\tSCOPE\tTARGET\tMATCHES\tBY\tUSES")
		for _, m := range r.Remembered {
			scope := "session " + m.Scope.Session + " gen " + strconv.FormatInt(m.Scope.Generation, 10)
			if m.Scope.Session == "" {
				scope = "room " + m.Scope.Room + " host " + short(m.Scope.Host)
			}
			match := m.Path
			switch {
			case m.Pattern != "":
				match = m.Pattern
			case m.AnyArgs:
				match = "any args"
			case len(m.Args) > 0:
				match = terminalJSON(m.Args)
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%d\n", m.ID, text(scope), text(m.Target), text(match), m.By, m.Uses)
		}
		t.Flush()
	})
}

func (a *app) approvalsForget(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "approvals forget", protocol.OpForgetApproval, args, "MEMORY",
		func(id string) any { return protocol.ForgetApprovalPayload{MemoryID: id} },
		sayMember("memoryId", "forgot %s\n"))
}

// gatedCallTimeout bounds a call that may wait for the operator at the gate (tool, cap
// observe, cap invoke): the longest approval wait the daemon allows, and callTimeout besides.
// The daemon's own approval timeout (60 s by default) ends such a wait first.
const gatedCallTimeout = approval.MaxTimeout + callTimeout

// approvalPoll is how often a gated call asks the daemon whether it waits in the approval
// queue: soon enough that a person sees why the command hangs before they wonder, rarely
// enough that a listing costs the daemon nothing.
const approvalPoll = 500 * time.Millisecond

// gatedCall runs cmd as call does, bounded by gatedCallTimeout, for a call the gate may hold
// for the operator. While it is held, one line on stderr says so, with the commands that
// decide it and until when: the call's own connection carries no such news, and a person at
// the terminal (often the operator) would otherwise see a command hang for up to the approval
// timeout. The request is found in the queue by this process's pid, the session and target.
func (a *app) gatedCall(ctx context.Context, cmd client.Command, target string) (json.RawMessage, error) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { a.tellApprovalWait(wctx, cmd.SessionID, target) })
	data, err := a.callWithin(ctx, gatedCallTimeout, protocol.Version2, cmd)
	cancel()
	wg.Wait()
	return data, err
}

// tellApprovalWait polls the approval queue until ctx ends or it has told of this process's
// request for target in session.
func (a *app) tellApprovalWait(ctx context.Context, session, target string) {
	tick := time.NewTicker(approvalPoll)
	defer tick.Stop()
	pid := os.Getpid()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpListApprovals})
		if err != nil {
			return // the call itself reports what matters
		}
		var r struct {
			Approvals []approvalView `json:"approvals"`
		}
		if json.Unmarshal(data, &r) != nil {
			return
		}
		for _, p := range r.Approvals {
			if p.Actor.PID == pid && p.Actor.Session == session && p.Target == target {
				id := text(p.ID)
				fmt.Fprintf(a.stderr, "airlock: waiting for the operator's approval until %s (%s): airlock approve %s, or airlock deny %s\n",
					p.Expires.Local().Format(time.TimeOnly), text(p.Reason), id, id)
				return
			}
		}
	}
}
