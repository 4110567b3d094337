package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/paths"
	"github.com/airlockhq/airlock/internal/protocol"
)

// The audit commands read the journal's files directly, as the operator who owns the state
// directory: they need no daemon, and work while it is down.

// auditDir returns --dir, else the journal directory under the default state directory.
func auditDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	state, err := paths.StateDir()
	if err != nil {
		return "", usageErrorf("%v; or give --dir", err)
	}
	return audit.DirIn(state), nil
}

// journalThere refuses a journal directory that does not exist, saying why there is none
// (before anything is printed, the table's header included).
func journalThere(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return protocol.Errorf(audit.CodeCorrupt, "no audit journal at %s: airlockd writes one from its first start (unless started with --audit=false); --dir names another directory", dir)
	}
	return nil
}

// parseSince reads --since: a duration back from now ("2h"), an RFC 3339 time, or a local date.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	return time.Time{}, usageErrorf("--since %q is not a duration (2h), an RFC 3339 time or a date (2026-12-05)", s)
}

func (a *app) auditRead(ctx context.Context, args []string) int {
	o, fs := a.newCommand("audit")
	dir := fs.String("dir", "", "the journal `directory` (default: audit/ in the state directory)")
	since := fs.String("since", "", "only records from this `time` on: a duration back from now (2h), an RFC 3339 time or a date")
	session := fs.String("session", "", "only records of this `session`")
	room := fs.String("room", "", "only records of this `room`")
	door := fs.String("door", "", "only records that entered at this `door`: owner, mcp, turn, room, web or daemon")
	follow := fs.Bool("follow", false, "keep printing new records, across rotation, until interrupted")
	marks := fs.Bool("marks", false, "also print the segments' header and footer records")
	fs.BoolVar(&o.json, "json", false, "print the records as NDJSON, each line exactly as the journal holds it")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	q := audit.Query{Session: *session, Room: *room, Door: audit.Door(*door), Marks: *marks}
	if *since != "" {
		t, err := parseSince(*since, time.Now())
		if err != nil {
			return a.failUsage(o, err)
		}
		q.Since = t
	}
	switch q.Door {
	case "", audit.DoorOwner, audit.DoorMCP, audit.DoorTurn, audit.DoorRoom, audit.DoorWeb, audit.DoorDaemon:
	default:
		return a.failUsage(o, usageErrorf("--door %q is not one of owner, mcp, turn, room, web, daemon", *door))
	}
	d, err := auditDir(*dir)
	if err != nil {
		return a.failUsage(o, err)
	}
	if err := journalThere(d); err != nil {
		return o.fail(err)
	}
	w := bufio.NewWriter(a.stdout)
	if !o.json {
		fmt.Fprintf(w, "%-24s %8s  %-8s %-6s %-24s %-18s %-32s %-12s %s\n", "TIME", "SEQ", "KIND", "DOOR", "WHO", "OP", "TARGET", "OUTCOME", "TOOK")
	}
	err = audit.Read(ctx, d, q, *follow, func(line []byte, rec *audit.Record) error {
		if o.json {
			w.Write(line)
			w.WriteByte('\n')
		} else {
			writeAuditRow(w, rec)
		}
		if *follow {
			return w.Flush() // a follower wants each record as it comes
		}
		return nil
	})
	if ferr := w.Flush(); err == nil && ferr != nil {
		err = transportErrorf(exitFailure, "cannot write the records: %v", ferr)
	}
	if err != nil {
		o.json = false // the records went out as NDJSON; the error goes to stderr only
		return o.fail(journalError(err, "cannot read %s", d))
	}
	return exitOK
}

// journalError is what stopped an audit command, for the operator reading their own files.
// The audit package pairs its coded error with the cause the daemon logs (protocol.Wrap), and
// the CLI prints a coded error's message alone: here the cause goes into the message, since it
// is what the operator acts on (permission denied, a segment's mode). An error with a code
// keeps it (insecure_state_path, audit_corrupt); one without is audit_corrupt, what.
func journalError(err error, what string, args ...any) error {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return protocol.Errorf(audit.CodeCorrupt, "%s: %v", fmt.Sprintf(what, args...), err)
	}
	// err.Error() is the coded error's, then its cause's: "code: message: cause".
	return &protocol.Error{Code: pe.Code, Message: strings.TrimPrefix(err.Error(), pe.Code+": "), Retryable: pe.Retryable, Details: pe.Details}
}

// writeAuditRow prints one record as a table row. Column widths are fixed so that rows print
// as they are read (a table of the whole journal would be held in memory).
func writeAuditRow(w io.Writer, r *audit.Record) {
	var who, op, target string
	if a := r.Actor; a != nil {
		switch {
		case a.Session != "":
			who = a.Session
			if a.Generation != 0 {
				who += "/" + strconv.FormatUint(a.Generation, 10)
			}
		case a.Room != "":
			who = a.Room + "@" + a.Host
		case a.MCPClient != "":
			who = "mcp:" + a.MCPClient
		case a.PID != 0:
			who = "pid " + strconv.Itoa(a.PID)
		}
	}
	if t := r.Target; t != nil {
		op = t.Op
		switch {
		case t.Path != "":
			target = t.Path
		case t.Capability != "":
			target = t.Capability
			if t.Action != "" {
				target += " " + t.Action
			}
		case t.Adapter != "":
			target = t.Adapter
		}
	}
	if r.Segment != nil {
		op = "segment"
		target = strconv.FormatUint(r.Segment.Number, 10)
	}
	outcome := r.Outcome
	if r.Kind == audit.KindOutcome {
		outcome += fmt.Sprintf(" (of %d)", r.Ref)
	}
	took := "-"
	if r.DurationUS > 0 {
		took = (time.Duration(r.DurationUS) * time.Microsecond).String()
	}
	fmt.Fprintf(w, "%-24s %8d  %-8s %-6s %-24s %-18s %-32s %-12s %s\n", r.Time.UTC().Format("2006-01-02T15:04:05.000Z"), r.Seq,
		r.Kind, orDash(string(r.Door)), orDash(who), orDash(op), orDash(target), orDash(outcome), took)
}

