package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/daemontest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(daemontest.Main(m))
}

// lineTimeout bounds each wait for a line in tests; it only fires when something is broken.
const lineTimeout = 10 * time.Second

// rawConn is a test client that speaks bytes, to send what a well-behaved client never would.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, socket string) *rawConn {
	t.Helper()
	nc, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
}

func (c *rawConn) send(lines ...string) {
	c.t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(c.nc, l+"\n"); err != nil {
			c.t.Fatalf("write: %v", err)
		}
	}
}

// next reads one line and decodes it into a generic map.
func (c *rawConn) next() map[string]any {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(lineTimeout))
	line, err := c.br.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("read: %v (partial %q)", err, line)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		c.t.Fatalf("daemon sent invalid JSON %q: %v", line, err)
	}
	return m
}

// expectEOF asserts that the daemon closes the connection.
func (c *rawConn) expectEOF() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(lineTimeout))
	line, err := c.br.ReadBytes('\n')
	if err == nil {
		c.t.Fatalf("expected the connection to close, got %s", line)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatal("expected the connection to close; it stayed open")
	}
}

// errCode returns the error code of a response, or "" for a success.
func errCode(t *testing.T, resp map[string]any) string {
	t.Helper()
	if resp["ok"] == true {
		return ""
	}
	e, ok := resp["error"].(map[string]any)
	if !ok {
		t.Fatalf("response without ok or error: %v", resp)
	}
	return e["code"].(string)
}
