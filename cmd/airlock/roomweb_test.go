package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/browsertest"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/store"
)

// TestRoomWebTwoDaemons: two real airlockd, B joined to A's bus and serving its page with
// --http. A registers the Python light and publishes set_color; B's human logs in through the
// URL `airlock room open-ui` printed, invokes set_color from the generated form in headless
// Chromium, and sees the result and the call in the live log, which A's adapter really ran,
// and in the history view, from B's audit journal (door web; A's records it provided). A
// screenshot is saved. No bulb endpoint, adapter stderr, host key, join code or login token
// shows in the page, its console, the CLI outputs, either daemon's log or either journal.
func TestRoomWebTwoDaemons(t *testing.T) {
	exe := browsertest.Chromium(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the room test runs the Python light")
	}
	bl := startBulb(t, python)
	config := filepath.Join(t.TempDir(), "light.json")
	if err := os.WriteFile(config, []byte(`{"bulb": "`+bl.base+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startRoomHost(t)
	var sa roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-via", a.d.Socket, "--http", "127.0.0.1:0")
	a.refused("ui_disabled", "room", "open-ui")

	a.cli("", "adapter", "register", "light", "--", python, exampleFile(t, "python-light", "light.py"), config).wantCode(t, exitOK)
	a.cli("", "room", "create", "home", "--title", "Home").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "home", "--name", "bob")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)
	a.cli("", "room", "publish", "--room", "home", "--cap", "living_room_light", "--actions", "set_color", "--observe").wantCode(t, exitOK)
	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	waitFor(t, "B to see A's publication", func() bool {
		b.data(&caps, "room", "caps", "--room", "home")
		return described(caps.Capabilities, 1)
	})

	page := openRoomPage(t, exe, b)
	page.logIn("home")
	lightObs := `.cap[data-capability="living_room_light"] pre.observation`
	page.poll("the observation", `(document.querySelector('`+lightObs+`')||{textContent: ''}).textContent.includes('"color"')`)
	page.runAction("living_room_light", "set_color", "color", func(form string) []chromedp.Action[chromedp.Void] {
		return []chromedp.Action[chromedp.Void]{chromedp.SetValue(chromedp.CSS(form+` input[name="color"]`), "#12AB56")}
	}, `r.color === "#12ab56"`)
	page.screenshot("web-two-daemons.png")

	// The call ran at A: its adapter's light is that colour now.
	var obs struct {
		Result struct {
			Color string `json:"color"`
		} `json:"result"`
	}
	a.data(&obs, "cap", "observe", "--id", "living_room_light")
	if obs.Result.Color != "#12ab56" {
		t.Fatalf("A's light is %+v after B's page set it", obs.Result)
	}

	shown := page.html()
	if !strings.Contains(shown, "set_color") || !strings.Contains(shown, "#12ab56") {
		t.Fatal("the page snapshot lacks what it showed; the scan would prove nothing")
	}

	// Make the adapter write to its stderr (the bulb gone) and the page show the failure, for
	// the canary scan.
	bl.stop(t)
	page.step("reload", chromedp.Navigate(page.origin+"/"))
	page.poll("the observation's failure", `(document.querySelector('`+lightObs+`')||{textContent: ''}).textContent.startsWith('unavailable')`)
	// The page's history view reads B's audit journal: the call made from the page is there.
	page.poll("the call in the history view", `document.querySelector('#history-table tbody tr[data-op="room.call.made"][data-kind="outcome"][data-outcome="ok"]') !== null`)
	if st, out := effect(t, auditJSON(t, b), "room.call.made", "set_color"); st.Door != audit.DoorWeb || st.Actor.Room != "home" || st.Actor.Host != sa.HostID || out.Outcome != "ok" {
		t.Errorf("B's journal: the page's call %+v %+v, outcome %+v", st, st.Actor, out)
	}
	if st, _ := effect(t, auditJSON(t, a), "room.call.provided", "set_color"); st.Door != audit.DoorRoom || st.Actor.Room != "home" {
		t.Errorf("A's journal: the provided call %+v %+v", st, st.Actor)
	}
	var logs struct {
		Lines []string `json:"lines"`
	}
	a.data(&logs, "adapter", "logs", "light")
	html := page.html()

	canaries := map[string]string{"bulb endpoint": bl.base, "bulb port": strings.TrimPrefix(bl.base, "http://127.0.0.1"),
		"join code secret": inv.Code[strings.LastIndex(inv.Code, ".")+1:]}
	n := 0
	for _, l := range logs.Lines {
		if strings.TrimSpace(l) != "" && !strings.Contains(l, "airlock") {
			canaries["adapter stderr "+strconv.Itoa(n)] = l
			n++
		}
	}
	if n == 0 {
		t.Fatal("the adapter wrote nothing to its stderr; the canary would prove nothing")
	}
	for name, h := range map[string]*roomHost{"A": a, "B": b} {
		key, err := os.ReadFile(filepath.Join(h.d.StateDir, "host.key"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(key)), "\n")
		canaries["host key of "+name] = lines[len(lines)-1]
	}
	check := func(where, text string) {
		t.Helper()
		for name, c := range canaries {
			if strings.Contains(text, c) {
				t.Errorf("%s holds the %s (%q)", where, name, c)
			}
		}
	}
	check("the page", shown)
	check("the page after the failure", html)
	for _, m := range page.consoleMessages() {
		check("the browser console", m.Text)
		// The observation's 503 is the one failed load this test provokes.
		if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
			t.Errorf("browser console: %s", m)
		}
	}
	for name, h := range map[string]*roomHost{"A": a, "B": b} {
		files, _ := filepath.Glob(filepath.Join(audit.DirIn(h.d.StateDir), "seg-*.ndjson"))
		if len(files) == 0 {
			t.Fatalf("no journal of %s to scan", name)
		}
		for _, f := range files {
			b, _ := os.ReadFile(f)
			check(name+"'s journal "+filepath.Base(f), string(b))
		}
	}
	for where, l := range map[string]string{"A's log": a.d.Stderr(), "B's log": b.d.Stderr()} {
		check(where, l)
		if strings.Contains(l, page.token) {
			t.Errorf("%s holds the page's login token", where)
		}
	}
	for _, h := range []*roomHost{a, b} {
		h.mu.Lock()
		for i, s := range h.seen {
			if !strings.Contains(s, `"command": "room invite"`) && !strings.Contains(s, `"command": "adapter logs"`) {
				check("CLI output "+strconv.Itoa(i), s)
			}
		}
		h.mu.Unlock()
	}
}

