package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// lockedBuffer is stdout for the drainer's tests.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSuffix(l.b.String(), "\n"), "\n")
}

// TestDrainWaitsForEveryRequest: at the end of stdin, Read reports it only once every request
// read has been answered; a request cancelled by the client is not waited for (the server
// sends no response to it); notifications and responses are no requests; a request still
// unanswered when the drain deadline passes is answered with CodeDrainTimeout, and the SDK's
// late response to it is dropped. Under synctest, so the deadline passes without waiting.
func TestDrainWaitsForEveryRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := strings.Join([]string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`, // a revision with batches
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"method":"tools/call","params":{"name":"fs_read"},"id":"a\u0062","jsonrpc":"2.0"}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call"}`,
			`{"jsonrpc":"2.0","id":4,"method":"tools/call"}`,
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`,
			`{"jsonrpc":"2.0","id":9,"result":{}}`,
			`[{"jsonrpc":"2.0","id":5,"method":"ping"}]`,
			`{"jsonrpc":"2.0","id":6,"method":"ping"}`, // no newline at the end
		}, "\n")
		out := &lockedBuffer{}
		d := &drainer{in: io.NopCloser(strings.NewReader(in)), out: out, maxLine: 1 << 20, drain: time.Minute,
			pending: map[string]int{}, expired: map[string]bool{}, changed: make(chan struct{}, 1), closed: make(chan struct{})}
		r, w := drainReader{d}, drainWriter{d}
		eof := make(chan error, 1)
		go func() {
			_, err := io.ReadAll(r)
			eof <- err
		}()
		ended := func() bool {
			synctest.Wait()
			select {
			case err := <-eof:
				if err != nil {
					t.Fatalf("ReadAll: %v", err)
				}
				return true
			default:
				return false
			}
		}
		if ended() {
			t.Fatal("the end of stdin was reported with five requests unanswered")
		}
		// The SDK's own encoding (fast path) and another member order (read in full).
		w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}` + "\n"))
		w.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` + "\n"))
		w.Write([]byte(`{"id":"ab","jsonrpc":"2.0","error":{"code":-1,"message":"x"}}` + "\n"))
		w.Write([]byte(`[{"jsonrpc":"2.0","id":5,"result":{}}]` + "\n"))
		w.Write([]byte(`{"jsonrpc":"2.0","id":6,"result":{}}` + "\n"))
		if ended() {
			t.Fatal("the end of stdin was reported with request 3 unanswered")
		}
		time.Sleep(time.Minute)
		if !ended() {
			t.Fatal("the drain deadline did not end the wait")
		}
		w.Write([]byte(`{"jsonrpc":"2.0","id":3,"result":{}}` + "\n")) // too late: dropped
		lines := out.lines()
		if len(lines) != 6 {
			t.Fatalf("stdout:\n%s", strings.Join(lines, "\n"))
		}
		var e struct {
			ID    int `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(lines[5]), &e) != nil || e.ID != 3 || e.Error.Code != CodeDrainTimeout || !strings.Contains(e.Error.Message, "1m0s") {
			t.Fatalf("the deadline's answer: %s", lines[5])
		}
	})
}

// TestDrainDoesNotWaitForAListenStream: a subscriptions/listen request is answered only when
// its stream ends, which is when the session ends; the end of stdin is reported once the
// other requests are answered, without waiting for it.
func TestDrainDoesNotWaitForAListenStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}` + "\n" +
			`{"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}` + "\n"
		d := newDrainer(io.NopCloser(strings.NewReader(in)), &lockedBuffer{}, 1<<20, time.Hour)
		defer drainReader{d}.Close() // ends a wait the test failed on
		eof := make(chan struct{})
		go func() {
			io.ReadAll(drainReader{d})
			close(eof)
		}()
		synctest.Wait()
		select {
		case <-eof:
			t.Fatal("the end of stdin was reported with initialize unanswered")
		default:
		}
		drainWriter{d}.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"))
		synctest.Wait()
		select {
		case <-eof:
		default:
			t.Fatal("the end of stdin waits for the listen stream's answer")
		}
	})
}

