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

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/validate"
)

// faultArg is the hidden first argument of `airlock validate capability` that turns this
// binary into one of the built-in misbehaving adapters (validate.RunFaultAdapter): the fault
// probes re-execute the airlock binary itself, so no helper file has to be installed. It is
// not in the help, and the mode travels in argv because adapters get an allowlisted
// environment only.
const faultArg = "__adapter-fault"

// codeConformance is the error code of a validation run with a failed probe.
const codeConformance = "conformance"

// faultAdapter returns the command line of a built-in misbehaving adapter; tests point it at a
// built airlock binary, since the test binary does not dispatch the hidden mode.
var faultAdapter = func(mode string) (string, []string) {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exe, []string{"validate", "capability", faultArg, mode}
}

// validateCapability runs the conformance probes against an adapter:
// airlock validate capability [--action A --args JSON] [--timeout D] [--json] -- CMD [ARGS…].
// It needs no daemon: it starts the adapter itself, the way the daemon would.
func (a *app) validateCapability(ctx context.Context, args []string) int {
	if len(args) == 2 && args[0] == faultArg {
		return validate.RunFaultAdapter(args[1], a.stdin, a.stdout)
	}
	o, fs := a.newCommand("validate capability")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is the report {probes, pass, passed, failed, skipped, warnings}")
	action := fs.String("action", "", "a declared `action` to invoke with --args as the known-valid invoke (skipped without it)")
	argsJSON := fs.String("args", "", "the `JSON` object of the known-valid invoke (default {})")
	timeout := fs.Duration("timeout", capclient.DefaultCallTimeout, "the deadline of each call, within [100ms, 30s]")
	var passEnv listFlag
	fs.Var(&passEnv, "pass-env", "pass the variable `NAME` from this environment to the adapter, as adapter register --pass-env does (repeatable)")
	sep := slices.Index(args, "--")
	if sep < 0 {
		if slices.Contains(args, "-h") || slices.Contains(args, "--help") || slices.Contains(args, "-help") {
			a.parse(o, fs, []string{"-h"})
			return exitOK
		}
		return a.failUsage(o, usageErrorf("the adapter command follows --: airlock validate capability [flags] -- CMD [ARGS…]"))
	}
	if _, code, done := a.parse(o, fs, args[:sep]); done {
		return code
	}
	argv := args[sep+1:]
	if len(argv) == 0 || argv[0] == "" {
		return a.failUsage(o, usageErrorf("missing the adapter command after --"))
	}
	cfg := validate.Config{Action: *action, Timeout: *timeout, Fault: faultAdapter, Args: argv[1:], PassEnv: passEnv, ShowAdapterText: true}
	if *argsJSON != "" {
		if *action == "" {
			return a.failUsage(o, usageErrorf("--args needs --action"))
		}
		if !json.Valid([]byte(*argsJSON)) {
			return a.failUsage(o, usageErrorf("--args is not valid JSON"))
		}
		cfg.ActionArgs = json.RawMessage(*argsJSON)
	}
	command, err := resolveCommand(argv[0])
	if err != nil {
		return a.failUsage(o, err)
	}
	cfg.Command = command
	if err := cfg.Check(); err != nil {
		return a.failUsage(o, usageErrorf("%v", err))
	}
	rep := validate.RunCapability(ctx, cfg)
	if ctx.Err() != nil {
		return o.fail(ctx.Err())
	}
	if !rep.Pass {
		if !o.json {
			printReport(o.stdout, rep)
		}
		return o.failWith(&cliError{body: protocol.Error{Code: codeConformance,
			Message: fmt.Sprintf("%d of %d probes failed", rep.Failed, len(rep.Probes))}, exit: exitFailure}, rep)
	}
	return o.succeed(rep, func(w io.Writer) { printReport(w, rep) })
}

// resolveCommand returns the adapter command as the runtime would run it: a path made
// absolute, a bare name looked up in PATH.
func resolveCommand(command string) (string, error) {
	if strings.ContainsRune(command, '/') {
		abs, err := filepath.Abs(command)
		if err != nil {
			return "", usageErrorf("command %q: %v", command, err)
		}
		return abs, nil
	}
	reg, err := capclient.NormalizeRegistration(capclient.Registration{Name: "validate", Command: command})
	if err != nil {
		return "", usageErrorf("command %q not found in PATH", command)
	}
	return reg.Command, nil
}

// printReport writes one line per probe, PASS, WARN (passed with a warning, which it
// explains), SKIP or FAIL, then a summary line.
func printReport(w io.Writer, rep validate.Report) {
	for _, p := range rep.Probes {
		switch {
		case !p.Pass:
			fmt.Fprintf(w, "FAIL %s: %s\n", p.Name, clean(p.Detail))
		case p.Skipped:
			fmt.Fprintf(w, "SKIP %s: %s\n", p.Name, clean(p.Detail))
		case p.Warning:
			fmt.Fprintf(w, "WARN %s: %s\n", p.Name, clean(p.Detail))
		default:
			fmt.Fprintf(w, "PASS %s\n", p.Name)
		}
	}
	verdict := "PASS"
	if !rep.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "%s: %d passed, %d failed, %d skipped of %d probes", verdict, rep.Passed, rep.Failed, rep.Skipped, len(rep.Probes))
	if rep.Warnings > 0 {
		fmt.Fprintf(w, " (%d passed with a warning)", rep.Warnings)
	}
	fmt.Fprintln(w)
}
