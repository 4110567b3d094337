package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestInvokeToolWaitsWithoutTheConnection: an invokeTool the adapter has not answered yet holds
// neither the connection's reader nor its writer; a status sent after it on the same connection
// is answered first. The adapter's answer then goes out, and a call still pending at shutdown is
// answered, indeterminate, before the connection closes.
func TestInvokeToolWaitsWithoutTheConnection(t *testing.T) {
	root := daemontest.ShortDir(t)
	held := make(chan []byte, 4)
	answer := startHoldingAdapter(t, filepath.Join(root, "fs.sock"), held)

	d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state")})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !d.sessions.Ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("daemon not ready")
		}
	}
	openToolSession(t, d, filepath.Join(root, "fs.sock"))

	nc, err := net.Dial("unix", d.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(nc)
	send := func(line string) {
		if _, err := nc.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	invoke := func(id string) string {
		return `{"protocolVersion":"2.0","requestId":"` + id + `","operation":"invokeTool","sessionId":"bench","generation":1,` +
			`"payload":{"toolCallId":"` + id + `","operation":"fs.stat","arguments":{"path":"."}}}`
	}

	send(invoke("first"))
	frame := <-held
	send(`{"protocolVersion":"2.0","requestId":"probe","operation":"status","payload":{}}`)
	if r := next(); r["requestId"] != "probe" || r["ok"] != true {
		t.Fatalf("first answer = %v, want the status", r)
	}
	answer(frame)
	if r := next(); r["requestId"] != "first" || r["ok"] != true {
		t.Fatalf("second answer = %v, want the tool result", r)
	}

	send(invoke("pending"))
	<-held
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Shutdown(context.Background())
	}()
	r := next()
	e, _ := r["error"].(map[string]any)
	details, _ := e["details"].(map[string]any)
	if r["requestId"] != "pending" || details["indeterminate"] != true {
		t.Fatalf("answer at shutdown = %v", r)
	}
	<-done
}

// startHoldingAdapter serves an adapter that binds, hands every invoke frame to held instead of
// answering it, and answers one when the returned function is called with it.
func startHoldingAdapter(t *testing.T, socket string, held chan<- []byte) (answer func(frame []byte)) {
	var mu sync.Mutex
	var conn net.Conn
	var wmu *sync.Mutex
	startScriptedAdapter(t, socket, func(c net.Conn, w *sync.Mutex, f map[string]any, line []byte) {
		switch f["kind"] {
		case "invoke":
			mu.Lock()
			conn, wmu = c, w
			mu.Unlock()
			held <- line
		case "abort":
			f["kind"], f["aborted"] = "aborted", true
			reply(c, w, f)
		}
	})
	return func(frame []byte) {
		var f map[string]any
		json.Unmarshal(frame, &f)
		delete(f, "payload")
		f["kind"], f["ok"], f["data"] = "result", true, map[string]any{"type": "directory", "size": 0}
		mu.Lock()
		c, w := conn, wmu
		mu.Unlock()
		reply(c, w, f)
	}
}

// startScriptedAdapter serves a scripted tool adapter on socket until the test ends: it answers
// every bind with bound and hands each other frame, decoded, to frame with its line, its
// connection and the lock that orders writes to that connection.
func startScriptedAdapter(t *testing.T, socket string, frame func(c net.Conn, wmu *sync.Mutex, f map[string]any, line []byte)) {
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(socket, 0o600)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				var wmu sync.Mutex
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadBytes('\n')
					if err != nil {
						return
					}
					var f map[string]any
					if json.Unmarshal(line, &f) != nil {
						return
					}
					if f["kind"] == "bind" {
						delete(f, "capabilityHandle")
						f["kind"] = "bound"
						reply(c, &wmu, f)
						continue
					}
					frame(c, &wmu, f, line)
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

func reply(c net.Conn, mu *sync.Mutex, f map[string]any) {
	b, _ := json.Marshal(f)
	mu.Lock()
	defer mu.Unlock()
	c.Write(append(b, '\n'))
}