// TestDrainEndsOnClose: Close ends a wait for answers, as the SDK's Close of the connection
// must unblock its reader.
func TestDrainEndsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &drainer{in: io.NopCloser(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")), out: io.Discard,
			maxLine: 1 << 20, drain: time.Hour, pending: map[string]int{}, expired: map[string]bool{}, changed: make(chan struct{}, 1), closed: make(chan struct{})}
		r := drainReader{d}
		done := make(chan struct{})
		go func() { io.ReadAll(r); close(done) }()
		synctest.Wait()
		r.Close()
		<-done
	})
}

// TestDrainEndsAtAnOverlongLine: a line over the bound ends the reading, with
// ErrLineTooLarge, once it is past the bound, without waiting for its end: it is answered
// -32600 with id null, the lines before it are the SDK's and their requests tracked, the
// lines after it are not read, and the drainer's buffer does not grow past the bound. Before,
// the line went to the SDK as it came, which ended the session on it and cancelled the
// requests it was running.
func TestDrainEndsAtAnOverlongLine(t *testing.T) {
	out := &lockedBuffer{}
	d := newDrainer(nil, out, 64, time.Minute)
	ping := `{"jsonrpc":"2.0","id":6,"method":"ping"}`
	long := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"` + strings.Repeat("a", 100) + `"}}`
	d.scan([]byte(ping + "\n" + long[:40]))
	d.scan([]byte(long[40:80]))
	if !errors.Is(d.end, ErrLineTooLarge) {
		t.Fatalf("end %v, want ErrLineTooLarge", d.end)
	}
	if len(d.pending) != 1 || d.pending["n6"] != 1 || string(d.gbuf) != ping+"\n" || cap(d.line) > 128 {
		t.Fatalf("pending %v, given %q, line buffer %d", d.pending, d.gbuf, cap(d.line))
	}
	var r stdioResponse
	if lines := out.lines(); len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &r) != nil || string(r.ID) != "null" ||
		r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(r.Error.Message, "64 bytes") {
		t.Fatalf("stdout:\n%s", strings.Join(lines, "\n"))
	}
}

// referenceKeys is responseKeys by encoding/json alone, the reference of FuzzResponseKeys.
func referenceKeys(line []byte) []string {
	var batch []json.RawMessage
	if json.Unmarshal(line, &batch) == nil {
		var keys []string
		for _, m := range batch {
			keys = append(keys, referenceKeys(m)...)
		}
		return keys
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil || m == nil {
		return nil
	}
	if _, ok := m["method"]; ok {
		return nil
	}
	if k, ok := idKey(m["id"]); ok {
		return []string{k}
	}
	return nil
}

// FuzzResponseKeys holds responseKeys, whose fast path reads the id of a response as the SDK
// encodes it without reading the rest, to what the message is: any JSON-RPC message, encoded
// as the SDK writes it (jsonrpc.EncodeMessage), yields its id's key exactly when it is a
// response with an id. Any other line must not panic; a well-formed one without repeated keys
// that the fast path does not take agrees with encoding/json's reading.
func FuzzResponseKeys(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":-12,"error":{"code":-32603,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":"a\"b","result":null}`,
		`{"jsonrpc":"2.0","id":3,"method":"roots/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`,
		`{"result":{},"id":4.0,"jsonrpc":"2.0"}`,
		`[{"jsonrpc":"2.0","id":5,"result":{}},{"jsonrpc":"2.0","id":6,"error":{}}]`,
		`{"jsonrpc":"2.0","id":1e3,"result":1}`,
		`{"jsonrpc":"2.0","id":null,"error":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got := responseKeys(line, nil)
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte(responsePrefix)) && !bytes.ContainsAny(line, "\n\r") &&
			json.Valid(line) && ndjson.Valid(bytes.TrimSpace(line)) == nil {
			if want := referenceKeys(bytes.TrimSpace(line)); !slices.Equal(got, want) {
				t.Fatalf("responseKeys(%s) = %q, encoding/json reads %q", line, got, want)
			}
		}
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			return
		}
		enc, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			return
		}
		var want []string
		if r, ok := msg.(*jsonrpc.Response); ok && r.ID.IsValid() {
			switch id := r.ID.Raw().(type) {
			case int64:
				want = []string{"n" + strconv.FormatInt(id, 10)}
			case string:
				want = []string{"s" + id}
			}
		}
		if got := responseKeys(enc, nil); !slices.Equal(got, want) {
			t.Fatalf("responseKeys(%s) = %q, want %q", enc, got, want)
		}
	})
}

// sdkSession serves an SDK server with a tool "wait", which returns once release is closed,
// on the drainer (StdioTransport), reading script and then the end of stdin, and returns the
// lines written to stdout once the session ended, and how it ended.
func sdkSession(t *testing.T, script string, release chan struct{}, out *lockedBuffer) error {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil
		})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ss, err := srv.Connect(ctx, StdioTransport(io.NopCloser(strings.NewReader(script)), out, 1<<20, time.Minute), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ss.Wait()
}

// stdioResponse is a response line as the tests of bad lines read it.
type stdioResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestBadLinesAreAnsweredAndServingGoesOn: a line the SDK's connection cannot read as a
// message (not JSON, JSON that is not a JSON-RPC message, a batch it cannot take) is answered
// with a JSON-RPC error with id null, -32700 or -32600 (JSON-RPC 2.0 §5.1), and the session
// goes on: the request before it and the one after it are answered, and the session ends at
// the end of stdin. The SDK's connection ended the session on each of these lines, the requests
// after it unread and those it was running unanswered. A line the SDK reads is left to it (a
// space after the value is taken off, which the SDK refused; a batch of a session of
// 2025-03-26 is answered by the SDK, as one). Both the session revisions and the stateless
// one.
func TestBadLinesAreAnsweredAndServingGoesOn(t *testing.T) {
	const (
		parse   = jsonrpc.CodeParseError
		invalid = jsonrpc.CodeInvalidRequest
	)
	ping := func(id int) string { return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"ping"}` }
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct {
		name, line string
		code       int    // the error answered with id null, or 0
		batchRev   bool   // a session of 2025-03-26, which has batches
		answered   string // with code 0: the ids answered by the line's response, in order
		onlyRev    string // the only revision it is sent under, when not both
	}{
		{"not JSON", `{oops`, parse, false, "", ""},
		{"two values", ping(3) + ` {"x":1}`, parse, false, "", ""},
		{"a value cut short", `{"jsonrpc":"2.0","id":3,"method":`, parse, false, "", ""},
		{"an array of numbers", `[1,2]`, invalid, false, "", ""},
		{"a string", `"x"`, invalid, false, "", ""},
		{"an empty object", `{}`, invalid, false, "", ""},
		{"null", `null`, invalid, false, "", ""},
		{"a number", `7`, invalid, false, "", ""},
		{"version 1.0", `{"jsonrpc":"1.0","id":3,"method":"ping"}`, invalid, false, "", ""},
		{"an object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, invalid, false, "", ""},
		{"a method that is a number", `{"jsonrpc":"2.0","id":3,"method":7}`, invalid, false, "", ""},
		{"no method and no id", `{"jsonrpc":"2.0"}`, invalid, false, "", ""},
		{"nested past the SDK's depth", `{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":` + deep(1000) + `}}`, invalid, false, "", ""},
		{"spaces after the value", ping(3) + "  \t", 0, false, "3", ""},
		{"a batch under 2025-11-25", `[` + ping(3) + `]`, invalid, false, "", "2025-11-25"},
		{"an empty batch", `[]`, invalid, true, "", ""},
		{"a batch of 2025-03-26", `[` + ping(3) + `,` + ping(4) + `]`, 0, true, "3,4", ""},
		{"a batch with a repeated id", `[` + ping(3) + `,` + ping(3) + `]`, invalid, true, "", ""},
		{"a batch with a notification", `[` + ping(3) + `,{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]`, invalid, true, "", ""},
		{"a batch with a message nested to the SDK's depth", `[{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":` + deep(998) + `}}]`, invalid, true, "", ""},
	}
	stateless := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, rev := range []string{"2025-11-25", "2026-07-28"} {
		for _, c := range cases {
			if (c.batchRev || c.onlyRev != "") && rev != "2025-11-25" {
				continue
			}
			t.Run(rev+"/"+c.name, func(t *testing.T) {
				var lines []string
				call := func(id int) string { return ping(id) }
				switch {
				case rev == "2026-07-28":
					call = func(id int) string {
						return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/list","params":{` + stateless + `}}`
					}
				case c.batchRev:
					lines = append(lines, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
				default:
					lines = append(lines, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
				}
				if rev != "2026-07-28" {
					lines = append(lines, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				}
				lines = append(lines, call(1), c.line, call(2))
				out := &lockedBuffer{}
				if err := sdkSession(t, strings.Join(lines, "\n")+"\n", nil, out); err != nil {
					t.Fatalf("the session ended with %v\nstdout:\n%s", err, strings.Join(out.lines(), "\n"))
				}
				var answered []string
				var bad []stdioResponse
				for _, l := range out.lines() {
					if strings.HasPrefix(l, "[") {
						var batch []stdioResponse
						if err := json.Unmarshal([]byte(l), &batch); err != nil {
							t.Fatalf("stdout line %s", l)
						}
						var ids []string
						for _, r := range batch {
							ids = append(ids, string(r.ID))
						}
						answered = append(answered, "["+strings.Join(ids, ",")+"]")
						continue
					}
					var r stdioResponse
					if err := json.Unmarshal([]byte(l), &r); err != nil {
						t.Fatalf("stdout line %s", l)
					}
					if string(r.ID) == "null" {
						bad = append(bad, r)
						continue
					}
					if r.Error != nil || len(r.Result) == 0 {
						t.Errorf("request %s: %s", r.ID, l)
					}
					answered = append(answered, string(r.ID))
				}
				slices.Sort(answered)
				want := []string{"1", "2"}
				if rev != "2026-07-28" {
					want = append(want, "0")
				}
				switch {
				case c.code != 0:
					if len(bad) != 1 || bad[0].Error == nil || bad[0].Error.Code != c.code {
						t.Errorf("the line's answers %+v, want one error %d with id null", bad, c.code)
					} else {
						t.Logf("%d %s", bad[0].Error.Code, bad[0].Error.Message)
					}
				case strings.HasPrefix(c.answered, "3,"):
					want = append(want, "["+c.answered+"]")
				default:
					want = append(want, c.answered)
				}
				slices.Sort(want)
				if !slices.Equal(answered, want) || (c.code == 0 && len(bad) > 0) {
					t.Fatalf("answered %v and %d with id null, want %v\nstdout:\n%s", answered, len(bad), want, strings.Join(out.lines(), "\n"))
				}
			})
		}
	}
}

// TestBatchIDOfAnEarlierBatch: a batch with the id of a request of an earlier batch still
// running is refused (-32600, id null), and both batches' neighbours and the running request
// are answered: the SDK's connection ended the session on it.
func TestBatchIDOfAnEarlierBatch(t *testing.T) {
	release := make(chan struct{})
	out := &lockedBuffer{}
	script := strings.Join([]string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wait","arguments":{}}}]`,
		`[{"jsonrpc":"2.0","id":3,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":4,"method":"ping"}`,
	}, "\n") + "\n"
	ended := make(chan error, 1)
	go func() { ended <- sdkSession(t, script, release, out) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(strings.Join(out.lines(), "\n"), `"id":4`) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("request 4 not answered; stdout:\n%s\nended: %v", strings.Join(out.lines(), "\n"), <-ended)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if err := <-ended; err != nil {
		t.Fatalf("the session ended with %v", err)
	}
	got := strings.Join(out.lines(), "\n")
	if !strings.Contains(got, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600`) || !strings.Contains(got, `[{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"done"}]}}]`) {
		t.Fatalf("stdout:\n%s", got)
	}
}

type discardCloser struct{}

func (discardCloser) Write(p []byte) (int, error) { return len(p), nil }
func (discardCloser) Close() error                { return nil }

// FuzzCheckLine holds check to the SDK's stdio connection, whose reader ends the session on
// the first line it cannot read: a line check leaves to the SDK is one the connection reads
// as a message, and one the connection reads is left to the SDK, but for a batch with a
// notification, which check refuses on purpose. Both are fresh: no initialize read, no batch
// waiting.
func FuzzCheckLine(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","ID":2}`,
		`{"jsonrpc":"2.0","Method":"ping","id":1}`,
		`{oops`, `[1,2]`, `"x"`, `{}`, `null`, `[]`, `7`,
		`{"jsonrpc":"1.0","id":3,"method":"ping"}`,
		`[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"ping"}]`,
		`[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":"3","method":"ping"}]`,
		`[{"jsonrpc":"2.0","id":3,"result":{}},{"jsonrpc":"2.0","id":3,"result":{}}]`,
		`[{"jsonrpc":"2.0","method":"x"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\"]}}"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":` + strings.Repeat("[", 999) + strings.Repeat("]", 999) + `}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping","params":` + strings.Repeat("[", 998) + strings.Repeat("]", 998) + `}]`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping","params":` + strings.Repeat("[", 997) + strings.Repeat("]", 997) + `}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || bytes.ContainsAny(line, "\n\r") {
			return // the drainer splits lines at \n, and \r is the SDK's line end too
		}
		d := newDrainer(nil, io.Discard, 0, time.Second)
		code, msg := d.check(line)
		ctx := context.Background()
		conn, err := (&sdk.IOTransport{Reader: io.NopCloser(bytes.NewReader(append(slices.Clip(line), '\n'))), Writer: discardCloser{}}).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Read(ctx)
		conn.Close()
		switch {
		case code == 0 && err != nil:
			t.Fatalf("check leaves %s to the SDK, whose connection ends on it: %v", line, err)
		case code != 0 && err == nil && msg != "Invalid Request: a notification in a batch":
			t.Fatalf("check refuses %s (%d %s), which the SDK's connection reads", line, code, msg)
		}
	})
}

