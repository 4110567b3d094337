package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
)

// absScript returns args with the script of an interpreter command (capclient.ScriptPath: the
// first argument that is no option and names a file, here in this directory) made absolute.
// The daemon runs the child in its own directory, where `python3 counter.py` names another
// file or none, while airlock validate capability, run here, found this one; and the script
// is the file whose SHA-256 the registration records. Other arguments are sent as written.
func absScript(command string, args []string) []string {
	dir, err := os.Getwd()
	if err != nil {
		return args
	}
	script := capclient.ScriptPath(command, args, dir)
	if script == "" {
		return args
	}
	for i, arg := range args {
		if !strings.HasPrefix(arg, "-") && !filepath.IsAbs(arg) && filepath.Join(dir, arg) == script {
			out := slices.Clone(args)
			out[i] = script
			return out
		}
	}
	return args
}

// adapterRegister approves and starts an adapter: airlock adapter register NAME -- CMD [ARGS…].
// The daemon starts and validates it before persisting the registration. A command given with
// a directory part, and an interpreter's script (absScript), are made absolute here, since the
// daemon runs in another directory; a bare name is looked up in the daemon's PATH. --room, or --session with --generation, tie it to a
// room or a session generation, and --lease ends it after a duration: a temporary adapter.
// --pass-env NAME (repeatable) passes that variable from the daemon's environment to the
// adapter: the name is part of the approval; the value is the daemon's, never sent or stored.
func (a *app) adapterRegister(ctx context.Context, args []string) int {
	o, fs := a.newCommand("adapter register")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {adapter}")
	room := fs.String("room", "", "tie the registration to room `ID`: closing the room removes it")
	session := fs.String("session", "", "tie the registration to session `ID` (with --generation): ending that generation removes it")
	generation := fs.Int64("generation", 0, "the session `generation` of --session")
	lease := fs.Duration("lease", 0, "remove the registration after this `duration` (e.g. 2h; at most 720h)")
	var passEnv listFlag
	fs.Var(&passEnv, "pass-env", "pass the variable `NAME` from the daemon's environment to the adapter (repeatable; its value is never stored or shown)")
	sep := slices.Index(args, "--")
	if sep < 0 {
		if slices.Contains(args, "-h") || slices.Contains(args, "--help") || slices.Contains(args, "-help") {
			a.parse(o, fs, []string{"-h"})
			return exitOK
		}
		return a.failUsage(o, usageErrorf("the adapter command follows --: airlock adapter register NAME -- CMD [ARGS…]"))
	}
	pos, code, done := a.parse(o, fs, args[:sep], "NAME")
	if done {
		return code
	}
	if *lease < 0 || (*lease > 0 && *lease < time.Second) || *lease > protocol.MaxAdapterLeaseSeconds*time.Second {
		return a.failUsage(o, usageErrorf("--lease must be between 1s and 720h"))
	}
	if (*session == "") != (*generation == 0) {
		return a.failUsage(o, usageErrorf("--session and --generation go together"))
	}
	argv := args[sep+1:]
	if len(argv) == 0 || argv[0] == "" {
		return a.failUsage(o, usageErrorf("missing the adapter command after --"))
	}
	command := argv[0]
	if strings.ContainsRune(command, '/') {
		abs, err := filepath.Abs(command)
		if err != nil {
			return a.failUsage(o, usageErrorf("command %q: %v", command, err))
		}
		command = abs
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpRegisterAdapter,
		Payload: protocol.RegisterAdapterPayload{Name: pos[0], Command: command, Args: absScript(command, argv[1:]), PassEnv: passEnv, Room: *room,
			SessionID: *session, Generation: *generation, LeaseSeconds: int64(lease.Round(time.Second) / time.Second)}})
	if err != nil {
		return o.fail(err)
	}
	var res struct {
		Adapter protocol.AdapterState `json:"adapter"`
	}
	if err := decodeData(data, &res); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		fmt.Fprintf(w, "registered %s: %s, pid %d, capabilities %s\n", res.Adapter.Name, res.Adapter.State,
			res.Adapter.PID, strings.Join(res.Adapter.Capabilities, ", "))
		if t := tieOf(res.Adapter); t != "-" {
			fmt.Fprintf(w, "temporary: %s\n", t)
		}
		if len(res.Adapter.PassEnv) > 0 {
			fmt.Fprintf(w, "passed from the daemon's environment: %s\n", strings.Join(res.Adapter.PassEnv, ", "))
		}
		if len(res.Adapter.PassEnvUnset) > 0 {
			fmt.Fprintf(a.stderr, "airlock: note: the daemon's environment does not set %s: the adapter starts without it; set it where airlockd starts (its service's Environment=, say), then restart airlockd\n",
				strings.Join(res.Adapter.PassEnvUnset, ", "))
		}
	})
}

