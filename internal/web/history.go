package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/protocol"
)

// The history view: the page's table of what happened, read from the audit journal (not from
// the live call log, which holds the last 200 calls of this page's stream in memory).

// History page sizes: a page holds DefaultHistoryPage records unless the request asks for
// fewer or more, never more than MaxHistoryPage.
const (
	DefaultHistoryPage = 50
	MaxHistoryPage     = 200
)

// HistoryQuery selects one page of the history, newest first: the records of a session, a
// room and a door ("" for any), older than Before (a seq; 0 for the newest), at most Limit.
type HistoryQuery struct {
	Session string
	Room    string
	Door    string
	Before  uint64
	Limit   int
}

// HistoryEntry is one journal record as the page shows it: no arguments (a digest at most),
// no key.
type HistoryEntry struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"` // started, outcome, decision, event
	Ref        uint64    `json:"ref,omitempty"`
	Door       string    `json:"door"`
	Session    string    `json:"session,omitempty"`
	Generation uint64    `json:"generation,omitempty"`
	Room       string    `json:"room,omitempty"`
	Host       string    `json:"host,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Exe        string    `json:"exe,omitempty"`
	MCPClient  string    `json:"mcpClient,omitempty"`
	Op         string    `json:"op"`
	Capability string    `json:"capability,omitempty"`
	Action     string    `json:"action,omitempty"`
	Path       string    `json:"path,omitempty"`
	Adapter    string    `json:"adapter,omitempty"`
	ArgsSHA256 string    `json:"argsSha256,omitempty"`
	Outcome    string    `json:"outcome,omitempty"`
	DurationUs int64     `json:"durationUs,omitempty"`
}

// HistoryPage is one page of the history, newest first. Next, when not 0, is the Before of
// the next (older) page.
type HistoryPage struct {
	Entries []HistoryEntry `json:"entries"`
	Next    uint64         `json:"next,omitempty"`
}

// History reads the page's history. It must be safe for concurrent use.
type History interface {
	History(ctx context.Context, q HistoryQuery) (HistoryPage, error)
}

// JournalHistory is the history of the audit journal in a directory, read from its files as
// `airlock audit` reads them: one line at a time, with memory bounded by the page size. A page
// reads the journal from its oldest segment up to Before, so its cost grows with the journal
// (at most its retention, 64 segments of 16 MiB by default).
type JournalHistory string

var errPageFull = errors.New("page read")

// History implements History.
func (dir JournalHistory) History(ctx context.Context, q HistoryQuery) (HistoryPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultHistoryPage
	}
	limit = min(limit, MaxHistoryPage)
	// ring keeps the newest limit+1 selected records: one more than the page tells whether
	// an older page exists.
	ring := make([]HistoryEntry, limit+1)
	n := 0
	err := audit.Read(ctx, string(dir), audit.Query{Session: q.Session, Room: q.Room, Door: audit.Door(q.Door)}, false,
		func(_ []byte, r *audit.Record) error {
			if q.Before != 0 && r.Seq >= q.Before {
				return errPageFull
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			ring[n%len(ring)] = historyEntry(r)
			n++
			return nil
		})
	if err != nil && !errors.Is(err, errPageFull) {
		if ctx.Err() != nil {
			return HistoryPage{}, ctx.Err()
		}
		code := audit.CodeCorrupt
		if pe := protocol.AsError(err); pe.Code != protocol.CodeInternal {
			code = pe.Code
		}
		return HistoryPage{}, &Error{Code: code, Message: "the audit journal cannot be read; run airlock audit verify", Err: err}
	}
	page := HistoryPage{Entries: make([]HistoryEntry, 0, min(n, limit))}
	for i := n - 1; i >= 0 && i >= n-limit; i-- {
		page.Entries = append(page.Entries, ring[i%len(ring)])
	}
	if n > limit {
		page.Next = page.Entries[len(page.Entries)-1].Seq
	}
	return page, nil
}

func historyEntry(r *audit.Record) HistoryEntry {
	e := HistoryEntry{Seq: r.Seq, Time: r.Time, Kind: string(r.Kind), Ref: r.Ref, Door: string(r.Door),
		ArgsSHA256: r.ArgsSHA256, Outcome: r.Outcome, DurationUs: r.DurationUS}
	if a := r.Actor; a != nil {
		e.Session, e.Generation, e.Room, e.Host, e.PID, e.Exe, e.MCPClient = a.Session, a.Generation, a.Room, a.Host, a.PID, a.Exe, a.MCPClient
	}
	if t := r.Target; t != nil {
		e.Op, e.Capability, e.Action, e.Path, e.Adapter = t.Op, t.Capability, t.Action, t.Path, t.Adapter
	}
	return e
}

// CodeHistoryUnavailable answers the history view of a daemon that keeps no audit journal.
const CodeHistoryUnavailable = "history_unavailable"

var historyDoors = map[string]bool{"": true, "owner": true, "mcp": true, "turn": true, "room": true, "web": true, "daemon": true}

// apiHistory answers GET /api/history?session=&room=&door=&before=&limit=.
func (s *Server) apiHistory(w http.ResponseWriter, r *http.Request, _ session) {
	if s.cfg.History == nil {
		writeError(w, http.StatusNotFound, CodeHistoryUnavailable, "this daemon keeps no audit journal (airlockd --audit=false)")
		return
	}
	v := r.URL.Query()
	q := HistoryQuery{Session: v.Get("session"), Room: v.Get("room"), Door: v.Get("door")}
	if len(q.Session) > 256 || len(q.Room) > 256 || !historyDoors[q.Door] {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "door must be owner, mcp, turn, room, web or daemon; session and room at most 256 bytes")
		return
	}
	if b := v.Get("before"); b != "" {
		n, err := strconv.ParseUint(b, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "before must be a record's seq")
			return
		}
		q.Before = n
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxHistoryPage {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "limit must be 1 to "+strconv.Itoa(MaxHistoryPage))
			return
		}
		q.Limit = n
	}
	ctx, cancel := backendCtx(w, r, RequestTimeout)
	defer cancel()
	page, err := s.cfg.History.History(ctx, q)
	if err != nil {
		s.backendError(w, "history", err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}
