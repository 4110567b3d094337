package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/validate"
)

// validateToolAdapter runs the tool-adapter conformance probes against a listening adapter:
// airlock validate tool-adapter --socket PATH --descriptor FILE|- --scratch DIR [--json].
// It needs no daemon. Here --socket is the adapter's socket, so the command has its own flag
// set rather than newCommand's, where --socket names the daemon.
func (a *app) validateToolAdapter(ctx context.Context, args []string) int {
	o := &output{stdout: a.stdout, stderr: a.stderr, command: "validate tool-adapter"}
	fs := flag.NewFlagSet("airlock validate tool-adapter", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	socket := fs.String("socket", "", "the adapter's socket `path` (default: the descriptor's endpoint.path)")
	descriptor := fs.String("descriptor", "", "the grant's descriptor JSON `file` (- for stdin); it holds the capability handle")
	scratch := fs.String("scratch", "", "the `dir`ectory the grant's root is; the harness creates and removes its fixtures there")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is the report {probes, pass, passed, failed, skipped}")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *descriptor == "" {
		return a.failUsage(o, usageErrorf("--descriptor is required"))
	}
	if *scratch == "" {
		return a.failUsage(o, usageErrorf("--scratch is required"))
	}
	raw, err := a.readDescriptor(*descriptor)
	if err != nil {
		return a.failUsage(o, err)
	}
	rep := validate.RunToolAdapter(ctx, validate.ToolConfig{Socket: *socket, Descriptor: raw, Scratch: *scratch})
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