// TestRequestIDInUseIsAnswered: a request whose id is that of a request still running (the
// client reused it, as a shell script piping every request with "id":3 does) is answered
// -32600 with id null, and the request running is answered once, with its own result. The
// SDK's connection dropped such a request unanswered, and at the end of stdin the drainer,
// which had counted it, waited for it until the drain deadline, then answered id 3 a second
// time with CodeDrainTimeout ("it may still take effect"). Under synctest, so that deadline
// would pass at once.
func TestRequestIDInUseIsAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		out := &lockedBuffer{}
		script := strings.Join([]string{
			`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wait","arguments":{}}}`,
			`{"jsonrpc":"2.0","id":3,"method":"ping"}`,
			`{"jsonrpc":"2.0","id":3.0,"method":"ping"}`,
			`{"jsonrpc":"2.0","id":4,"method":"ping"}`,
		}, "\n") + "\n"
		ended := make(chan error, 1)
		go func() { ended <- sdkSession(t, script, release, out) }()
		synctest.Wait()
		before := out.lines()
		close(release)
		if err := <-ended; err != nil {
			t.Fatalf("the session ended with %v", err)
		}
		var nulls, threes int
		for _, l := range out.lines() {
			var r stdioResponse
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("stdout line %s", l)
			}
			switch string(r.ID) {
			case "null":
				if r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidRequest {
					t.Errorf("stdout line %s, want -32600", l)
				}
				nulls++
			case "3":
				if r.Error != nil || !strings.Contains(string(r.Result), "done") {
					t.Errorf("request 3: %s, want the tool's result", l)
				}
				threes++
			}
		}
		if nulls != 2 || threes != 1 || !slices.ContainsFunc(before, func(l string) bool { return strings.Contains(l, `"id":4,"result"`) }) {
			t.Fatalf("%d answers with id null and %d to id 3, want 2 and 1, and 4 answered while 3 ran; stdout:\n%s",
				nulls, threes, strings.Join(out.lines(), "\n"))
		}
	})
}
