package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockhq/airlock/internal/browsertest"
)

// browserTimeout bounds the browser session of a roomPage.
const browserTimeout = 120 * time.Second

// roomPage is a host's room page (airlockd --http) in headless Chromium, opened by its human
// with the login URL `airlock room open-ui` printed. It is what TestRoomWebTwoDaemons and
// TestFabricThreeDaemons share: the login, running an action from its generated form, the
// screenshot, and a browser that ends with the test and leaves no process behind.
type roomPage struct {
	t      *testing.T
	ctx    context.Context // the browser's tab
	origin string          // http://127.0.0.1:PORT
	login  string          // the one-time login URL
	token  string          // the login token, which no log may hold

	closeOnce sync.Once
	close     func()

	consoleMu sync.Mutex
	console   []chromedp.ConsoleMessage
}

// openRoomPage asks h for its login URL (plain: the URL alone on the first line; --json: in
// data) and starts Chromium, whose console it records. The browser closes with the test, or
// earlier with Close.
func openRoomPage(t *testing.T, exe string, h *roomHost) *roomPage {
	t.Helper()
	plain := h.cli("", "room", "open-ui").wantCode(t, exitOK)
	if first, _, _ := strings.Cut(plain.stdout, "\n"); !strings.HasPrefix(first, "http://127.0.0.1:") || !strings.Contains(first, "/login?token=") {
		t.Fatalf("open-ui printed %q", plain.stdout)
	}
	var login struct {
		URL string `json:"url"`
	}
	h.data(&login, "room", "open-ui")
	p := &roomPage{t: t, login: login.URL}
	p.origin, _, _ = strings.Cut(login.URL, "/login?")
	p.token = login.URL[strings.Index(login.URL, "token=")+len("token="):]

	profile := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
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
	bctx, bcancel := chromedp.NewContext(allocCtx)
	p.ctx = bctx
	var consoleWG sync.WaitGroup
	p.close = func() {
		if err := chromedp.Cancel(bctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("closing chromium: %v", err)
		}
		bcancel()
		allocCancel()
		cancel()
		consoleWG.Wait()
		if left := browsertest.ProcessesWith(profile); len(left) > 0 {
			t.Errorf("chromium processes left after the test: %v", left)
		}
	}
	t.Cleanup(p.Close)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	messages := chromedp.Console(bctx)
	consoleWG.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			p.consoleMu.Lock()
			p.console = append(p.console, m)
			p.consoleMu.Unlock()
		}
	})
	return p
}

// Close ends the browser and checks that none of its processes is left. It may be called
// more than once.
func (p *roomPage) Close() { p.closeOnce.Do(p.close) }

// step runs actions in the page, failing the test on error.
func (p *roomPage) step(name string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", name, err)
	}
}

// poll waits until the JavaScript expr is true, failing with the page's text otherwise.
func (p *roomPage) poll(what, expr string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](expr)); err != nil {
		text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		p.t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, text)
	}
}

// logIn follows the login URL: the token leaves the address bar, the room is selected and
// the live stream runs.
func (p *roomPage) logIn(room string) {
	p.t.Helper()
	p.step("log in", chromedp.Navigate(p.login))
	p.poll("the token to leave the address bar", `location.href === "`+p.origin+`/"`)
	p.poll("the room", `document.querySelector('#room-list button[data-room="`+room+`"].selected') !== null`)
	p.poll("the live stream", `document.getElementById('status').textContent === 'live'`)
}

// actionForm is the CSS selector of the generated form of capability's action.
func actionForm(capability, action string) string {
	return `.cap[data-capability="` + capability + `"] form[data-action="` + action + `"]`
}

// runAction fills the form of capability's action with fill (given the form's selector),
// submits it, and waits until its result satisfies the JavaScript predicate result (of r,
// the parsed result) and the call shows, succeeded, in the live log.
func (p *roomPage) runAction(capability, action, field string, fill func(form string) []chromedp.Action[chromedp.Void], result string) {
	p.t.Helper()
	form := actionForm(capability, action)
	p.poll("the "+action+" form", `document.querySelector('`+form+` input[name="`+field+`"]') !== null`)
	p.step("run "+action, append(fill(form), chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)))...)
	p.poll("the result", `(() => { const pre = document.querySelector('`+form+` pre.result');
		if (!pre || pre.hidden || pre.classList.contains('error')) return false;
		try { const r = JSON.parse(pre.textContent); return `+result+`; } catch (e) { return false; } })()`)
	p.poll("the call in the live log", `[...document.querySelectorAll('#log-list li[data-kind="call"][data-outcome="ok"]')].some(li => li.textContent.includes('`+action+`'))`)
}

// screenshot saves the whole page as name in the artifact directory.
func (p *roomPage) screenshot(name string) {
	p.t.Helper()
	shot, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(browsertest.ArtifactDir(p.t), name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s (%d bytes)", path, len(shot))
}

// html is the page's document as it is now.
func (p *roomPage) html() string {
	p.t.Helper()
	html, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		p.t.Fatal(err)
	}
	return html
}

// consoleMessages is what the browser's console received so far.
func (p *roomPage) consoleMessages() []chromedp.ConsoleMessage {
	p.consoleMu.Lock()
	defer p.consoleMu.Unlock()
	return append([]chromedp.ConsoleMessage(nil), p.console...)
}
