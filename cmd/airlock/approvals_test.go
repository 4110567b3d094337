package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/browsertest"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

// approvalWait is the daemon's approval timeout in TestMCPWriteWaitsForTheOperator: long
// enough for the CLI and the page to decide on a loaded machine, short enough to wait out
// once.
const approvalWait = 15 * time.Second

// pendingView is one entry of airlock approvals --json.
type pendingView struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Actor struct {
		Door       string `json:"door"`
		Session    string `json:"session"`
		Generation int64  `json:"generation"`
		Client     string `json:"client"`
	} `json:"actor"`
	Target string          `json:"target"`
	Path   string          `json:"path"`
	Args   json.RawMessage `json:"args"`
	Reason string          `json:"reason"`
}

// pending waits until airlock approvals lists exactly one request for path, and no other
// request than for the paths beside (each may have ended already), and returns it.
func (h *roomHost) pending(t *testing.T, path string, beside ...string) pendingView {
	t.Helper()
	var l struct {
		Approvals []pendingView `json:"approvals"`
	}
	var found pendingView
	waitFor(t, fmt.Sprintf("the request for %s (beside %v) in the approval queue", path, beside), func() bool {
		h.data(&l, "approvals")
		n := 0
		for _, p := range l.Approvals {
			switch {
			case p.Path == path:
				found = p
				n++
			case !slices.Contains(beside, p.Path):
				return false
			}
		}
		return n == 1
	})
	return found
}

