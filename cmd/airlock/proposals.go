package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
)

// proposalRow is the part of a proposal's status that adapter proposals prints.
type proposalRow struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	State      string `json:"state"`
	SessionID  string `json:"sessionId"`
	Generation int64  `json:"generation"`
	Plan       struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
	} `json:"plan"`
	Error *struct {
		Code string `json:"code"`
	} `json:"error"`
	Publication *struct {
		Room  string `json:"room"`
		State string `json:"state"`
	} `json:"publication"`
}

// adapterProposals lists agents' adapter proposals (listProposals): every one, or those of
// one session generation.
func (a *app) adapterProposals(ctx context.Context, args []string) int {
	o, fs := a.newCommand("adapter proposals")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {proposals}")
	session := fs.String("session", "", "only the proposals of this `SESSION` (with --generation)")
	generation := fs.Int64("generation", 0, "the session's generation `N`")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	cmd := client.Command{Operation: protocol.OpListProposals, Payload: protocol.ListProposalsPayload{}}
	if (*session != "") != (*generation != 0) || *generation < 0 {
		return a.failUsage(o, usageErrorf("--session and --generation go together"))
	}
	if *session != "" {
		cmd.SessionID, cmd.Generation = *session, generation
	}
	data, err := a.call(ctx, protocol.Version2, cmd)
	if err != nil {
		return o.fail(err)
	}
	var res struct {
		Proposals []proposalRow `json:"proposals"`
	}
	if err := decodeData(data, &res); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) { printProposals(w, res.Proposals) })
}

func printProposals(w io.Writer, ps []proposalRow) {
	t := newTable(w)
	fmt.Fprintln(t, "ID\tADAPTER\tSTATE\tSESSION\tERROR\tPUBLICATION\tRUNS")
	for _, p := range ps {
		errCode, pub := "-", "-"
		if p.Error != nil {
			errCode = p.Error.Code
		}
		if p.Publication != nil {
			pub = p.Publication.Room + " " + p.Publication.State
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s/%d\t%s\t%s\t%s\n", p.ID, p.Name, p.State, p.SessionID, p.Generation, errCode, pub,
			strings.Join(append([]string{p.Plan.Command}, p.Plan.Args...), " "))
	}
	t.Flush()
}
