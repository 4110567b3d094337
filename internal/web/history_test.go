package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
)

// historyJournal writes a real audit journal: a session's fs.write (started, outcome), a room
// call provided in kitchen, a policy refusal, then events sessions "s0".."s{events-1}" open,
// and returns its directory.
func historyJournal(t *testing.T, events int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "audit")
	j, _, err := audit.Open(dir, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	app := func(e audit.Entry) audit.Ref {
		t.Helper()
		r, err := j.Append(e)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	st := app(audit.Entry{Kind: audit.KindStarted, Door: audit.DoorOwner, Actor: audit.Actor{PID: 42, Exe: "/usr/bin/harness", Session: "agent", Generation: 2},
		Target: audit.Target{Op: "fs.write", Path: "notes.txt"}, Args: json.RawMessage(`{"path":"notes.txt","content":"` + canary + `"}`)})
	app(audit.Entry{Kind: audit.KindOutcome, Ref: st.Seq, Door: audit.DoorOwner, Actor: audit.Actor{Session: "agent", Generation: 2},
		Target: audit.Target{Op: "fs.write", Path: "notes.txt"}, Outcome: "ok", Duration: 1500 * time.Microsecond})
	st = app(audit.Entry{Kind: audit.KindStarted, Door: audit.DoorRoom, Actor: audit.Actor{Room: "kitchen", Host: "b0b"},
		Target: audit.Target{Op: "room.call.provided", Capability: "living_room_light", Action: "set_color"}})
	app(audit.Entry{Kind: audit.KindOutcome, Ref: st.Seq, Door: audit.DoorRoom, Actor: audit.Actor{Room: "kitchen", Host: "b0b"},
		Target: audit.Target{Op: "room.call.provided", Capability: "living_room_light", Action: "set_color"}, Outcome: "busy"})
	app(audit.Entry{Kind: audit.KindDecision, Door: audit.DoorRoom, Actor: audit.Actor{Room: "kitchen", Host: "b0b"},
		Target: audit.Target{Op: "room.call.provided", Capability: "desk_lamp", Action: "set_power"}, Outcome: "policy_denied"})
	for i := range events {
		app(audit.Entry{Kind: audit.KindEvent, Door: audit.DoorDaemon, Actor: audit.Actor{Session: fmt.Sprintf("s%d", i)},
			Target: audit.Target{Op: "session.open"}, Outcome: "ok"})
	}
	return dir
}

func getHistory(t *testing.T, hc *http.Client, base, query string) (int, HistoryPage, string) {
	t.Helper()
	resp, err := hc.Get(base + "/api/history" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p HistoryPage
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("history %s: %v", b, err)
		}
	}
	return resp.StatusCode, p, string(b)
}

// TestHistoryReadsTheJournal: /api/history pages through a real audit journal newest first,
// bounded (50 by default, at most 200, Next for the older page), filtered by session, room
// and door, without the arguments; bad parameters are refused invalid_request; a daemon
// without a journal answers history_unavailable; it needs the login.
func TestHistoryReadsTheJournal(t *testing.T) {
	dir := historyJournal(t, 120)
	_, hc, base := startServerWith(t, newTestBackend(), JournalHistory(dir))

	code, p, _ := getHistory(t, hc, base, "")
	if code != http.StatusOK || len(p.Entries) != DefaultHistoryPage || p.Entries[0].Seq <= p.Entries[1].Seq || p.Next != p.Entries[len(p.Entries)-1].Seq {
		t.Fatalf("first page: %d, %d entries, next %d", code, len(p.Entries), p.Next)
	}
	seen := map[uint64]bool{}
	pages := 0
	for before := uint64(0); ; pages++ {
		q := "?limit=40"
		if before != 0 {
			q += fmt.Sprintf("&before=%d", before)
		}
		_, p, _ := getHistory(t, hc, base, q)
		for _, e := range p.Entries {
			if seen[e.Seq] || (before != 0 && e.Seq >= before) {
				t.Fatalf("seq %d twice or not before %d", e.Seq, before)
			}
			seen[e.Seq] = true
		}
		if p.Next == 0 {
			break
		}
		before = p.Next
	}
	if len(seen) != 125 || pages != 3 {
		t.Fatalf("paging saw %d records in %d pages, want 125 in 4", len(seen), pages+1)
	}

	_, p, raw := getHistory(t, hc, base, "?session=agent")
	if len(p.Entries) != 2 || p.Entries[1].Kind != "started" || p.Entries[1].Path != "notes.txt" || p.Entries[1].Exe != "/usr/bin/harness" ||
		p.Entries[1].ArgsSHA256 == "" || p.Entries[0].Outcome != "ok" || p.Entries[0].DurationUs != 1500 {
		t.Fatalf("session agent: %s", raw)
	}
	if strings.Contains(raw, canary) {
		t.Fatal("the history shows the arguments")
	}
	_, p, raw = getHistory(t, hc, base, "?room=kitchen&door=room")
	if len(p.Entries) != 3 || p.Entries[0].Kind != "decision" || p.Entries[0].Outcome != "policy_denied" || p.Entries[2].Host != "b0b" {
		t.Fatalf("room kitchen: %s", raw)
	}
	for _, q := range []string{"?door=window", "?limit=0", "?limit=201", "?before=x"} {
		if code, _, raw := getHistory(t, hc, base, q); code != http.StatusBadRequest || !containsCode(raw, CodeBadRequest) {
			t.Errorf("%s: %d %s", q, code, raw)
		}
	}
	// Without the login.
	if resp, err := http.Get(base + "/api/history"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("history without a login: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	_, hc2, base2 := startServerWith(t, newTestBackend(), nil)
	if code, _, raw := getHistory(t, hc2, base2, ""); code != http.StatusNotFound || !containsCode(raw, CodeHistoryUnavailable) {
		t.Fatalf("no journal: %d %s", code, raw)
	}
}

func containsCode(raw, code string) bool { return strings.Contains(raw, `"code":"`+code+`"`) }