// auditVerifyData is what audit verify --json reports under data.
type auditVerifyData struct {
	audit.Report
	OK bool `json:"ok"`
}

func (a *app) auditVerify(ctx context.Context, args []string) int {
	o, fs := a.newCommand("audit verify")
	dir := fs.String("dir", "", "the journal `directory` (default: audit/ in the state directory)")
	head := fs.String("head", "", "an exported head `SEQ:DIGEST` the journal must still hold (from airlock audit head, or airlockd's log)")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	var anchor *audit.Anchor
	if *head != "" {
		an, err := audit.ParseAnchor(*head)
		if err != nil {
			return a.failUsage(o, usageErrorf("--head: %v", err))
		}
		anchor = &an
	}
	d, err := auditDir(*dir)
	if err != nil {
		return a.failUsage(o, err)
	}
	if err := journalThere(d); err != nil {
		return o.fail(err)
	}
	rep, err := audit.Verify(d, anchor)
	if err != nil {
		return o.fail(journalError(err, "cannot verify %s", d))
	}
	if rep.Segments == 0 {
		return o.fail(audit.NoJournal(d)) // not an intact chain of no records
	}
	data := auditVerifyData{Report: rep, OK: rep.OK()}
	if !rep.OK() {
		var msg string
		switch {
		case rep.Break != nil:
			msg = "the first broken link: " + rep.Break.String()
		default:
			msg = fmt.Sprintf("the journal's record at seq %d is not the exported head %s", rep.Anchor.Seq, *head)
		}
		if !o.json {
			a.printVerify(rep)
		}
		return o.failWith(protocol.Errorf(audit.CodeChainBroken, "%s: %s", d, msg), data)
	}
	return o.succeed(data, func(io.Writer) { a.printVerify(rep) })
}

func (a *app) printVerify(rep audit.Report) {
	w := newTable(a.stdout)
	fmt.Fprintf(w, "journal\t%s\n", clean(rep.Dir))
	fmt.Fprintf(w, "segments\t%d\n", rep.Segments)
	fmt.Fprintf(w, "records\t%d (seq %d to %d)\n", rep.Records, rep.FirstSeq, rep.LastSeq)
	if rep.Records > 0 {
		fmt.Fprintf(w, "head\t%s\n", rep.Head)
	}
	if rep.Unanchored {
		fmt.Fprintf(w, "start\tthe oldest segment links to one retention removed; checked from seq %d on\n", rep.FirstSeq)
	}
	if rep.TornBytes > 0 {
		fmt.Fprintf(w, "tail\t%d bytes after the last whole record (a record being written, or a crash's torn tail; airlockd cuts it at start)\n", rep.TornBytes)
	}
	if an := rep.Anchor; an != nil {
		switch {
		case !an.Checked:
			fmt.Fprintf(w, "anchor\tseq %d is older than the oldest kept segment: not checked\n", an.Seq)
		case an.Holds:
			fmt.Fprintf(w, "anchor\tseq %d holds\n", an.Seq)
		default:
			fmt.Fprintf(w, "anchor\tseq %d does NOT hold\n", an.Seq)
		}
	}
	if rep.Break != nil {
		fmt.Fprintf(w, "BROKEN\t%s\n", clean(rep.Break.String()))
	} else if rep.OK() {
		fmt.Fprintf(w, "chain\tintact\n")
	}
	w.Flush()
}

func (a *app) auditHead(ctx context.Context, args []string) int {
	o, fs := a.newCommand("audit head")
	dir := fs.String("dir", "", "the journal `directory` (default: audit/ in the state directory)")
	fs.BoolVar(&o.json, "json", false, "print the head as JSON")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	d, err := auditDir(*dir)
	if err != nil {
		return a.failUsage(o, err)
	}
	if err := journalThere(d); err != nil {
		return o.fail(err)
	}
	rep, err := audit.VerifyTail(d)
	if err != nil {
		return o.fail(journalError(err, "cannot read %s", d))
	}
	if rep.Break != nil {
		return o.fail(protocol.Errorf(audit.CodeChainBroken, "%s: the first broken link: %s", d, rep.Break))
	}
	if rep.Segments == 0 {
		return o.fail(audit.NoJournal(d))
	}
	if rep.Records == 0 {
		return o.fail(protocol.Errorf(audit.CodeCorrupt, "%s holds no whole record", d))
	}
	return o.succeed(rep.Head, func(w io.Writer) { fmt.Fprintln(w, rep.Head) })
}
