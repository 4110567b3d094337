package main

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// secretNotice is what a caller posts to the notice board: text that trips the runtime's
// sensitive_text screen (a sensitive word, then ':'). secretPart is the part that must never
// reach a log, a status or an error.
const (
	secretNotice = "wifi password: hunter2"
	secretPart   = "hunter2"
)

// boardState is what adapter list --json says of the notice board's adapter.
type boardState struct {
	Adapters []protocol.AdapterState `json:"adapters"`
}

func (h *roomHost) board() protocol.AdapterState {
	h.t.Helper()
	var st boardState
	h.data(&st, "adapter", "list")
	for _, a := range st.Adapters {
		if a.Name == "board" {
			return a
		}
	}
	h.t.Fatalf("no adapter board in %+v", st.Adapters)
	return protocol.AdapterState{}
}

// withheld runs a --json command that must fail with result_withheld, not retryable, with a
// message that names the screen and quotes nothing of the result.
func (h *roomHost) withheld(args ...string) {
	h.t.Helper()
	r := h.cli("", append(args, "--json")...)
	if r.code != exitFailure {
		h.t.Fatalf("%v: exit %d, want %d\n%s%s", args, r.code, exitFailure, r.stdout, r.stderr)
	}
	env := envelopeOf(h.t, r, strings.Join(args[:2], " "), false)
	if e := env.Error; e.Code != "result_withheld" || e.Retryable || strings.Contains(e.Message, secretPart) ||
		strings.Contains(e.Message, "password") {
		h.t.Fatalf("%v: error %+v, want result_withheld, not retryable, without the text", args, e)
	}
}

