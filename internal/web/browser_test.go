package web

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockhq/airlock/internal/browsertest"
)

// browserTimeout bounds the whole browser session of TestBrowser.
const browserTimeout = 90 * time.Second

// TestBrowser drives the page in headless Chromium against the scripted backend: log in with
// the token URL, see the room and its capabilities, run set_color from its generated form,
// see the result and the live call log entry, see a coded error as "code: message", approve
// the pending call, take a screenshot, and scan the page for the backend's canary.
func TestBrowser(t *testing.T) {
	exe := browsertest.Chromium(t)
	b := newTestBackend()
	s, _, _ := startServerWith(t, b, JournalHistory(historyJournal(t, DefaultHistoryPage)))
	loginURL, err := s.LoginURL()
	if err != nil {
		t.Fatal(err)
	}

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
	// Collect the console (CSP violations and script errors land there) until the end.
	var (
		consoleMu sync.Mutex
		console   []chromedp.ConsoleMessage
		consoleWG sync.WaitGroup
	)
	defer func() {
		// Close the browser and wait for it to exit (which ends the console reader), then
		// make sure no process of this profile is left.
		if err := chromedp.Cancel(bctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("closing chromium: %v", err)
		}
		allocCancel()
		consoleWG.Wait()
		if left := browsertest.ProcessesWith(profile); len(left) > 0 {
			t.Errorf("chromium processes left after the test: %v", left)
		}
	}()
	if err := chromedp.Do(bctx); err != nil { // starts the browser
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

	const (
		lightForm  = `.cap[data-capability="living_room_light"] form[data-action="set_color"]`
		lightObs   = `.cap[data-capability="living_room_light"] pre.observation`
		printerObs = `.cap[data-capability="printer"] pre.observation`
	)
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	poll := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr)); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}

	step("log in", chromedp.Navigate(loginURL))
	poll("the token to leave the address bar", `location.href === "http://`+s.Addr()+`/"`)
	poll("the room", `document.querySelector('#room-list button[data-room="kitchen"].selected') !== null`)
	poll("the capabilities", `document.querySelectorAll('.cap').length === 2`)
	poll("the live stream", `document.getElementById('status').textContent === 'live'`)
	if got := text("#room h3"); got != "Kitchen <b>bold</b>" {
		t.Errorf("room title %q: backend text must be shown as text", got)
	}
	if n, _ := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#room h3 b, #room-list b').length`)); n != 0 {
		t.Errorf("backend text became %d elements", n)
	}
	poll("the observation", `(document.querySelector('`+lightObs+`')||{}).textContent.includes('"off"')`)
	poll("the uncoded observe error", `(document.querySelector('`+printerObs+`')||{}).textContent === 'internal: the request failed'`)
	// A capability a call cannot reach now is marked, with its reason; a reachable one is not.
	if got := text(`.cap[data-capability="printer"] [data-unavailable]`); got != "unavailable: adapter_not_ready" {
		t.Errorf("the printer's unavailable marker %q", got)
	}
	if n, _ := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('.cap[data-capability="living_room_light"] [data-unavailable], .cap.unavailable[data-capability="living_room_light"]').length`)); n != 0 {
		t.Errorf("the available light carries %d unavailable markers", n)
	}
	if n, _ := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('.cap[data-capability="printer"] textarea[name="__args"]').length`)); n != 1 {
		t.Errorf("the print action's pattern schema has %d raw JSON fields, want 1", n)
	}
	options, _ := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+lightForm+` select[name="color"] option')].map(o => o.value)`))
	if strings.Join(options, ",") != "red,green,blue" {
		t.Errorf("set_color's colour options %v, want red,green,blue", options)
	}

	step("run set_color green",
		chromedp.SetValue(chromedp.CSS(lightForm+` select[name="color"]`), "green"),
		chromedp.Click(chromedp.CSS(lightForm+` button[type="submit"]`)))
	poll("the result", `(document.querySelector('`+lightForm+` pre.result')||{}).textContent.includes('"color": "green"')`)
	poll("the call in the live log", `[...document.querySelectorAll('#log-list li[data-kind="call"][data-outcome="ok"]')].some(li => li.textContent.includes('set_color'))`)
	poll("the observation after the call", `document.querySelector('`+lightObs+`').textContent.includes('"green"')`)

	step("run set_color blue",
		chromedp.SetValue(chromedp.CSS(lightForm+` select[name="color"]`), "blue"),
		chromedp.Click(chromedp.CSS(lightForm+` button[type="submit"]`)))
	poll("the coded error", `document.querySelector('`+lightForm+` pre.result.error')?.textContent === 'busy: the light is busy'`)

	poll("the pending approval", `document.querySelector('#approval-list li[data-approval="ap-1"] button.approve') !== null`)
	// Its args, as text: the caller's markup is not markup, and its bidirectional override
	// shows as the escape, not as reordered text.
	poll("the pending approval's args", `(document.querySelector('#approval-list li[data-approval="ap-1"] pre')||{}).textContent === '{\n  "text": "<b>hello</b>",\n  "memo": "pay 10<U+202E>00001<U+202C> EUR"\n}' &&
		document.querySelector('#approval-list li[data-approval="ap-1"] pre b') === null`)
	// No string the backend wrote reaches the page with a hidden character: B's name and
	// set_color's title are shown escaped too, and no bidirectional, zero-width or separator
	// character is anywhere in the document.
	if got := text(`#room table.members tbody tr:nth-child(2) td:nth-child(2)`); got != "bob<U+2067><U+200B>" {
		t.Errorf("B's member name %q, want it escaped", got)
	}
	if got := text(lightForm + ` h4`); !strings.HasPrefix(got, "Set color<U+202E> ") {
		t.Errorf("set_color's title %q, want it escaped", got)
	}
	if n, _ := chromedp.Run(bctx, chromedp.Evaluate[int](`(document.documentElement.outerHTML.match(/[\u061c\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2069\ufeff]/g) || []).length`)); n != 0 {
		t.Errorf("the page holds %d hidden characters", n)
	}
	screenshot(t, bctx, "web-room-pending.png")
	step("approve", chromedp.Click(chromedp.CSS(`#approval-list li[data-approval="ap-1"] button.approve`)))
	poll("the approval to leave the list", `document.querySelector('#approval-list li[data-approval]') === null`)
	poll("the approval in the live log", `document.querySelector('#log-list li[data-kind="approval"][data-outcome="approved"]') !== null`)
	if approve, ok := b.decision("ap-1"); !ok || !approve {
		t.Errorf("backend decision for ap-1: %v, %v; want approved", approve, ok)
	}

	screenshot(t, bctx, "web-room.png")

	// The history view, from the audit journal: the newest page, the older one, a filter.
	poll("the history's first page", `document.querySelectorAll('#history-table tbody tr').length === `+strconv.Itoa(DefaultHistoryPage)+` &&
		!document.getElementById('history-older').hidden`)
	step("older", chromedp.Click(chromedp.CSS(`#history-older`)))
	poll("the older page", `document.querySelectorAll('#history-table tbody tr').length === `+strconv.Itoa(DefaultHistoryPage+5)+` &&
		document.getElementById('history-older').hidden &&
		document.querySelector('#history-table tbody tr[data-op="fs.write"][data-kind="started"]') !== null`)
	step("filter by room",
		chromedp.SetValue(chromedp.CSS(`#history-form input[name="room"]`), "kitchen"),
		chromedp.Click(chromedp.CSS(`#history-form button[type="submit"]`)))
	poll("the room's records", `document.querySelectorAll('#history-table tbody tr').length === 3 &&
		document.querySelector('#history-table tbody tr[data-kind="decision"][data-outcome="policy_denied"]') !== null`)
	if got := text(`#history-table tbody tr[data-kind="decision"] td:nth-child(7)`); got != "desk_lamp.set_power" {
		t.Errorf("the decision's target %q", got)
	}
	screenshot(t, bctx, "web-history.png")

	html, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, canary) {
		t.Error("the page shows the backend's canary")
	}
	if !strings.Contains(html, "set_color") {
		t.Error("the page snapshot lacks the capability it shows") // the scan read a real page
	}

	consoleMu.Lock()
	for _, m := range console {
		// The page's own error answers (the 422 and 500 provoked above) are logged as failed
		// loads; anything else is a script error or a CSP violation.
		expected := strings.HasPrefix(m.Text, "Failed to load resource: the server responded with a status of 422") ||
			strings.HasPrefix(m.Text, "Failed to load resource: the server responded with a status of 500")
		if !expected && (m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() || strings.Contains(m.Text, "Content Security Policy")) {
			t.Errorf("browser console: %s", m)
		}
		if strings.Contains(m.Text, canary) {
			t.Error("the console shows the backend's canary")
		}
	}
	consoleMu.Unlock()
}

// screenshot saves a full-page PNG of the tab as a test artifact and logs its path.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(browsertest.ArtifactDir(t), name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))
}