// TestRoomCloseStopsTemporaryAdapter: an adapter registered with --room stops when that room
// closes on its host: its child exits, its registration is gone, and its publication in
// another room is withdrawn. A registration tied to a room the host is not in is refused;
// one stored so anyway (the daemon stopped between forgetting a room and removing its
// adapters) is removed at the next start.
func TestRoomCloseStopsTemporaryAdapter(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	h := startRoomHost(t)
	h.cli("", "room", "create", "home").wantCode(t, exitOK)
	h.cli("", "room", "create", "hall").wantCode(t, exitOK)
	h.cli("", "adapter", "register", "--room", "home", "lamp", "--", lamp).wantCode(t, exitOK)
	h.cli("", "room", "publish", "--room", "hall", "--cap", "desk_lamp", "--observe").wantCode(t, exitOK)
	var list struct {
		Adapters []struct {
			Name string `json:"name"`
			PID  int    `json:"pid"`
			Room string `json:"room"`
		} `json:"adapters"`
	}
	h.data(&list, "adapter", "list")
	if len(list.Adapters) != 1 || list.Adapters[0].PID <= 0 || list.Adapters[0].Room != "home" {
		t.Fatalf("adapters %+v", list.Adapters)
	}
	pid := list.Adapters[0].PID
	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	h.data(&caps, "room", "caps", "--room", "hall")
	if len(caps.Capabilities) != 1 {
		t.Fatalf("hall's capabilities %+v", caps.Capabilities)
	}

	h.cli("", "room", "close", "home").wantCode(t, exitOK)
	h.data(&list, "adapter", "list")
	if len(list.Adapters) != 0 {
		t.Fatalf("after the room closed: %+v", list.Adapters)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("the adapter's child %d still runs after its room closed", pid)
	}
	h.data(&caps, "room", "caps", "--room", "hall")
	if len(caps.Capabilities) != 0 {
		t.Fatalf("the closed room's adapter is still published in hall: %+v", caps.Capabilities)
	}
	if !strings.Contains(h.d.Stderr(), "temporary adapter removed: its room closed") {
		t.Error("the daemon did not log the removal")
	}

	// Tied to a room this host is not in: refused; stored anyway, removed once the room
	// service starts again.
	r := h.cli("", "adapter", "register", "--json", "--room", "home", "lamp", "--", lamp)
	if env := envelopeOf(t, r, "adapter register", false); r.code != exitFailure || env.Error.Code != "unknown_room" {
		t.Fatalf("register tied to a closed room: exit %d, %s", r.code, env.Error.Code)
	}
	h.d.Stop()
	st, err := store.Open(h.d.StateDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutRegistration(store.Registration{Name: "lamp", Command: lamp, Args: []string{}, Room: "nowhere"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	h2 := &roomHost{t: t, d: daemontest.Start(t, daemontest.Options{Socket: h.d.Socket, StateDir: h.d.StateDir, Args: []string{"--adapter-start-timeout", "10s"}})}
	waitFor(t, "the room service after the restart", func() bool { return h2.cli("", "room", "status").code == exitOK })
	waitFor(t, "the adapter tied to no room to go", func() bool {
		h2.data(&list, "adapter", "list")
		return len(list.Adapters) == 0
	})
}

// TestRoomOwnerCloseStopsMemberAdapter: when the owner closes a room, a member host notices
// (the owner's last roster no longer lists it): it forgets the room, as its own leave would,
// so its adapter tied to the room stops and is removed, and its publications are withdrawn;
// its audit journal records both.
func TestRoomOwnerCloseStopsMemberAdapter(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	a := startRoomHost(t)
	var sa roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-via", a.d.Socket)
	a.cli("", "room", "create", "home").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "home")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)
	b.cli("", "adapter", "register", "--room", "home", "lamp", "--", lamp).wantCode(t, exitOK)
	b.cli("", "room", "publish", "--room", "home", "--cap", "desk_lamp", "--observe").wantCode(t, exitOK)
	var list struct {
		Adapters []struct {
			PID int `json:"pid"`
		} `json:"adapters"`
	}
	b.data(&list, "adapter", "list")
	if len(list.Adapters) != 1 || list.Adapters[0].PID <= 0 {
		t.Fatalf("B's adapters %+v", list.Adapters)
	}
	pid := list.Adapters[0].PID
	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	waitFor(t, "A to see B's lamp", func() bool {
		a.data(&caps, "room", "caps", "--room", "home")
		return described(caps.Capabilities, 1)
	})

	a.cli("", "room", "close", "home").wantCode(t, exitOK)
	waitFor(t, "B's adapter tied to the closed room to go", func() bool {
		b.data(&list, "adapter", "list")
		return len(list.Adapters) == 0
	})
	if !daemontest.WaitFor(5*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		t.Fatalf("B's adapter child %d still runs after its room closed", pid)
	}
	var rooms struct {
		Rooms []struct {
			ID string `json:"id"`
		} `json:"rooms"`
	}
	b.data(&rooms, "room", "list")
	if len(rooms.Rooms) != 0 {
		t.Fatalf("B still lists %+v after the owner closed the room", rooms.Rooms)
	}
	b.refused("unknown_room", "room", "caps", "--room", "home")
	for _, want := range []string{"room closed by its owner", "temporary adapter removed: its room closed"} {
		if !strings.Contains(b.d.Stderr(), want) {
			t.Errorf("B's log lacks %q", want)
		}
	}
	// B's journal: the room closed (door daemon), then its adapter removed for it.
	var events []string
	for _, r := range auditJSON(t, b, "--door", "daemon") {
		if r.Actor != nil && r.Actor.Room == "home" {
			events = append(events, r.Target.Op+":"+r.Outcome)
		}
	}
	if strings.Join(events, " ") != "room.closed:ok adapter.remove:room_closed" {
		t.Errorf("B's journal of the room's close: %v", events)
	}
}

// TestRoomWebApprovalShowsHidden: B calls A's approve-each set_color with a colour holding a
// right-to-left override ("pay 10\u202e00001\u202c EUR" reads "pay 1000001 EUR" backwards
// when shown raw), in a room whose title and B's name hold an isolate and a zero-width space.
// A's human sees the pending call on A's page (airlockd --http) in headless Chromium: the args,
// the room title and B's name show each such character as <U+XXXX>, and none is anywhere in
// the document. A's human denies it from the page, and B's call fails approval_denied.
func TestRoomWebApprovalShowsHidden(t *testing.T) {
	exe := browsertest.Chromium(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the room test runs the Python light")
	}
	bl := startBulb(t, python)
	config := filepath.Join(t.TempDir(), "light.json")
	if err := os.WriteFile(config, []byte(`{"bulb": "`+bl.base+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startRoomHost(t, "--http", "127.0.0.1:0")
	var sa roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-via", a.d.Socket)
	a.cli("", "adapter", "register", "light", "--", python, exampleFile(t, "python-light", "light.py"), config).wantCode(t, exitOK)
	a.cli("", "room", "create", "home", "--title", "Home\u2066 sweet\u2069").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "home", "--name", "bob\u200b")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)
	a.cli("", "room", "publish", "--room", "home", "--cap", "living_room_light", "--actions", "set_color", "--approve-each").wantCode(t, exitOK)
	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	waitFor(t, "B to see the approval requirement", func() bool {
		b.data(&caps, "room", "caps", "--room", "home")
		return described(caps.Capabilities, 1) && caps.Capabilities[0].Actions[0].ApproveEach
	})

	done := make(chan result, 1)
	go func() {
		done <- cli(t, b.d.Socket, "", "room", "invoke", "--json", "--room", "home", "--cap", "living_room_light",
			"--action", "set_color", "--args", `{"color":"pay 10\u202e00001\u202c EUR"}`)
	}()
	page := openRoomPage(t, exe, a)
	page.logIn("home")
	const pending = `#approval-list li[data-approval]`
	page.poll("the pending call's args, escaped", `(document.querySelector('`+pending+` pre')||{textContent: ''}).textContent ===
		'{\n  "color": "pay 10<U+202E>00001<U+202C> EUR"\n}'`)
	page.poll("the room title, escaped", `(document.querySelector('#room h3')||{textContent: ''}).textContent === 'Home<U+2066> sweet<U+2069>'`)
	page.poll("B's name, escaped", `[...document.querySelectorAll('#room table.members td')].some(td => td.textContent === 'bob<U+200B>')`)
	if n, err := chromedp.Run(page.ctx, chromedp.Evaluate[int](`(document.documentElement.outerHTML.match(/[\u200b-\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069\ufeff]/g) || []).length`)); err != nil || n != 0 {
		t.Errorf("the page holds %d hidden characters (%v)", n, err)
	}
	page.screenshot("web-approval-hidden.png")
	page.step("deny", chromedp.Click(chromedp.CSS(pending+` button.deny`)))
	page.poll("the denial in the live log", `document.querySelector('#log-list li[data-kind="approval"][data-outcome="denied"]') !== null`)
	if env := envelopeOf(t, <-done, "room invoke", false); env.Error.Code != "approval_denied" {
		t.Fatalf("B's call after the denial: %s", env.Error.Code)
	}
}
