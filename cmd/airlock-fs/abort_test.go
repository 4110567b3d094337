package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// TestAbortOnFullConnection fills one owner connection with 64 invokeTool calls in flight (the
// daemon's per-connection bound), each a slow fs.search through airlock-fs granted one request
// at a time (--max-concurrent 1 --max-queued 128), so that they run one after another. One
// more invokeTool is refused connection_busy; abortTool is not: it goes ahead of the bound.
// A flood of 200 aborts of calls that are not in flight, written with the abort of the last
// search, is answered in full (aborted:false), the targeted search is aborted:true and answered
// adapter_request_aborted, and then aborting the other 63 ends them. A session's abort is
// answered on the full connection too. Everything
// goes in one write per step, so the first search is still running while the daemon reads it.
func TestAbortOnFullConnection(t *testing.T) {
	const inFlight = 64 // the daemon's default --max-in-flight-requests-per-connection
	d := daemontest.Start(t, daemontest.Options{})
	fsp := startFS(t)
	c := d.Dial()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hs, err := c.Call(ctx, client.Command{Operation: "handshake"})
	if err != nil {
		t.Fatal(err)
	}

	// A scratch tree that takes fs.search a while: 20,000 files of 4 KiB (80 MiB), none of
	// which holds the query.
	root := filepath.Join(daemontest.ShortDir(t), "work")
	chunk := []byte(strings.Repeat("lorem ipsum dolor sit amet, consectetur adipiscing elit\n", 4096/56))
	for i := range 200 {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for j := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", j)), chunk, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	desc, errOut, code := fsp.run(t, nil, "grant", "--admin-socket", fsp.admin, "--root", root,
		"--host-instance", hs.HostInstanceID, "--session", "agent-a", "--generation", "1", "--operations", "fs.search",
		"--max-concurrent", "1", "--max-queued", "128", "--timeout-ms", "120000")
	if code != 0 {
		t.Fatalf("grant: %d %s", code, errOut)
	}
	g := int64(1)
	r, err := c.Call(ctx, client.Command{Operation: "open", SessionID: "agent-a", Generation: &g, Payload: map[string]any{
		"cwd": root, "session": map[string]any{"mode": "memory"},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": map[string]any{"mode": "host-adapter", "descriptor": json.RawMessage(desc)}}}})
	if err != nil || !r.OK {
		t.Fatalf("open: %v %+v", err, r)
	}

	nc, err := net.Dial("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(2 * time.Minute))
	br := bufio.NewReaderSize(nc, 1<<20)
	search := func(rid string) string {
		return `{"protocolVersion":"2.0","requestId":"` + rid + `","operation":"invokeTool","sessionId":"agent-a","generation":1,` +
			`"payload":{"toolCallId":"` + rid + `","operation":"fs.search","arguments":{"path":".","query":"needle-absent-from-the-tree"}}}` + "\n"
	}
	abort := func(rid, target string) string {
		return `{"protocolVersion":"2.0","requestId":"` + rid + `","operation":"abortTool","payload":{"requestId":"` + target + `"}}` + "\n"
	}
	type answer struct {
		RequestID string          `json:"requestId"`
		OK        bool            `json:"ok"`
		Data      json.RawMessage `json:"data"`
		Error     *protocol.Error `json:"error"`
	}
	answers := map[string]answer{}
	// await reads answers until every id in want has one.
	await := func(want []string) {
		t.Helper()
		for {
			missing := 0
			for _, id := range want {
				if _, ok := answers[id]; !ok {
					missing++
				}
			}
			if missing == 0 {
				return
			}
			line, err := br.ReadBytes('\n')
			if err != nil {
				t.Fatalf("%d answers missing: %v", missing, err)
			}
			var a answer
			if err := json.Unmarshal(line, &a); err != nil {
				t.Fatal(err)
			}
			answers[a.RequestID] = a
		}
	}
	code_ := func(id string) string {
		if e := answers[id].Error; e != nil {
			return e.Code
		}
		return ""
	}

	var fill strings.Builder
	for i := range inFlight {
		fill.WriteString(search(fmt.Sprint("q-", i)))
	}
	fill.WriteString(search("over"))
	var flood []string
	for i := range 200 {
		fill.WriteString(abort(fmt.Sprint("a-", i), fmt.Sprint("not-in-flight-", i)))
		flood = append(flood, fmt.Sprint("a-", i))
	}
	// abort (a session's turn) only ends work too.
	fill.WriteString(`{"protocolVersion":"2.0","requestId":"turn","operation":"abort","sessionId":"agent-a","generation":1,"payload":{}}` + "\n")
	last := fmt.Sprint("q-", inFlight-1)
	fill.WriteString(abort("a-last", last))
	if _, err := nc.Write([]byte(fill.String())); err != nil {
		t.Fatal(err)
	}
	await(append(flood, "over", "turn", "a-last", last))
	if code_("over") != protocol.CodeConnectionBusy {
		t.Fatalf("the 65th invokeTool answered %+v, want connection_busy: the connection was not full (a search ended too soon?)", answers["over"])
	}
	for _, id := range append(flood, "turn", "a-last") {
		if !answers[id].OK {
			t.Fatalf("abortTool %s on a full connection answered %v", id, answers[id].Error)
		}
	}
	if string(answers["a-0"].Data) != `{"aborted":false}` || string(answers["a-last"].Data) != `{"aborted":true}` {
		t.Fatalf("abortTool data: unknown call %s, the last search %s", answers["a-0"].Data, answers["a-last"].Data)
	}
	if code_(last) != "adapter_request_aborted" {
		t.Fatalf("the aborted search answered %+v", answers[last])
	}

	// The other 63 are still in flight (the searches run one at a time): abort them all.
	var rest strings.Builder
	var ids []string
	for i := range inFlight - 1 {
		rest.WriteString(abort(fmt.Sprint("b-", i), fmt.Sprint("q-", i)))
		ids = append(ids, fmt.Sprint("b-", i), fmt.Sprint("q-", i))
	}
	if _, err := nc.Write([]byte(rest.String())); err != nil {
		t.Fatal(err)
	}
	await(ids)
	aborted := 0
	for i := range inFlight - 1 {
		if code_(fmt.Sprint("q-", i)) == "adapter_request_aborted" {
			aborted++
		}
	}
	// The first searches may have finished before their abort; most cannot have.
	if aborted < inFlight/2 {
		t.Fatalf("only %d of %d searches were aborted", aborted, inFlight-1)
	}
}
