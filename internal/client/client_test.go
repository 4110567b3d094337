package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
)

// fakeDaemon accepts one connection on a socket of its own and answers every line it reads
// with the lines reply returns for it (with "{rid}" replaced by the line's requestId).
func fakeDaemon(t *testing.T, reply func(requestID string) []string) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		dec := json.NewDecoder(nc)
		for {
			var cmd struct {
				RequestID string `json:"requestId"`
			}
			if dec.Decode(&cmd) != nil {
				return
			}
			for _, l := range reply(cmd.RequestID) {
				if _, err := nc.Write([]byte(strings.ReplaceAll(l, "{rid}", cmd.RequestID) + "\n")); err != nil {
					return
				}
			}
		}
	}()
	return socket
}

func dialT(t *testing.T, socket string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestResponsesAndEvents checks that a response is decoded member by member as the whole line
// would be, its data kept byte for byte (whitespace included), and that an event ahead of it
// reaches Events as it was sent.
func TestResponsesAndEvents(t *testing.T) {
	big := strings.Repeat(`x\n\"`, 1<<18)
	event := `{"protocolVersion":"2.0","kind":"event","event":"sessionClosed","hostInstanceId":"h","sessionId":"s","generation":1,"sequence":7,"data":{"reason":"x"}}`
	socket := fakeDaemon(t, func(string) []string {
		return []string{event,
			`{"protocolVersion":"2.0","kind":"response","requestId":"{rid}","hostInstanceId":"h","sessionId":"s","sequence":3,"ok":true,"data":{"content":"` + big + `", "eof" : true}}`}
	})
	c := dialT(t, socket)
	r, err := c.Call(context.Background(), Command{Operation: "invokeTool", RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(3)
	want := &Response{ProtocolVersion: "2.0", Kind: "response", RequestID: "r1", HostInstanceID: "h", SessionID: "s", Sequence: &seq, OK: true,
		Data: json.RawMessage(`{"content":"` + big + `", "eof" : true}`)}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("response differs: %.300v", r)
	}
	select {
	case e := <-c.Events():
		if string(e) != event {
			t.Fatalf("event %s", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}

// TestMaxLineBytes: with the daemon's line bound set, a command longer than it is refused
// with a *LineTooLongError without being sent (the fake daemon answers every line it reads, so a
// sent one would be answered), exactly at the bound it is sent, and the connection carries the
// next call as before.
func TestMaxLineBytes(t *testing.T) {
	socket := fakeDaemon(t, func(string) []string {
		return []string{`{"protocolVersion":"2.0","kind":"response","requestId":"{rid}","hostInstanceId":"h","ok":true,"data":{}}`}
	})
	c := dialT(t, socket)
	cmd := func(n int) Command {
		return Command{Operation: "invokeTool", RequestID: "r", Payload: json.RawMessage(`{"x":"` + strings.Repeat("a", n) + `"}`)}
	}
	line, _ := appendCommand(nil, c.version, "r", cmd(100))
	limit := int64(len(line) - 1)
	c.SetMaxLineBytes(limit)
	_, err := c.Call(context.Background(), cmd(101))
	var long *LineTooLongError
	if !errors.As(err, &long) || long.Bytes != int(limit)+1 || long.Limit != limit || long.Operation != "invokeTool" {
		t.Fatalf("a command one byte over the bound: %v", err)
	}
	for _, n := range []int{100, 1} {
		if r, err := c.Call(context.Background(), cmd(n)); err != nil || !r.OK {
			t.Fatalf("a command of %d bytes within the bound: %v %+v", n, err, r)
		}
	}
}

// TestRefusal checks that an error response comes back as the daemon's error.
func TestRefusal(t *testing.T) {
	socket := fakeDaemon(t, func(string) []string {
		return []string{`{"protocolVersion":"2.0","kind":"response","requestId":"{rid}","hostInstanceId":"h","ok":false,"error":{"code":"session_not_found","message":"no","retryable":false}}`}
	})
	r, err := dialT(t, socket).Call(context.Background(), Command{Operation: "wake"})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.Error == nil || r.Error.Code != "session_not_found" || r.Data != nil {
		t.Fatalf("refusal decoded as %+v", r)
	}
}

// TestProtocolBreaks checks that lines that are not the protocol end the connection with
// ErrProtocol: not JSON, duplicate keys, and members of the wrong type.
func TestProtocolBreaks(t *testing.T) {
	for name, line := range map[string]string{
		"not JSON":      `{"kind":"response",`,
		"not an object": `["response"]`,
		"duplicate key": `{"kind":"response","requestId":"{rid}","ok":true,"ok":false}`,
		"ok a string":   `{"kind":"response","requestId":"{rid}","ok":"yes"}`,
		"bad error":     `{"kind":"response","requestId":"{rid}","ok":false,"error":"boom"}`,
	} {
		t.Run(name, func(t *testing.T) {
			socket := fakeDaemon(t, func(string) []string { return []string{line} })
			c := dialT(t, socket)
			if _, err := c.Call(context.Background(), Command{Operation: "status"}); err == nil {
				t.Fatal("call succeeded")
			}
			<-c.Done()
			if err := c.Err(); !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrClosed) {
				t.Fatalf("Err() = %v, want ErrProtocol and ErrClosed", err)
			}
		})
	}
}

// FuzzLineMembers checks the member-by-member decoding of a daemon line against
// json.Unmarshal of the whole line into a Response: whenever the walk accepts a line, both
// succeed or fail together and agree on every field.
func FuzzLineMembers(f *testing.F) {
	for _, s := range []string{
		`{"protocolVersion":"2.0","kind":"response","requestId":"r","hostInstanceId":"h","ok":true,"data":{"a":[1, 2]}}`,
		`{"kind":"response","ok":false,"error":{"code":"x","message":"y","retryable":true,"details":{"k":1}}}`,
		`{"kind":"response","sequence":null,"data":null,"error":null,"ok":null}`,
		`{"kind":"event","event":"e","sequence":18446744073709551615}`,
		`{"ok":"true"}`,
		`{"data": "a\u0000b" , "other":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var m lineMembers
		if decodeErr := ndjson.DecodeAliased(line, &m, ndjson.Open); decodeErr != nil {
			return
		}
		var got, want Response
		gotErr := m.decode(&got)
		wantErr := json.Unmarshal(line, &want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("member decoding %v, whole line %v", gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("member decoding %+v, whole line %+v", got, want)
		}
	})
}

// TestAppendCommandMatchesEncodingJSON: the line Call writes is the line encoding/json wrote
// of the envelope before (HTML escaping off), for every kind of member and payload, and a
// json.RawMessage payload is sent compacted, or refused when it is not JSON, as is a payload
// encoding/json cannot encode.
func TestAppendCommandMatchesEncodingJSON(t *testing.T) {
	gen := int64(7)
	odd := "a<b>&\"q\"\\\u2028\x01\xff é"
	for _, c := range []struct {
		name string
		cmd  Command
		want any // the payload as the old envelope held it
	}{
		{"bare", Command{Operation: "status"}, struct{}{}},
		{"every member", Command{Operation: "invokeTool", SessionID: "s-1", Generation: &gen, IdempotencyKey: "k-1", Client: "claude-code",
			Payload: map[string]any{"path": "a.txt", "n": 3}}, map[string]any{"path": "a.txt", "n": 3}},
		{"a zero generation", Command{Operation: "x", Generation: new(int64)}, struct{}{}},
		{"strings to escape", Command{Operation: odd, SessionID: odd, Client: odd, Payload: odd}, odd},
		{"a struct payload", Command{Operation: "x", Payload: struct {
			A string `json:"a,omitempty"`
			B []int  `json:"b"`
		}{B: []int{1}}}, struct {
			A string `json:"a,omitempty"`
			B []int  `json:"b"`
		}{B: []int{1}}},
		{"raw bytes, spaced", Command{Operation: "x", Payload: json.RawMessage(" { \"a\" : [ 1 , 2 ] } ")}, json.RawMessage(`{"a":[1,2]}`)},
		{"a nil RawMessage", Command{Operation: "x", Payload: json.RawMessage(nil)}, json.RawMessage(nil)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := appendCommand(nil, "2.0", "r-1", c.cmd)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ndjson.Marshal(struct {
				ProtocolVersion string `json:"protocolVersion"`
				RequestID       string `json:"requestId"`
				Operation       string `json:"operation"`
				SessionID       string `json:"sessionId,omitempty"`
				Generation      *int64 `json:"generation,omitempty"`
				IdempotencyKey  string `json:"idempotencyKey,omitempty"`
				Client          string `json:"client,omitempty"`
				Payload         any    `json:"payload"`
			}{"2.0", "r-1", c.cmd.Operation, c.cmd.SessionID, c.cmd.Generation, c.cmd.IdempotencyKey, c.cmd.Client, c.want})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("appendCommand\n%s\nencoding/json\n%s", got, want)
			}
		})
	}
	for _, bad := range []any{json.RawMessage(""), json.RawMessage("{"), json.RawMessage(`{"a":1} x`), json.RawMessage("nul"), make(chan int)} {
		if line, err := appendCommand(nil, "2.0", "r-1", Command{Operation: "x", Payload: bad}); err == nil {
			t.Errorf("payload %v: sent %s, want an error", bad, line)
		}
	}
}

// TestClientRefusesAForeignServer: the client sends nothing to a socket served by another
// user. The default socket's directory without a runtime directory, /tmp/airlock-$UID, is a
// path another user can create first; a server of theirs there received every command, a
// descriptor's capability handle included (shown as nobody, with airlock session open
// --descriptor -).
func TestClientRefusesAForeignServer(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(nc)
		nc.Close()
		got <- b
	}()
	defer ln.Close()
	// This process serves the socket; as far as the client knows, it is another user.
	defer func(f func() int) { euid = f }(euid)
	euid = func() int { return os.Geteuid() + 1 }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, socket)
	if err == nil {
		c.Call(ctx, Command{Operation: "status"})
		c.Close()
		t.Fatal("the client dialled a server of another user")
	}
	if !errors.Is(err, ownersock.ErrForeignPeer) || !strings.Contains(err.Error(), socket) {
		t.Errorf("Dial: %v, want ErrForeignPeer naming the socket", err)
	}
	if b := <-got; len(b) != 0 {
		t.Errorf("the client sent %q to a server of another user", b)
	}
}
