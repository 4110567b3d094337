package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// answersByID decodes raw's stdout, one response per line, by requestId.
func answersByID(t *testing.T, stdout string) map[string]client.Response {
	t.Helper()
	out := map[string]client.Response{}
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		var r client.Response
		decode(t, []byte(line), &r)
		if r.Kind != protocol.KindResponse {
			t.Fatalf("not a response: %s", line)
		}
		out[r.RequestID] = r
	}
	return out
}

func TestRaw(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	const (
		handshake = `{"protocolVersion":"2.0","requestId":"r-1","operation":"handshake","payload":{}}`
		unknown   = `{"protocolVersion":"2.0","requestId":"r-2","operation":"teleport","payload":{}}`
	)

	t.Run("two envelopes", func(t *testing.T) {
		r := cli(t, d.Socket, handshake+"\n"+unknown+"\n", "raw").wantCode(t, exitOK)
		got := answersByID(t, r.stdout)
		if len(got) != 2 {
			t.Fatalf("%d answers, want 2:\n%s", len(got), r.stdout)
		}
		if a := got["r-1"]; !a.OK || a.ProtocolVersion != "2.0" {
			t.Errorf("handshake answer %+v", a)
		}
		if a := got["r-2"]; a.OK || a.Error == nil || a.Error.Code != protocol.CodeUnknownOperation {
			t.Errorf("unknown operation answer %+v", a)
		}
		if r.stderr != "" {
			t.Errorf("stderr %q", r.stderr)
		}
	})

	t.Run("lines are passed through unchanged", func(t *testing.T) {
		// No final LF, and an unknown outer member the daemon tolerates; the answer echoes
		// the exact version.
		in := `{"protocolVersion":"2.7","requestId":"r-3","operation":"status","payload":{},"extra":1}`
		r := cli(t, d.Socket, in, "raw").wantCode(t, exitOK)
		a := answersByID(t, r.stdout)["r-3"]
		if !a.OK || a.ProtocolVersion != "2.7" {
			t.Errorf("answer %+v", a)
		}
	})

	t.Run("line without a request id", func(t *testing.T) {
		in := handshake + "\n" + `{"protocolVersion":"2.0","operation":"status","payload":{}}` + "\n"
		r := cli(t, d.Socket, in, "raw").wantCode(t, exitOK)
		got := answersByID(t, r.stdout)
		if len(got) != 2 || !got["r-1"].OK {
			t.Fatalf("answers:\n%s", r.stdout)
		}
		for id, a := range got {
			if id != "r-1" && (!strings.HasPrefix(id, invalidPrefix) || a.Error == nil || a.Error.Code != protocol.CodeInvalidField) {
				t.Errorf("answer %s: %+v", id, a)
			}
		}
	})

	t.Run("daemon closes early", func(t *testing.T) {
		// Invalid JSON is answered, then the daemon closes: the handshake after it goes
		// unanswered.
		r := cli(t, d.Socket, "not json\n"+handshake+"\n", "raw").wantCode(t, exitFailure)
		if !strings.Contains(r.stdout, `"code":"invalid_json"`) || !strings.HasPrefix(r.stderr, "airlock: transport: ") {
			t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
		}
	})

	t.Run("stdin line too long", func(t *testing.T) {
		long := `{"requestId":"` + strings.Repeat("x", client.MaxLineBytes) + `"}`
		r := cli(t, d.Socket, handshake+"\n"+long+"\n", "raw").wantCode(t, exitUsage)
		if !strings.HasPrefix(r.stderr, "airlock: usage: stdin: ") {
			t.Errorf("stderr %q", r.stderr)
		}
		// What was sent before the bad line is still answered and printed.
		if a := answersByID(t, r.stdout)["r-1"]; !a.OK {
			t.Errorf("stdout %q", r.stdout)
		}
	})
}

func TestRequestID(t *testing.T) {
	cases := []struct {
		line string
		id   string
		ok   bool
	}{
		{`{"requestId":"a"}`, "a", true},
		{`{"requestId":""}`, "", false},
		{`{"requestId":5}`, "", false},
		{`{"requestId":null}`, "", false},
		{`{"requestId":"a\u0007"}`, "", false},
		{`{"requestId":"` + strings.Repeat("é", protocol.MaxRequestIDLen) + `"}`, strings.Repeat("é", protocol.MaxRequestIDLen), true},
		{`{"requestId":"` + strings.Repeat("é", protocol.MaxRequestIDLen+1) + `"}`, "", false},
		{`not json`, "", false},
		{`["requestId"]`, "", false},
	}
	for _, tc := range cases {
		id, ok := requestID([]byte(tc.line))
		if id != tc.id || ok != tc.ok {
			t.Errorf("requestID(%.40s) = %q, %t; want %q, %t", tc.line, id, ok, tc.id, tc.ok)
		}
	}
}

func TestAnswers(t *testing.T) {
	a := newAnswers()
	a.sent([]byte(`{"requestId":"x"}`))
	a.sent([]byte(`{"requestId":"x"}`)) // a duplicate in flight is answered twice
	a.sent([]byte(`garbage`))
	a.endInput()
	resp := func(id string) []byte {
		b, _ := json.Marshal(map[string]string{"kind": "response", "requestId": id})
		return b
	}
	for _, line := range [][]byte{
		[]byte(`{"kind":"event","requestId":"x"}`), resp("unknown"), resp("x"), resp("invalid-1"), resp("invalid-2"),
	} {
		a.answered(line)
	}
	if n := a.outstanding(); n != 1 {
		t.Fatalf("outstanding %d, want 1", n)
	}
	select {
	case <-a.settled:
		t.Fatal("settled with an answer outstanding")
	default:
	}
	a.answered(resp("x"))
	select {
	case <-a.settled:
	default:
		t.Fatal("not settled once everything was answered")
	}
}

// TestRawWaitsForTheFirstLine: a person at a terminal takes longer than the daemon's
// first-line timeout to type a command; raw dials only once stdin has a line, so the command is
// answered instead of meeting line_timeout.
func TestRawWaitsForTheFirstLine(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--first-line-timeout", "100ms"}})
	pr, pw := io.Pipe()
	go func() {
		time.Sleep(500 * time.Millisecond) // five first-line timeouts
		io.WriteString(pw, `{"protocolVersion":"2.0","requestId":"slow","operation":"handshake","payload":{}}`+"\n")
		pw.Close()
	}()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--socket", d.Socket, "raw"}, pr, &out, &errb); code != exitOK {
		t.Fatalf("raw: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if a := answersByID(t, out.String())["slow"]; !a.OK {
		t.Fatalf("answer %+v", a)
	}
}
