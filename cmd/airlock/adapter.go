package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
)

// adapterRegister approves and starts an adapter: airlock adapter register NAME -- CMD [ARGS…].
// The daemon starts and validates it before persisting the registration. A command given with
// a directory part is made absolute here, since the daemon runs in another directory; a bare
// name is looked up in the daemon's PATH.
func (a *app) adapterRegister(ctx context.Context, args []string) int {
	o, fs := a.newCommand("adapter register")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {adapter}")
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
		Payload: protocol.RegisterAdapterPayload{Name: pos[0], Command: command, Args: argv[1:]}})
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
	})
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
	fmt.Fprintln(t, "ADAPTER\tSTATE\tPID\tRESTARTS\tLAST FAILURE\tCAPABILITIES")
	for _, s := range adapters {
		pid := "-"
		if s.PID != 0 {
			pid = fmt.Sprint(s.PID)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\n", s.Name, s.State, pid, s.Restarts, orDash(s.LastFailure),
			orDash(strings.Join(s.Capabilities, ",")))
	}
	t.Flush()
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

// capList lists the capabilities every adapter projects.
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
			CapabilityID string   `json:"capabilityId"`
			Title        string   `json:"title"`
			Observe      bool     `json:"observe"`
			Actions      []string `json:"actions"`
			Adapter      string   `json:"adapter"`
			Available    bool     `json:"available"`
		} `json:"capabilities"`
	}
	if err := decodeData(data, &res); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		t := newTable(w)
		fmt.Fprintln(t, "CAPABILITY\tTITLE\tOBSERVE\tACTIONS\tADAPTER\tAVAILABLE")
		for _, c := range res.Capabilities {
			fmt.Fprintf(t, "%s\t%s\t%t\t%s\t%s\t%t\n", c.CapabilityID, c.Title, c.Observe,
				orDash(strings.Join(c.Actions, ",")), c.Adapter, c.Available)
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
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: op, Payload: payload})
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
