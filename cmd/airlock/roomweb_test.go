package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockhq/airlock/internal/browsertest"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/store"
)

// browserTimeout bounds the browser session of TestRoomWebTwoDaemons.
const browserTimeout = 120 * time.Second

// TestRoomWebTwoDaemons: two real airlockd, B joined to A's bus and serving its page with
// --http. A registers the Python light and publishes set_color; B's human logs in through the
// URL `airlock room open-ui` printed, invokes set_color from the generated form in headless
// Chromium, and sees the result and the call in the live log, which A's adapter really ran. A
// screenshot is saved. No bulb endpoint, adapter stderr, host key, join code or login token
// shows in the page, its console, the CLI outputs or either daemon's log.
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
	b := startRoomHost(t, "--nats-url", sa.NATSURL, "--http", "127.0.0.1:0")
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
		return len(caps.Capabilities) == 1
	})

	// The plain output is the URL on its own line; --json has it in data.
	plain := b.cli("", "room", "open-ui").wantCode(t, exitOK)
	if first, _, _ := strings.Cut(plain.stdout, "\n"); !strings.HasPrefix(first, "http://127.0.0.1:") || !strings.Contains(first, "/login?token=") {
		t.Fatalf("open-ui printed %q", plain.stdout)
	}
	var login struct {
		URL string `json:"url"`
	}
	b.data(&login, "room", "open-ui")
	origin, _, _ := strings.Cut(login.URL, "/login?")
	token := login.URL[strings.Index(login.URL, "token=")+len("token="):]

	profile := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root in a container has no user namespace for the sandbox
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1400, 900),
	)
	allocCtx, allocCancel := chromedp.NewExecAllocator(ctx, opts...)
	defer allocCancel()
	bctx, bcancel := chromedp.NewContext(allocCtx)
	defer bcancel()
	var (
		consoleMu sync.Mutex
		console   []chromedp.ConsoleMessage
		consoleWG sync.WaitGroup
	)
	defer func() {
		if err := chromedp.Cancel(bctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("closing chromium: %v", err)
		}
		allocCancel()
		consoleWG.Wait()
		if left := browsertest.ProcessesWith(profile); len(left) > 0 {
			t.Errorf("chromium processes left after the test: %v", left)
		}
	}()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	messages := chromedp.Console(bctx)
	consoleWG.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			consoleMu.Lock()
			console = append(console, m)
			consoleMu.Unlock()
		}
	})
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	poll := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr)); err != nil {
			html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, html)
		}
	}
	const (
		lightForm = `.cap[data-capability="living_room_light"] form[data-action="set_color"]`
		lightObs  = `.cap[data-capability="living_room_light"] pre.observation`
	)

	step("log in", chromedp.Navigate(login.URL))
	poll("the token to leave the address bar", `location.href === "`+origin+`/"`)
	poll("the room", `document.querySelector('#room-list button[data-room="home"].selected') !== null`)
	poll("A's light with its set_color form", `document.querySelector('`+lightForm+` input[name="color"]') !== null`)
	poll("the observation", `(document.querySelector('`+lightObs+`')||{}).textContent.includes('"color"')`)
	poll("the live stream", `document.getElementById('status').textContent === 'live'`)

	step("run set_color",
		chromedp.SetValue(chromedp.CSS(lightForm+` input[name="color"]`), "#12AB56"),
		chromedp.Click(chromedp.CSS(lightForm+` button[type="submit"]`)))
	poll("the result", `(document.querySelector('`+lightForm+` pre.result')||{}).textContent.includes('"#12ab56"')`)
	poll("the call in the live log", `[...document.querySelectorAll('#log-list li[data-kind="call"][data-outcome="ok"]')].some(li => li.textContent.includes('set_color'))`)
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(browsertest.ArtifactDir(t), "web-two-daemons.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))

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

	shown, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shown, "set_color") || !strings.Contains(shown, "#12ab56") {
		t.Fatal("the page snapshot lacks what it showed; the scan would prove nothing")
	}

	// Make the adapter write to its stderr (the bulb gone) and the page show the failure, for
	// the canary scan.
	bl.stop(t)
	step("reload", chromedp.Navigate(origin+"/"))
	poll("the observation's failure", `(document.querySelector('`+lightObs+`')||{textContent: ''}).textContent.startsWith('unavailable')`)
	var logs struct {
		Lines []string `json:"lines"`
	}
	a.data(&logs, "adapter", "logs", "light")
	html, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}

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
	consoleMu.Lock()
	for _, m := range console {
		check("the browser console", m.Text)
		// The observation's 503 is the one failed load this test provokes.
		if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
			t.Errorf("browser console: %s", m)
		}
	}
	consoleMu.Unlock()
	for where, l := range map[string]string{"A's log": a.d.Stderr(), "B's log": b.d.Stderr()} {
		check(where, l)
		if strings.Contains(l, token) {
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
// so its adapter tied to the room stops and is removed, and its publications are withdrawn.
func TestRoomOwnerCloseStopsMemberAdapter(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	a := startRoomHost(t)
	var sa roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-url", sa.NATSURL)
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
		return len(caps.Capabilities) == 1
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
}