// adapterApprove accepts an adapter's files as they are now: airlock adapter approve NAME. The
// daemon re-records their SHA-256 and starts the adapter when they changed.
func (a *app) adapterApprove(ctx context.Context, args []string) int {
	o, fs := a.newCommand("adapter approve")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {adapter, restarted, digests}")
	pos, code, done := a.parse(o, fs, args, "NAME")
	if done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpApproveAdapter,
		Payload: protocol.AdapterNamePayload{Name: pos[0]}})
	if err != nil {
		return o.fail(err)
	}
	var res struct {
		Adapter   protocol.AdapterState `json:"adapter"`
		Restarted bool                  `json:"restarted"`
		Digests   []struct {
			Role string `json:"role"`
			Path string `json:"path"`
			Old  string `json:"old"`
			New  string `json:"new"`
		} `json:"digests"`
	}
	if err := decodeData(data, &res); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		t := newTable(w)
		fmt.Fprintln(t, "FILE\tPATH\tOLD SHA-256\tNEW SHA-256")
		for _, d := range res.Digests {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", d.Role, d.Path, orDash(d.Old), orDash(d.New))
		}
		t.Flush()
		if res.Restarted {
			fmt.Fprintf(w, "approved %s: %s, pid %d\n", res.Adapter.Name, res.Adapter.State, res.Adapter.PID)
		} else {
			fmt.Fprintf(w, "%s is unchanged: nothing to approve\n", res.Adapter.Name)
		}
	})
}

// capabilitiesOf renders an adapter's capability ids, marking those whose last calls all
// ended unavailable.
func capabilitiesOf(s protocol.AdapterState) string {
	ids := make([]string, 0, len(s.Capabilities))
	for _, id := range s.Capabilities {
		if slices.Contains(s.UnavailableCapabilities, id) {
			id += "(calls_unavailable)"
		}
		ids = append(ids, id)
	}
	return strings.Join(ids, ",")
}

// tieOf renders an adapter's tie and lease for the list.
func tieOf(s protocol.AdapterState) string {
	var parts []string
	switch {
	case s.Room != "":
		parts = append(parts, "room "+s.Room)
	case s.SessionID != "":
		parts = append(parts, fmt.Sprintf("session %s gen %d", s.SessionID, s.Generation))
	}
	if !s.LeaseExpiresAt.IsZero() {
		parts = append(parts, "lease until "+s.LeaseExpiresAt.Local().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// digestsOf renders an adapter's recorded digest prefixes, with old→new for a changed file.
func digestsOf(s protocol.AdapterState) string {
	var parts []string
	for _, d := range s.Digests {
		p := d.Role + ":" + d.Recorded
		if d.Current != "" {
			p += "→" + d.Current
		}
		parts = append(parts, p)
	}
	return orDash(strings.Join(parts, ","))
}

func (a *app) adapterRemove(ctx context.Context, args []string) int {
	o, fs := a.newCommand("adapter remove")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {removed}")
	pos, code, done := a.parse(o, fs, args, "NAME")
	if done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpRemoveAdapter,
		Payload: protocol.AdapterNamePayload{Name: pos[0]}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) { fmt.Fprintf(w, "removed %s\n", pos[0]) })
}

func (a *app) adapterList(ctx context.Context, args []string) int {
	o, fs := a.newCommand("adapter list")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {adapters}")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpListAdapters})
	if err != nil {
		return o.fail(err)
	}
	var res struct {
		Adapters []protocol.AdapterState `json:"adapters"`
	}
	if err := decodeData(data, &res); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) { printAdapters(w, res.Adapters) })
}

func printAdapters(w io.Writer, adapters []protocol.AdapterState) {
	t := newTable(w)
	fmt.Fprintln(t, "ADAPTER\tSTATE\tPID\tRESTARTS\tLAST FAILURE\tWITHHELD\tCAPABILITIES\tPASS ENV\tTEMPORARY\tDIGESTS")
	for _, s := range adapters {
		pid := "-"
		if s.PID != 0 {
			pid = fmt.Sprint(s.PID)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.State, pid, s.Restarts, orDash(s.LastFailure),
			withheldOf(s), orDash(capabilitiesOf(s)), orDash(strings.Join(s.PassEnv, ",")), tieOf(s), digestsOf(s))
	}
	t.Flush()
}

