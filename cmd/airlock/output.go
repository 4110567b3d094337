package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Exit codes. 69, 75 and 76 are EX_UNAVAILABLE, EX_TEMPFAIL and EX_PROTOCOL of sysexits.h,
// which service managers and shell scripts already know.
const (
	exitOK          = 0
	exitFailure     = 1   // the daemon refused the command, or attach/raw ended badly
	exitUsage       = 2   // the command line is wrong
	exitUnavailable = 69  // the socket cannot be reached, or the daemon did not answer
	exitNotReady    = 75  // probe: the daemon answers but is not ready
	exitProtocol    = 76  // the peer does not speak the protocol
	exitInterrupted = 130 // SIGINT or SIGTERM ended a command that has no other clean end
)

// Error codes of the CLI itself. Everything else reported is a daemon code (protocol.Code*).
const (
	codeUsage       = "usage"
	codeTransport   = "transport"
	codeProtocol    = "protocol"
	codeInterrupted = "interrupted"
)

// cliSchema versions the --json envelope; a change that breaks a reader gets a new version.
const cliSchema = "airlock.cli/v1"

// cliError is a failure together with the exit code it causes. Its body is what --json
// reports under "error", in the same shape as a daemon error.
type cliError struct {
	body protocol.Error
	exit int
	hint string // what to do about it, for a person: a second stderr line, not in --json
}

func (e *cliError) Error() string { return e.body.Code + ": " + e.body.Message }

func usageErrorf(format string, args ...any) *cliError {
	return &cliError{body: protocol.Error{Code: codeUsage, Message: fmt.Sprintf(format, args...)}, exit: exitUsage}
}

func protocolErrorf(format string, args ...any) *cliError {
	return &cliError{body: protocol.Error{Code: codeProtocol, Message: fmt.Sprintf(format, args...)}, exit: exitProtocol}
}

func transportErrorf(exit int, format string, args ...any) *cliError {
	return &cliError{body: protocol.Error{Code: codeTransport, Message: fmt.Sprintf(format, args...), Retryable: true}, exit: exit}
}

// classify maps any error a command returns to what the CLI reports and the exit code.
func classify(err error) *cliError {
	var ce *cliError
	if errors.As(err, &ce) {
		return ce
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return &cliError{body: *pe, exit: exitFailure}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return &cliError{body: protocol.Error{Code: codeInterrupted, Message: "interrupted"}, exit: exitInterrupted}
	case errors.Is(err, client.ErrProtocol):
		return protocolErrorf("%v", err)
	case errors.Is(err, client.ErrClosed):
		return transportErrorf(exitUnavailable, "the daemon closed the connection")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return transportErrorf(exitUnavailable, "the daemon did not answer in time")
	}
	return transportErrorf(exitUnavailable, "%v", err)
}

// withoutHint is err as classify reports it, without its hint line.
func withoutHint(err error) error {
	ce := *classify(err)
	ce.hint = ""
	return &ce
}

// envelope is the one JSON object a --json command prints. Data is set when OK; probe also
// sets it on failure, so that its exitCode is machine-readable either way.
type envelope struct {
	Schema  string          `json:"schema"`
	Command string          `json:"command"`
	OK      bool            `json:"ok"`
	Data    any             `json:"data,omitempty"`
	Error   *protocol.Error `json:"error,omitempty"`
}

// output reports the result of one command on stdout and stderr.
type output struct {
	stdout, stderr io.Writer
	command        string // as typed: "status", "session open"
	json           bool
}

// succeed reports success: the envelope with data under --json, else what human writes. It
// returns exitOK, or a failure exit when stdout cannot be written.
func (o *output) succeed(data any, human func(w io.Writer)) int {
	if o.json {
		return o.emit(envelope{Schema: cliSchema, Command: o.command, OK: true, Data: data}, exitOK)
	}
	human(o.stdout)
	return exitOK
}

// fail reports err on stderr as "airlock: CODE: message", and also as the envelope under
// --json. It returns the exit code err calls for.
func (o *output) fail(err error) int {
	return o.failWith(err, nil)
}

// failWith is fail with data in the envelope (probe's exitCode).
func (o *output) failWith(err error, data any) int {
	ce := classify(err)
	fmt.Fprintf(o.stderr, "airlock: %s: %s\n", clean(ce.body.Code), clean(ce.body.Message))
	if ce.hint != "" {
		fmt.Fprintf(o.stderr, "airlock: %s\n", clean(ce.hint))
	}
	if o.json {
		body := ce.body
		o.emit(envelope{Schema: cliSchema, Command: o.command, OK: false, Data: data, Error: &body}, ce.exit)
	}
	return ce.exit
}

func (o *output) emit(env envelope, code int) int {
	enc := json.NewEncoder(o.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		fmt.Fprintf(o.stderr, "airlock: %s: cannot write output: %v\n", codeTransport, err)
		return exitFailure
	}
	return code
}

// decodeData decodes the data of a response for human output. The daemon's answer is
// decoded leniently, so that members a newer daemon adds do not break an older CLI.
func decodeData(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return protocolErrorf("the daemon's answer has no data")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return protocolErrorf("the daemon's answer is malformed: %v", err)
	}
	return nil
}

// newTable returns the tabwriter every table and key/value list is printed with; the caller
// flushes it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// clean replaces control characters, so that text a peer sent cannot drive the terminal.
// The daemon already refuses them in identifiers; this covers messages and foreign peers.
func clean(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

// orDash prints an empty value as "-" so that table columns stay aligned and visible.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return clean(s)
}

// millis renders a millisecond count as a duration rounded to what a person reads.
func millis(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// timestamp renders a time in UTC, or "-" when it is unset.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
