package web

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserNarrowWindow: in a window as narrow as a phone's, or a side-by-side terminal's,
// the page is one column and nothing sticks out of it: the history table scrolls within its
// box, and a 64-character host id in the approvals or the call log wraps. Before, the
// history table made the whole page twice the window's width, and the header and every
// panel scrolled sideways with it.
func TestBrowserNarrowWindow(t *testing.T) {
	b := newTestBackend()
	b.approvals = append(b.approvals, Approval{ID: "ap-2", Kind: "call", Room: "kitchen", Capability: "printer", Action: "print",
		Who: "room kitchen · host " + hostB, Args: json.RawMessage(`{"text":"` + strings.Repeat("x", 80) + `"}`), Expires: time.Now().Add(time.Minute)})
	s, _, _ := startServerWith(t, b, JournalHistory(historyJournal(t, DefaultHistoryPage)))
	loginURL, err := s.LoginURL()
	if err != nil {
		t.Fatal(err)
	}
	ctx := startChromium(t, 380, 800)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(380, 800), chromedp.Navigate(loginURL)); err != nil {
		t.Fatal(err)
	}
	pollPage(t, ctx, "the page", `document.getElementById('status').textContent === 'live' &&
		document.querySelectorAll('.cap').length === 2 &&
		document.querySelector('#approval-list li[data-approval="ap-1"]') !== null &&
		document.querySelectorAll('#history-table tbody tr').length > 0`)
	// A room call's approval and its log entry name the calling host in full.
	b.publish(Event{Kind: EventApproval, Time: time.Now(), Outcome: "pending", Room: "kitchen",
		Who: "room kitchen · host " + hostB, Capability: "printer", Action: "print"})
	pollPage(t, ctx, "the log entry", `document.querySelector('#log-list li[data-kind="approval"]') !== null`)
	wide, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('body *')]
		.filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5 &&
			!(e.parentElement && e.parentElement.closest('#history-scroll')))
		.map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className ? '.' + e.className : ''))
		.filter((v, i, all) => all.indexOf(v) === i)`))
	if err != nil {
		t.Fatal(err)
	}
	width, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	if len(wide) > 0 || width > 380 {
		t.Errorf("the page is %d px wide in a 380 px window; past its right edge: %v", width, wide)
	}
	screenshot(t, ctx, "web-narrow.png")
}
