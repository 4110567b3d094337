package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

// TestStdinKinds runs airlock mcp with stdin and stdout as a pipe (as Go and Python clients
// start a server) and as a socket pair (as Node.js clients do), each of which it reads
// through the runtime's poller: a call is answered, and closing the client's end ends the
// process with exit 0.
func TestStdinKinds(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	if err := os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read"))
	bin := daemontest.Binary(t, "airlock")

	for _, kind := range []string{"pipe", "socketpair"} {
		t.Run(kind, func(t *testing.T) {
			cmd := exec.Command(bin, "--socket", e.d.Socket, "mcp", "--session", "agent", "--generation", "1")
			var r io.ReadCloser
			var w io.WriteCloser
			switch kind {
			case "pipe":
				cr, sw, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				sr, cw, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdin, cmd.Stdout = sr, sw
				defer sr.Close()
				defer sw.Close()
				r, w = cr, cw
			case "socketpair":
				fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				c, s := os.NewFile(uintptr(fds[0]), "client"), os.NewFile(uintptr(fds[1]), "server")
				nc, err := net.FileConn(c)
				c.Close()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdin, cmd.Stdout = s, s
				defer s.Close()
				r, w = nc, writeHalf{nc.(*net.UnixConn)}
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer cmd.Process.Kill()
			// The child holds its own copies now.
			cmd.Stdin.(*os.File).Close()
			cmd.Stdout.(*os.File).Close()

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
			cs, err := cl.Connect(ctx, &sdk.IOTransport{Reader: r, Writer: w}, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": "notes.txt"}})
			if err != nil || res.IsError || text(res) != "hello\n" {
				t.Fatalf("fs_read: %v %q", err, text(res))
			}
			cs.Close() // closes the client's end: the bridge reads EOF
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("airlock mcp after its client closed stdin: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("airlock mcp did not exit after its client closed stdin")
			}
		})
	}
}

// writeHalf closes only the writing half of a socket, as a client that closes a server's
// stdin does; the reading half stays open for the answers still due.
type writeHalf struct{ c *net.UnixConn }

func (h writeHalf) Write(p []byte) (int, error) { return h.c.Write(p) }

func (h writeHalf) Close() error { return h.c.CloseWrite() }

// TestStdioLineBound: on stdio, as over HTTP, one message of the client is bounded by
// MaxMessageBytes (below the SDK's own default of 16 MiB). A line that runs past it ends the
// session (the stream cannot be read in step again): it is answered -32600 with id null as
// soon as it passes the bound, though it never ends, and the call read before it, still
// running, is answered too; then airlock mcp exits 76 (the client's input, not the daemon)
// saying why. Before, the SDK ended the session on the line, the call was cancelled
// unanswered, and the exit was 69, the daemon out of reach. Under both revisions.
func TestStdioLineBound(t *testing.T) {
	e := startEnv(t)
	if err := os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := daemontest.Binary(t, "airlock")
	for i, rev := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(rev, func(t *testing.T) {
			a := startScripted(t) // holds the call until unblocked
			session := "agent" + strconv.Itoa(i)
			e.open(t, session, e.root, scriptedDescriptor(a.socket, e.host, session, "fs.read"))
			cmd := exec.Command(bin, "--socket", e.d.Socket, "mcp", "--session", session, "--generation", "1")
			stdout, stderr := &daemontest.SyncBuffer{}, &daemontest.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = stdout, stderr
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer cmd.Process.Kill()

			read := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs_read","arguments":{"path":"notes.txt"}}}`
			if rev == "2025-11-25" {
				io.WriteString(in, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`+"\n"+
					`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
			} else {
				read = strings.Replace(read, `"params":{`, `"params":{`+metaEnvelope+`,`, 1)
			}
			io.WriteString(in, read+"\n")
			waitFor(t, "the call at the adapter", func() bool { return len(a.framesOf("invoke")) == 1 })
			// A request whose string runs 1 MiB past the bound and then waits, unfinished,
			// with stdin open: only the bound can end the session.
			go func() {
				in.Write([]byte(`{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":"`))
				chunk := bytes.Repeat([]byte("a"), 64<<10)
				for sent := 0; sent < mcp.MaxMessageBytes+1<<20; sent += len(chunk) {
					if _, err := in.Write(chunk); err != nil {
						return
					}
				}
			}()
			stdout.Wait(t, "the line's answer", regexp.MustCompile(`\{"jsonrpc":"2.0","id":null,"error":\{"code":-32600,"message":"Invalid Request: a line over 9437184 bytes; the session ends"\}\}`))
			select {
			case err := <-exited:
				t.Fatalf("airlock mcp exited (%v) with the call before the line unanswered\nstdout:\n%s", err, stdout.String())
			default:
			}
			a.unblock()
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 76 {
					t.Fatalf("airlock mcp after an oversized line: %v, want exit 76\nstderr:\n%s", err, stderr.String())
				}
				if !strings.Contains(stderr.String(), "airlock: protocol: a line on stdin exceeds the message bound of 9437184 bytes") {
					t.Fatalf("stderr does not say why: %q", stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("airlock mcp still reads a line past MaxMessageBytes")
			}
			if !regexp.MustCompile(`"id":1,"result":\{.*"text":"x"`).MatchString(stdout.String()) {
				t.Fatalf("the call read before the line is not answered:\n%s", stdout.String())
			}
		})
	}
}

// TestPipedRequestsAreAllAnswered pipes a whole session into airlock mcp at once and closes
// stdin, as `printf '…' | airlock mcp …` does: every request read gets exactly one response
// before the process exits, well within StdinDrainTimeout and each with its own outcome (no
// request is answered by the drain deadline), initialize's first (it is handled before the
// requests after it); the notification gets none. Before, only initialize was answered: the
// end of stdin ended the SDK's session and its queued calls with it. The same holds when the
// last line has no newline: it was waited for before the SDK had read it, and answered only by
// the drain deadline.
func TestPipedRequestsAreAllAnswered(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	if err := os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.stat,fs.write"))
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"printf","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fs_read","arguments":{"path":"notes.txt"}}}`,
		`{"jsonrpc":"2.0","id":"four","method":"tools/call","params":{"name":"fs_write","arguments":{"path":"notes.txt","content":"x","create":true}}}`,
		`{"jsonrpc":"2.0","id":5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"fs_stat","arguments":{"path":"notes.txt"}}}`,
	}, "\n")
	for _, end := range []string{"\n", ""} {
		t.Run(fmt.Sprintf("end %q", end), func(t *testing.T) { pipedSession(t, e, in+end) })
	}
}

// pipedSession is TestPipedRequestsAreAllAnswered's session: in, piped to airlock mcp at once.
func pipedSession(t *testing.T, e *env, in string) {
	cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", e.d.Socket, "mcp", "--session", "agent", "--generation", "1")
	cmd.Stdin = strings.NewReader(in) // a pipe, closed once written
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("airlock mcp: %v\n%s", err, stderr.String())
	}
	if took := time.Since(start); took >= mcp.StdinDrainTimeout {
		t.Fatalf("airlock mcp took %v: it waited for the drain deadline", took)
	}
	type response struct {
		ID     any             `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	byID := map[string]response{}
	var order []string
	for line := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
		var r response
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.ID == nil {
			t.Fatalf("stdout line %q is not a response", line)
		}
		id := fmt.Sprint(r.ID)
		if _, dup := byID[id]; dup {
			t.Fatalf("request %s answered twice", id)
		}
		byID[id] = r
		order = append(order, id)
	}
	want := []string{"1", "2", "3", "four", "5", "6"}
	if len(order) != len(want) || order[0] != "1" {
		t.Fatalf("responses to %v, want one to each of %v, initialize's first\n%s", order, want, stdout.String())
	}
	for _, id := range want {
		r, ok := byID[id]
		if !ok || r.Error != nil || len(r.Result) == 0 {
			t.Fatalf("request %s: %+v, want a result", id, r)
		}
	}
	if !strings.Contains(string(byID["3"].Result), `hello\n`) || !strings.Contains(string(byID["four"].Result), "file_exists") ||
		!strings.Contains(string(byID["2"].Result), "fs_stat") {
		t.Fatalf("results:\n%s", stdout.String())
	}
}