// withheldOf renders how many results of an adapter were withheld, and the latest: "-", or
// "2 (last: notice_board invoke post, sensitive_text screen)".
func withheldOf(s protocol.AdapterState) string {
	w := s.LastWithheld
	if s.Withheld == 0 || w == nil {
		return "-"
	}
	call := w.Method
	if w.Action != "" {
		call += " " + w.Action
	}
	return fmt.Sprintf("%d (last: %s %s, %s screen)", s.Withheld, w.CapabilityID, call, w.Screen)
}

// adapterLogs prints an adapter's kept stderr lines: operator-only output that is never
// projected to sessions or rooms.
func (a *app) adapterLogs(ctx context.Context, args []string) int {
	o, fs := a.newCommand("adapter logs")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {name, lines}")
	pos, code, done := a.parse(o, fs, args, "NAME")
	if done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpAdapterLogs,
		Payload: protocol.AdapterNamePayload{Name: pos[0]}})
	if err != nil {
		return o.fail(err)
	}
	var res struct {
		Lines []string `json:"lines"`
	}
	if err := decodeData(data, &res); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		for _, l := range res.Lines {
			fmt.Fprintln(w, l)
		}
	})
}

// capList lists the capabilities every adapter projects, each available or not with the
// reason: its adapter is not ready (adapter_not_ready), or its last calls all ended
// unavailable (calls_unavailable).
func (a *app) capList(ctx context.Context, args []string) int {
	o, fs := a.newCommand("cap list")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {capabilities}")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpListCapabilities})
	if err != nil {
		return o.fail(err)
	}
	var res struct {
		Capabilities []struct {
			CapabilityID      string   `json:"capabilityId"`
			Title             string   `json:"title"`
			Observe           bool     `json:"observe"`
			Actions           []string `json:"actions"`
			Adapter           string   `json:"adapter"`
			Available         bool     `json:"available"`
			UnavailableReason string   `json:"unavailableReason"`
		} `json:"capabilities"`
	}
	if err := decodeData(data, &res); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		t := newTable(w)
		fmt.Fprintln(t, "CAPABILITY\tTITLE\tOBSERVE\tACTIONS\tADAPTER\tAVAILABLE")
		for _, c := range res.Capabilities {
			avail := "true"
			if !c.Available {
				avail = "false (" + orDash(c.UnavailableReason) + ")"
			}
			fmt.Fprintf(t, "%s\t%s\t%t\t%s\t%s\t%s\n", c.CapabilityID, c.Title, c.Observe,
				orDash(strings.Join(c.Actions, ",")), c.Adapter, avail)
		}
		t.Flush()
	})
}

// capCommand runs describe, observe or invoke on one capability.
func (a *app) capCommand(ctx context.Context, name, op string, args []string) int {
	o, fs := a.newCommand("cap " + name)
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope")
	id := fs.String("id", "", "capability `id`")
	var action, argsJSON *string
	if op == protocol.OpInvokeCapability {
		action = fs.String("action", "", "action `name`")
		argsJSON = fs.String("args", "{}", "action arguments as a JSON `object`")
	}
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *id == "" {
		return a.failUsage(o, usageErrorf("--id is required"))
	}
	var payload any = protocol.CapabilityPayload{CapabilityID: *id}
	if op == protocol.OpInvokeCapability {
		if *action == "" {
			return a.failUsage(o, usageErrorf("--action is required"))
		}
		raw := json.RawMessage(*argsJSON)
		if !json.Valid(raw) {
			return a.failUsage(o, usageErrorf("--args is not valid JSON"))
		}
		payload = protocol.InvokeCapabilityPayload{CapabilityID: *id, Action: *action, Args: raw}
	}
	// What the approval queue names the call by, were a policy to ask about it.
	target := *id + "." + policy.ActionObserve
	if op == protocol.OpInvokeCapability {
		target = *id + "." + *action
	}
	data, err := a.gatedCall(ctx, client.Command{Operation: op, Payload: payload}, target)
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var pretty map[string]json.RawMessage
		if json.Unmarshal(data, &pretty) != nil {
			fmt.Fprintf(w, "%s\n", data)
			return
		}
		key := "result"
		if op == protocol.OpDescribeCapability {
			key = "descriptor"
		}
		out, err := json.MarshalIndent(pretty[key], "", "  ")
		if err != nil {
			out = pretty[key]
		}
		fmt.Fprintf(w, "%s\n", out)
	})
}

func (a *app) capDescribe(ctx context.Context, args []string) int {
	return a.capCommand(ctx, "describe", protocol.OpDescribeCapability, args)
}

func (a *app) capObserve(ctx context.Context, args []string) int {
	return a.capCommand(ctx, "observe", protocol.OpObserveCapability, args)
}

func (a *app) capInvoke(ctx context.Context, args []string) int {
	return a.capCommand(ctx, "invoke", protocol.OpInvokeCapability, args)
}
