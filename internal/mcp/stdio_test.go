package mcp_test

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestStdinKinds runs airlock mcp with stdin and stdout as a pipe (as Go and Python clients
// start a server) and as a socket pair (as Node.js clients do), each of which it reads
// through the runtime's poller: a call is answered, and closing the client's end ends the
// process with exit 0.
func TestStdinKinds(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello\n"), 0o600)
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