// TestBadLineIsAnswered: a line on stdin that is not JSON ({oops), or JSON that is not a
// JSON-RPC message ([1,2], "x", {}), is answered with a JSON-RPC error with id null (-32700,
// -32600), and airlock mcp serves on: the call read before it and the one after it are
// answered, and the end of stdin ends the session with exit 0. Before, the first such line
// ended the session at once: exit 69 (the daemon out of reach, in this CLI), nothing on
// stdout, the call before it unanswered. Under both the session revision and the stateless one.
func TestBadLineIsAnswered(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	if err := os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read"))
	for _, rev := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(rev, func(t *testing.T) {
			read := func(id int) string {
				return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"fs_read","arguments":{"path":"notes.txt"}}}`
			}
			var lines []string
			if rev == "2025-11-25" {
				lines = append(lines,
					`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"printf","version":"1"}}}`,
					`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			} else {
				read = func(id int) string {
					return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{` + metaEnvelope + `,"name":"fs_read","arguments":{"path":"notes.txt"}}}`
				}
			}
			lines = append(lines, read(1), `{oops`, `[1,2]`, `"x"`, `{}`, read(2))
			cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", e.d.Socket, "mcp", "--session", "agent", "--generation", "1")
			cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("airlock mcp: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			var nulls []int
			read1, read2 := false, false
			for line := range strings.SplitSeq(strings.TrimSpace(stdout.String()), "\n") {
				var r struct {
					ID     json.RawMessage `json:"id"`
					Result json.RawMessage `json:"result"`
					Error  *struct {
						Code int `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatalf("stdout line %q", line)
				}
				switch string(r.ID) {
				case "null":
					if r.Error == nil {
						t.Fatalf("stdout line %q", line)
					}
					nulls = append(nulls, r.Error.Code)
				case "1", "2":
					if !strings.Contains(string(r.Result), `hello\n`) {
						t.Fatalf("request %s: %s", r.ID, line)
					}
					read1, read2 = read1 || string(r.ID) == "1", read2 || string(r.ID) == "2"
				}
			}
			if !read1 || !read2 || !slices.Equal(nulls, []int{-32700, -32600, -32600, -32600}) {
				t.Fatalf("reads answered %v %v, errors with id null %v, want -32700 and -32600 three times\nstdout:\n%s", read1, read2, nulls, stdout.String())
			}
		})
	}
}