// TestNoticeBoardWithheldResults is the notice board of the reliability issue, with real
// binaries: airlockd, the noticeboard adapter child, and a second airlockd calling it through
// a room. A post whose text trips the sensitive_text screen is stored by the adapter, and its
// caller is told result_withheld (not unavailable, not retryable); the adapter's pid does not
// change (no kill, no restart); every observe of the board fails the same way while it holds
// the notice, while clear still works, and observe works again once it is cleared. The
// operator's log and status name the capability, the call and the screen, and nothing of the
// text. A room member calling the board is told the same code by the provider.
func TestNoticeBoardWithheldResults(t *testing.T) {
	nb := daemontest.Build(t, "./internal/daemontest/noticeboard")
	a := startRoomHost(t)
	a.cli("", "adapter", "register", "board", "--", nb).wantCode(t, exitOK)
	st := a.board()
	pid := st.PID
	if st.State != "ready" || pid == 0 {
		t.Fatalf("board after register: %+v", st)
	}
	samePID := func(when string) {
		t.Helper()
		if st := a.board(); st.State != "ready" || st.PID != pid || st.Restarts != 0 || st.LastFailure != "" {
			t.Fatalf("%s: board %+v, want ready, pid %d, no restart, no failure", when, st, pid)
		}
	}

	// The local door: the CLI over the owner socket.
	post := []string{"cap", "invoke", "--id", "notice_board", "--action", "post", "--args", `{"text":"` + secretNotice + `"}`}
	a.withheld(post...)
	samePID("after the post")
	a.withheld("cap", "observe", "--id", "notice_board")
	a.withheld("cap", "observe", "--id", "notice_board")
	samePID("after two observes")
	// The post was stored: an innocent post still answers, and the board still withholds.
	var res struct {
		Result struct {
			Posted  string `json:"posted"`
			Notices int    `json:"notices"`
		} `json:"result"`
	}
	a.data(&res, "cap", "invoke", "--id", "notice_board", "--action", "post", "--args", `{"text":"lunch at noon"}`)
	if res.Result.Posted != "lunch at noon" || res.Result.Notices != 2 {
		t.Fatalf("an innocent post: %+v", res.Result)
	}
	a.withheld("cap", "observe", "--id", "notice_board")
	// The human form says it too, on stderr.
	if r := a.cli("", "cap", "observe", "--id", "notice_board"); r.code != exitFailure ||
		!strings.Contains(r.stderr, "airlock: result_withheld:") || strings.Contains(r.stderr, secretPart) {
		t.Fatalf("cap observe, human: %d %q", r.code, r.stderr)
	}

	// The operator sees which capability, which call, which screen; never the text.
	st = a.board()
	if w := st.LastWithheld; st.Withheld != 5 || w == nil || w.CapabilityID != "notice_board" || w.Method != "observe" ||
		w.Screen != "sensitive_text" {
		t.Fatalf("board status: %d withheld, last %+v", st.Withheld, st.LastWithheld)
	}
	var logs struct {
		Lines []string `json:"lines"`
	}
	a.data(&logs, "adapter", "logs", "board")
	var postLine, observeLines int
	for _, l := range logs.Lines {
		switch l {
		case "[airlock] result withheld: capability notice_board, invoke post: the result failed the sensitive_text screen; the adapter keeps running":
			postLine++
		case "[airlock] result withheld: capability notice_board, observe: the result failed the sensitive_text screen; the adapter keeps running":
			observeLines++
		}
	}
	if postLine != 1 || observeLines != 4 {
		t.Fatalf("adapter logs hold %d post and %d observe lines, want 1 and 4:\n%s", postLine, observeLines, strings.Join(logs.Lines, "\n"))
	}
	if r := a.cli("", "adapter", "list"); !strings.Contains(r.stdout, "WITHHELD") ||
		!strings.Contains(r.stdout, "5 (last: notice_board observe, sensitive_text screen)") {
		t.Fatalf("adapter list:\n%s", r.stdout)
	}

	// The room door: B calls A's board through the room, and A's provider sends B the code.
	var sa roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-via", a.d.Socket)
	a.cli("", "room", "create", "board-room").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "board-room", "--name", "bob")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)
	a.cli("", "room", "publish", "--room", "board-room", "--cap", "notice_board", "--actions", "post,clear", "--observe").wantCode(t, exitOK)
	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	waitFor(t, "B to see A's board", func() bool {
		b.data(&caps, "room", "caps", "--room", "board-room")
		return described(caps.Capabilities, 1)
	})
	b.withheld("room", "observe", "--room", "board-room", "--cap", "notice_board")
	b.withheld("room", "invoke", "--room", "board-room", "--cap", "notice_board", "--action", "post", "--args", `{"text":"`+secretNotice+`"}`)
	samePID("after the room calls")
	// Clear still works, through the room, and observe works again: in both doors.
	var cleared struct {
		Result struct {
			Cleared int `json:"cleared"`
		} `json:"result"`
	}
	b.data(&cleared, "room", "invoke", "--room", "board-room", "--cap", "notice_board", "--action", "clear")
	if cleared.Result.Cleared != 3 {
		t.Fatalf("clear through the room cleared %d notices, want 3", cleared.Result.Cleared)
	}
	var board struct {
		Result struct {
			Notices []string `json:"notices"`
		} `json:"result"`
	}
	b.data(&board, "room", "observe", "--room", "board-room", "--cap", "notice_board")
	if board.Result.Notices == nil || len(board.Result.Notices) != 0 {
		t.Fatalf("B's observe after the clear: %+v", board.Result)
	}
	a.data(&board, "cap", "observe", "--id", "notice_board")
	if board.Result.Notices == nil || len(board.Result.Notices) != 0 {
		t.Fatalf("A's observe after the clear: %+v", board.Result)
	}
	samePID("after the clear")
	if st := a.board(); st.Withheld != 7 || st.LastWithheld == nil || st.LastWithheld.Method != "invoke" || st.LastWithheld.Action != "post" {
		t.Fatalf("board status after the room calls: %d withheld, last %+v", st.Withheld, st.LastWithheld)
	}

	// Nothing of the text reached an output, a log or a status, on either host.
	for _, h := range []*roomHost{a, b} {
		h.mu.Lock()
		seen := strings.Join(h.seen, "\n")
		h.mu.Unlock()
		// The posts' own --args are not in seen (only outputs are), so any hit is a leak.
		if strings.Contains(seen, secretPart) {
			t.Fatalf("a CLI output carries the withheld text:\n%s", seen)
		}
		if strings.Contains(h.d.Stderr(), secretPart) {
			t.Fatalf("airlockd's log carries the withheld text")
		}
	}
}
