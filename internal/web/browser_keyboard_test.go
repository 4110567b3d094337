package web

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestBrowserApprovalsKeepTheFocus: the approval list is rebuilt whenever a request arrives
// or is decided; the keyboard focus survives it. An operator typing a path glob goes on
// typing into the same field when another call begins to wait; one who approves with the
// keyboard lands on the next request's Approve button. Before, each rebuild dropped the focus
// to the page: the rest of the glob went nowhere, and the next decision began with tabbing
// through the whole page again.
func TestBrowserApprovalsKeepTheFocus(t *testing.T) {
	b := newTestBackend()
	b.approvals = append(b.approvals, Approval{ID: "ap-2", Kind: "call", Target: "fs.write", Path: "src/a.go",
		Who: "mcp client claude", Rememberable: true, Expires: time.Now().Add(time.Minute)})
	s, _, _ := startServerWith(t, b, nil)
	loginURL, err := s.LoginURL()
	if err != nil {
		t.Fatal(err)
	}
	ctx := startChromium(t, 1400, 900)
	if err := chromedp.Do(ctx, chromedp.Navigate(loginURL)); err != nil {
		t.Fatal(err)
	}
	pollPage(t, ctx, "the live page and both requests", `document.getElementById('status').textContent === 'live' &&
		document.querySelectorAll('#approval-list li[data-approval]').length === 2`)

	const glob = `#approval-list li[data-approval="ap-2"] input[name="pattern"]`
	if err := chromedp.Do(ctx, chromedp.Focus(chromedp.CSS(glob)), chromedp.KeyEvent("src/")); err != nil {
		t.Fatal(err)
	}
	// A third call begins to wait: the list is rebuilt under the operator's fingers.
	b.mu.Lock()
	b.approvals = append(b.approvals, Approval{ID: "ap-3", Kind: "call", Target: "fs.edit", Path: "b.txt",
		Who: "mcp client claude", Rememberable: true, Expires: time.Now().Add(time.Minute)})
	b.mu.Unlock()
	b.publish(Event{Kind: EventApproval, Time: time.Now(), Target: "fs.edit", Who: "mcp client claude", Outcome: "pending"})
	pollPage(t, ctx, "the third request", `document.querySelector('#approval-list li[data-approval="ap-3"]') !== null`)
	if err := chromedp.Do(ctx, chromedp.KeyEvent("**")); err != nil {
		t.Fatal(err)
	}
	pollPage(t, ctx, "the glob typed whole into its field", `document.querySelector('`+glob+`').value === 'src/**' &&
		document.activeElement === document.querySelector('`+glob+`')`)

	// Approve the first request from the keyboard: the focus moves to the next one's Approve.
	if err := chromedp.Do(ctx, chromedp.Focus(chromedp.CSS(`#approval-list li[data-approval="ap-1"] button.approve`)), chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	pollPage(t, ctx, "the focus on the next request's Approve", `document.querySelector('#approval-list li[data-approval="ap-1"]') === null &&
		document.activeElement === document.querySelector('#approval-list li[data-approval="ap-2"] button.approve')`)
	if approve, ok := b.decision("ap-1"); !ok || !approve {
		t.Errorf("ap-1 decided %v, %v; want approved", approve, ok)
	}
}