// TestMCPWriteWaitsForTheOperator is issue 26's first "done when", with real binaries: a
// go-sdk client's fs.write through airlock mcp --dir --policy FILE (writes ask) waits;
// approved with --remember --pattern src/**, the next write under src/ runs without waiting
// while one elsewhere still waits, and, undecided, is refused approval_timeout (it waits out
// the timeout while the rest goes on); a write shows in airlock approvals and on the page
// (airlockd --http, headless Chromium) with who, what, the arguments and the rule; approved
// from the page it runs once; denied with airlock deny it is refused approval_denied and
// writes nothing; the memory shows on the page and is forgotten there, after which a write
// under src/ waits again; a memory taken with the page's remember checkbox is forgotten with
// airlock approvals forget; the memories end with the session when the client goes.
func TestMCPWriteWaitsForTheOperator(t *testing.T) {
	exe := browsertest.Chromium(t)
	daemontest.Binary(t, "airlock-fs") // beside airlockd, where it runs it from
	a := startRoomHost(t, "--http", "127.0.0.1:0", "--approval-timeout", approvalWait.String())
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "src"), 0o700); err != nil {
		t.Fatal(err)
	}
	pol := writePolicy(t, `{"name":"ask-writes-here","default":"allow","rules":[
  {"operations":["fs.write"],"decision":"ask","why":"writes wait for the operator"}]}`)

	cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", a.d.Socket, "mcp", "--dir", root, "--policy", pol)
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "approval-test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	closed := false
	defer func() {
		if !closed {
			cs.Close()
		}
		if t.Failed() {
			t.Logf("airlock mcp stderr:\n%s", stderr.String())
		}
	}()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "fs_write" && !strings.Contains(tool.Description, "waits for the operator's decision") {
			t.Fatalf("fs_write's description does not say a write waits: %q", tool.Description)
		}
	}
	write := func(path, content string) <-chan *sdk.CallToolResult {
		out := make(chan *sdk.CallToolResult, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*approvalWait)
			defer cancel()
			r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_write", Arguments: map[string]any{"path": path, "content": content, "create": true}})
			if err != nil {
				r = &sdk.CallToolResult{IsError: true, Meta: sdk.Meta{mcp.MetaError: map[string]any{"code": "transport: " + err.Error()}}}
			}
			out <- r
		}()
		return out
	}
	code := func(r *sdk.CallToolResult) string {
		if !r.IsError {
			return ""
		}
		b, _ := json.Marshal(r.Meta[mcp.MetaError])
		var e struct {
			Code string `json:"code"`
		}
		json.Unmarshal(b, &e)
		return e.Code
	}
	file := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}

	// 1. Remembered for src/**: the next write there runs without anyone deciding; one
	// elsewhere waits, and nobody deciding refuses it approval_timeout. It waits out the
	// approval timeout while steps 2 to 4 go on beside it, and is collected before the
	// client goes (step 5), which would end its wait.
	done := write("src/c.txt", "three")
	p := a.pending(t, "src/c.txt")
	a.refused("not_rememberable", "approve", p.ID, "--remember", "--pattern", "docs/**")
	var dec struct {
		Memory struct {
			ID      string `json:"id"`
			Pattern string `json:"pattern"`
		} `json:"memory"`
	}
	a.data(&dec, "approve", p.ID, "--remember", "--pattern", "src/**")
	if dec.Memory.Pattern != "src/**" {
		t.Fatalf("approve --remember: %+v", dec)
	}
	if r := <-done; r.IsError {
		t.Fatalf("the remembered write: %s", code(r))
	}
	if r := <-write("src/d.txt", "four"); r.IsError || file("src/d.txt") != "four" {
		t.Fatalf("the write under src/ after remember: %s %q", code(r), file("src/d.txt"))
	}
	start := time.Now()
	undecided := write("e.txt", "five")
	a.pending(t, "e.txt")
	var mem struct {
		Remembered []struct {
			ID      string `json:"id"`
			Pattern string `json:"pattern"`
			Uses    int    `json:"uses"`
		} `json:"remembered"`
	}
	a.data(&mem, "approvals", "remembered")
	if len(mem.Remembered) != 1 || mem.Remembered[0].Pattern != "src/**" || mem.Remembered[0].Uses != 1 {
		t.Fatalf("approvals remembered: %+v", mem)
	}

	// 2. The write waits, shows in airlock approvals and on the page, and runs once when
	// the page approves it.
	done = write("a.txt", "one")
	p = a.pending(t, "a.txt", "e.txt")
	if p.Kind != "call" || p.Target != "fs.write" || p.Path != "a.txt" || p.Actor.Door != "mcp" || p.Actor.Client != "approval-test" ||
		!strings.HasPrefix(p.Actor.Session, "mcp-") || p.Actor.Generation != 1 || compact(t, p.Args) != `{"content":"one","create":true,"path":"a.txt"}` ||
		p.Reason != "session policy rule 1 (writes wait for the operator): ask fs.write" {
		t.Fatalf("the waiting write: %+v", p)
	}
	if text := a.cli("", "approvals").wantCode(t, exitOK).stdout; !strings.Contains(text, "mcp client approval-test · session "+p.Actor.Session) ||
		!strings.Contains(text, `"content":"one"`) || !strings.Contains(text, "why   session policy rule 1") {
		t.Fatalf("airlock approvals:\n%s", text)
	}
	if file("a.txt") != "<open "+filepath.Join(root, "a.txt")+": no such file or directory>" {
		t.Fatalf("a.txt before the decision: %s", file("a.txt"))
	}
	page := openRoomPage(t, exe, a)
	page.step("log in", chromedp.Navigate(page.login))
	page.poll("the live stream", `document.getElementById('status').textContent === 'live'`)
	entry := `#approval-list li[data-approval="` + p.ID + `"]`
	page.poll("the waiting write on the page", `(() => { const li = document.querySelector('`+entry+`');
		return li !== null && li.querySelector('code.target').textContent === 'fs.write' &&
			li.querySelector('code.path').textContent === 'a.txt' &&
			li.querySelector('.who').textContent.startsWith('mcp client approval-test · session mcp-') &&
			li.querySelector('.reason').textContent.includes('rule 1 (writes wait for the operator)') &&
			li.querySelector('pre.args').textContent.includes('"content": "one"'); })()`)
	page.screenshot("web-approval-mcp-write.png")
	// The log may already hold step 1's approval (by the CLI): the page's must be a new entry.
	approvedInLog := `[...document.querySelectorAll('#log-list li[data-kind="approval"][data-outcome="approved"]')].filter(li => li.textContent.includes('fs.write')).length`
	logged, err := chromedp.Run(page.ctx, chromedp.Evaluate[int](approvedInLog))
	if err != nil {
		t.Fatal(err)
	}
	page.step("approve", chromedp.Click(chromedp.CSS(entry+` button.approve`)))
	if r := <-done; r.IsError {
		t.Fatalf("the approved write: %s", code(r))
	}
	if got := file("a.txt"); got != "one" {
		t.Fatalf("a.txt after the approval: %q", got)
	}
	page.poll("the approval in the live log", approvedInLog+` > `+strconv.Itoa(logged))

	// 3. Denied from the CLI.
	done = write("b.txt", "two")
	p = a.pending(t, "b.txt", "e.txt")
	a.cli("", "deny", p.ID).wantCode(t, exitOK)
	if r := <-done; code(r) != "approval_denied" {
		t.Fatalf("the denied write: %q", code(r))
	}
	if _, err := os.Stat(filepath.Join(root, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("the denied write reached the adapter: %v", err)
	}
	a.refused("unknown_approval", "deny", p.ID)

	// 4. The page lists the memory and forgets it; then a write under src/ waits again, and
	// the page's remember checkbox remembers its exact path, which the CLI forgets.
	memory := `#memory-list li[data-memory="` + dec.Memory.ID + `"]`
	page.poll("the memory on the page", `(document.querySelector('`+memory+` code.match')||{}).textContent === 'src/**'`)
	page.step("forget", chromedp.Click(chromedp.CSS(memory+` button.forget`)))
	page.poll("the memory gone", `document.querySelector('`+memory+`') === null`)
	a.data(&mem, "approvals", "remembered")
	if len(mem.Remembered) != 0 {
		t.Fatalf("after the page forgot it: %+v", mem)
	}
	done = write("src/f.txt", "six")
	p = a.pending(t, "src/f.txt", "e.txt")
	entry = `#approval-list li[data-approval="` + p.ID + `"]`
	page.poll("the write on the page", `document.querySelector('`+entry+` input[name="remember"]') !== null`)
	page.step("remember and approve", chromedp.Click(chromedp.CSS(entry+` input[name="remember"]`)),
		chromedp.Click(chromedp.CSS(entry+` button.approve`)))
	if r := <-done; r.IsError {
		t.Fatalf("the write approved with remember on the page: %s", code(r))
	}
	a.data(&mem, "approvals", "remembered")
	if len(mem.Remembered) != 1 || mem.Remembered[0].Pattern != "" {
		t.Fatalf("the page's memory: %+v", mem)
	}
	a.cli("", "approvals", "forget", mem.Remembered[0].ID).wantCode(t, exitOK)
	a.refused("unknown_approval", "approvals", "forget", mem.Remembered[0].ID)

	// 5. A memory ends with the session: the client going away closes it.
	done = write("src/g.txt", "seven")
	p = a.pending(t, "src/g.txt", "e.txt")
	a.cli("", "approve", p.ID, "--remember").wantCode(t, exitOK)
	<-done
	a.data(&mem, "approvals", "remembered")
	if len(mem.Remembered) != 1 {
		t.Fatalf("before the client went: %+v", mem)
	}
	if r := <-undecided; code(r) != "approval_timeout" {
		t.Fatalf("the undecided write outside src/: %q", code(r))
	}
	if waited := time.Since(start); waited < approvalWait {
		t.Fatalf("refused after %v, before the approval timeout", waited)
	}
	if got := file("e.txt"); !strings.HasPrefix(got, "<open ") {
		t.Fatalf("the undecided write reached the adapter: e.txt is %q", got)
	}
	cs.Close()
	closed = true
	waitFor(t, "the memory to end with the session", func() bool {
		a.data(&mem, "approvals", "remembered")
		return len(mem.Remembered) == 0
	})

	// 6. The journal holds every decision, with who asked and who decided: the page (door
	// web), the CLI (owner), the queue itself (daemon: a request asked, a memory's answer, a
	// timeout).
	recs := auditJSON(t, a)
	decided := func(op, door, outcome, path string) {
		t.Helper()
		for _, r := range recs {
			if r.Kind == audit.KindDecision && r.Target != nil && r.Target.Op == op && string(r.Door) == door &&
				r.Outcome == outcome && r.Target.Action == "fs.write" && r.Target.Path == path &&
				r.Actor != nil && strings.HasPrefix(r.Actor.Session, "mcp-") && r.Actor.MCPClient == "approval-test" && r.ArgsSHA256 != "" {
				return
			}
		}
		t.Errorf("no %s decision at door %s with outcome %s for %s in the journal", op, door, outcome, path)
	}
	decided("approval.asked", "daemon", "waiting", "a.txt")
	decided("approval.approved", "web", "ok", "a.txt")
	decided("approval.denied", "owner", "approval_denied", "b.txt")
	decided("approval.approved", "owner", "ok", "src/c.txt")
	decided("approval.approved", "daemon", "ok", "src/d.txt")
	decided("approval.timed_out", "daemon", "approval_timeout", "e.txt")
	if !hasEvent(recs, audit.KindDecision, "approval.forgotten", "ok") {
		t.Errorf("no approval.forgotten decision in the journal")
	}
}

