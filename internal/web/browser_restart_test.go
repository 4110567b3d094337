package web

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockhq/airlock/internal/browsertest"
)

// startChromium starts a headless Chromium for one test and returns its tab's context; at
// cleanup it closes the browser and checks that none of its processes is left.
func startChromium(t *testing.T, width, height int) context.Context {
	t.Helper()
	exe := browsertest.Chromium(t)
	profile := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	allocCtx, allocCancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root in a container has no user namespace for the sandbox
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
	)...)
	bctx, bcancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		if err := chromedp.Cancel(bctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("closing chromium: %v", err)
		}
		bcancel()
		allocCancel()
		cancel()
		if left := browsertest.ProcessesWith(profile); len(left) > 0 {
			t.Errorf("chromium processes left after the test: %v", left)
		}
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return bctx
}

// pollPage waits until expr holds on the page.
func pollPage(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// servePage serves h on addr until the test ends or the returned stop is called; stop closes
// every connection at once, event streams included, as a daemon that exits does.
func servePage(t *testing.T, addr string, h http.Handler) (stop func()) {
	t.Helper()
	// The previous server closed its listener before stop returned; Go listens with
	// SO_REUSEADDR, so the port is free again at once.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	stop = func() {
		srv.Close()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// TestBrowserStreamDropsAndLoginEnds: what the operator sees when the page's server goes
// away under it. When the event stream comes back, the panels are loaded again, so that an
// approval that began to wait meanwhile (it came as no event) is shown. When the server
// that comes back no longer knows the login (airlockd restarted: logins live in its
// memory), the page says so and names the command for a new login link. Before, the first
// stayed unseen and the second showed "reconnecting…" forever, over stale panels.
func TestBrowserStreamDropsAndLoginEnds(t *testing.T) {
	// A free port, which both servers below listen on in turn, as a restarted airlockd with
	// --http 127.0.0.1:PORT does.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	b := newTestBackend()
	s, err := New(Config{Addr: addr, Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	stop := servePage(t, addr, s.Handler())
	loginURL, err := s.LoginURL()
	if err != nil {
		t.Fatal(err)
	}

	ctx := startChromium(t, 1400, 900)
	if err := chromedp.Do(ctx, chromedp.Navigate(loginURL)); err != nil {
		t.Fatal(err)
	}
	pollPage(t, ctx, "the live stream", `document.getElementById('status').textContent === 'live'`)
	pollPage(t, ctx, "the waiting approval", `document.querySelector('#approval-list li[data-approval="ap-1"]') !== null`)

	// The server goes away; while it is gone a second call begins to wait. It comes back
	// with the same logins.
	stop()
	pollPage(t, ctx, "the dropped stream", `document.getElementById('status').textContent === 'reconnecting…'`)
	b.mu.Lock()
	b.approvals = append(b.approvals, Approval{ID: "ap-2", Kind: "call", Target: "fs.write", Path: "notes.txt",
		Who: "mcp client claude", Expires: time.Now().Add(time.Minute)})
	b.mu.Unlock()
	stop = servePage(t, addr, s.Handler())
	pollPage(t, ctx, "the stream back", `document.getElementById('status').textContent === 'live'`)
	pollPage(t, ctx, "the approval that began to wait meanwhile", `document.querySelector('#approval-list li[data-approval="ap-2"]') !== null`)

	// The server goes away and one that knows no login comes back on its port.
	stop()
	s2, err := New(Config{Addr: addr, Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Shutdown(context.Background()) })
	servePage(t, addr, s2.Handler())
	pollPage(t, ctx, "the login's end", `document.getElementById('status').textContent === 'logged out' &&
		!document.getElementById('banner').hidden &&
		document.getElementById('banner').textContent === 'unauthenticated: not logged in — open a new login link from `+"`airlock room open-ui`"+`.'`)

	// A new login link makes the page work again.
	loginURL, err = s2.LoginURL()
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(loginURL)); err != nil {
		t.Fatal(err)
	}
	pollPage(t, ctx, "the live stream after the new login", `document.getElementById('status').textContent === 'live' &&
		document.getElementById('banner').hidden`)
}
