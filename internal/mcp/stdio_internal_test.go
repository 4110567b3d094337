package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

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
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
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

// TestDrainSkipsAnOverlongLine: a line over the bound is not tracked (the SDK ends the
// session on it) and does not grow the drainer's buffer past the bound.
func TestDrainSkipsAnOverlongLine(t *testing.T) {
	d := &drainer{maxLine: 64, pending: map[string]int{}, expired: map[string]bool{}, changed: make(chan struct{}, 1)}
	long := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"` + strings.Repeat("a", 100) + `"}}`
	d.scan([]byte(long[:40]))
	d.scan([]byte(long[40:] + "\n" + `{"jsonrpc":"2.0","id":8,"method":"ping"}` + "\n"))
	if len(d.pending) != 1 || d.pending["n8"] != 1 || cap(d.line) > 128 {
		t.Fatalf("pending %v, line buffer %d", d.pending, cap(d.line))
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