// TestApprovalsShowsTheDigestOfLongArgs: a request whose arguments are longer than the
// entry holds shows their first bytes and the SHA-256 of the whole, as operations.md says.
func TestApprovalsShowsTheDigestOfLongArgs(t *testing.T) {
	t.Parallel()
	digest := strings.Repeat("ab", 32)
	socket := fakeServer(t, func(nc net.Conn) {
		eachCommand(nc, func(c fakeCommand) string {
			if c.Operation != "listApprovals" {
				return response(c, readyBody)
			}
			return response(c, `"ok":true,"data":{"approvals":[{"id":"3f9c0a000000000000000000","kind":"call",`+
				`"actor":{"door":"socket","session":"s","generation":1},"target":"fs.write","path":"big.txt",`+
				`"args":"{\"path\":\"big.txt\",\"content\":\"xxxx","argsTruncated":true,"argsBytes":300044,`+
				`"argsDigest":"`+digest+`","reason":"session policy rule 1: ask fs.write","rememberable":true,`+
				`"since":"2026-12-06T20:00:00Z","expiresAt":"2026-12-06T20:01:00Z"}]}`)
		})
	})
	r := cli(t, socket, "", "approvals").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "args  (first bytes of 300044, SHA-256 of all "+digest+") ") {
		t.Fatalf("airlock approvals:\n%s", r.stdout)
	}
}
