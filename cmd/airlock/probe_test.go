package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
)

func TestProbeReady(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	r := cli(t, d.Socket, "", "probe").wantCode(t, exitOK)
	if !regexp.MustCompile(`^ready hostInstanceId=\S+ phase=ready protocol=2\.0\n$`).MatchString(r.stdout) {
		t.Errorf("probe output %q", r.stdout)
	}

	j := cli(t, d.Socket, "", "probe", "--json").wantCode(t, exitOK)
	var pr probeResult
	decode(t, envelopeOf(t, j, "probe", true).Data, &pr)
	if !pr.Ready || pr.Phase != protocol.PhaseReady || pr.HostInstanceID == "" || pr.ProtocolVersion != protocol.Version2 || pr.ExitCode != exitOK {
		t.Errorf("probe --json data %+v", pr)
	}
}

func TestProbeMissingSocket(t *testing.T) {
	t.Parallel()
	socket := filepath.Join(daemontest.ShortDir(t), "absent", "airlockd.sock")
	r := cli(t, socket, "", "probe").wantCode(t, exitUnavailable)
	if r.stdout != "" || !strings.HasPrefix(r.stderr, "airlock: transport: ") {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}

	j := cli(t, socket, "", "probe", "--json").wantCode(t, exitUnavailable)
	env := envelopeOf(t, j, "probe", false)
	var pr probeResult
	decode(t, env.Data, &pr)
	if env.Error.Code != codeTransport || pr.ExitCode != exitUnavailable || pr.Ready {
		t.Errorf("error %+v data %+v", env.Error, pr)
	}
}

// TestUnreachableNamesTheStartCommand: a command that finds no daemon, whether the socket is
// missing or stale (a file nothing accepts on, as a killed daemon leaves), says on stderr how
// to start one on that socket; --json keeps the envelope as it was. Before, it said only
// "cannot connect", and a newcomer had to find the command in the README.
func TestUnreachableNamesTheStartCommand(t *testing.T) {
	t.Parallel()
	dir := daemontest.ShortDir(t)
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	for _, tc := range []struct{ name, socket string }{
		{"missing", filepath.Join(dir, "absent", "airlockd.sock")},
		{"stale", stale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{{"status"}, {"probe"}, {"session", "list"}} {
				r := cli(t, tc.socket, "", args...).wantCode(t, exitUnavailable)
				want := "airlock: is airlockd running? start it with `"
				if lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); len(lines) != 2 ||
					!strings.HasPrefix(lines[0], "airlock: transport: cannot connect to airlockd at "+tc.socket+": ") ||
					!strings.HasPrefix(lines[1], want) || !strings.Contains(lines[1], "airlockd --socket "+tc.socket+" &`") {
					t.Errorf("%v: stderr %q, want the failure and then %q…", args, r.stderr, want)
				}
			}
			j := cli(t, tc.socket, "", "status", "--json").wantCode(t, exitUnavailable)
			if env := envelopeOf(t, j, "status", false); env.Error.Code != codeTransport || strings.Contains(env.Error.Message, "start it") {
				t.Errorf("--json error %+v", env.Error)
			}
		})
	}
}

// TestMCPUnreachableHintOnce: airlock mcp serving a client on stdio, with no daemon, says on
// stderr once how to start one (its own sentence, which adds "then restart this MCP server"),
// not the CLI's hint line as well.
func TestMCPUnreachableHintOnce(t *testing.T) {
	t.Parallel()
	socket := filepath.Join(daemontest.ShortDir(t), "absent", "airlockd.sock")
	r := cli(t, socket, "", "mcp", "--dir", t.TempDir()).wantCode(t, exitUnavailable)
	if n := strings.Count(r.stderr, "start it with"); n != 1 || !strings.Contains(r.stderr, "then restart this MCP server") {
		t.Errorf("stderr names the start command %d times, want once:\n%s", n, r.stderr)
	}
}

// response renders a handshake answer of a fake daemon.
func response(c fakeCommand, body string) string {
	return fmt.Sprintf(`{"protocolVersion":%q,"kind":"response","requestId":%q,"hostInstanceId":"fake",%s}`, c.ProtocolVersion, c.RequestID, body)
}

const (
	refusedBody = `"ok":false,"error":{"code":"incompatible_protocol","message":"no","retryable":false}`
	readyBody   = `"ok":true,"data":{"protocolVersion":"1.0","host":{"hostInstanceId":"fake","ready":true,"recovery":{"phase":"ready"}}}`
)

func TestProbeFakePeers(t *testing.T) {
	t.Parallel()
	// drain reads until the client goes away, so that only what a case writes reaches it.
	drain := func(nc net.Conn) { io.Copy(io.Discard, nc) }
	cases := []struct {
		name    string
		serve   func(nc net.Conn)
		args    []string
		code    int
		errCode string // on stderr, when the probe fails
		stdout  string // all of stdout, when it does not
		conns   int    // connections the probe makes: 2 after an error answer to 2.0
	}{
		{name: "garbage text", serve: func(nc net.Conn) {
			io.WriteString(nc, "this is not an airlock daemon\n")
			drain(nc)
		}, code: exitProtocol, errCode: codeProtocol},
		{name: "unsolicited JSON", serve: func(nc net.Conn) {
			io.WriteString(nc, `{"hello":"world"}`+"\n")
			drain(nc)
		}, code: exitProtocol, errCode: codeProtocol},
		{name: "echo", serve: func(nc net.Conn) {
			sc := bufio.NewScanner(nc)
			for sc.Scan() {
				fmt.Fprintf(nc, "%s\n", sc.Bytes())
			}
		}, code: exitProtocol, errCode: codeProtocol},
		{name: "no host in answer", serve: func(nc net.Conn) {
			eachCommand(nc, func(c fakeCommand) string { return response(c, `"ok":true,"data":{}`) })
		}, code: exitProtocol, errCode: codeProtocol},
		{name: "refused in both versions", serve: func(nc net.Conn) {
			eachCommand(nc, func(c fakeCommand) string { return response(c, refusedBody) })
		}, code: exitProtocol, errCode: protocol.CodeIncompatibleProtocol, conns: 2},
		{name: "falls back to 1.0", serve: func(nc net.Conn) {
			eachCommand(nc, func(c fakeCommand) string {
				if c.ProtocolVersion == protocol.Version2 {
					return response(c, refusedBody)
				}
				return response(c, readyBody)
			})
		}, code: exitOK, stdout: "ready hostInstanceId=fake phase=ready protocol=1.0\n", conns: 2},
		{name: "connection refused at capacity", serve: func(nc net.Conn) {
			io.WriteString(nc, `{"protocolVersion":"1.0","kind":"response","requestId":"invalid-1","hostInstanceId":"fake","ok":false,"error":{"code":"connection_capacity","message":"full","retryable":true}}`+"\n")
		}, code: exitNotReady, errCode: protocol.CodeConnectionCapacity},
		{name: "closed without answer", serve: func(nc net.Conn) {}, code: exitUnavailable, errCode: codeTransport},
		{name: "silent", serve: drain, args: []string{"--timeout", "200ms"}, code: exitUnavailable, errCode: codeTransport},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			conns := 0
			socket := fakeServer(t, func(nc net.Conn) {
				mu.Lock()
				conns++
				mu.Unlock()
				tc.serve(nc)
			})
			r := cli(t, socket, "", append([]string{"probe"}, tc.args...)...).wantCode(t, tc.code)
			if tc.errCode != "" && !strings.HasPrefix(r.stderr, "airlock: "+tc.errCode+": ") {
				t.Errorf("stderr %q, want code %s", r.stderr, tc.errCode)
			}
			if tc.stdout != "" && r.stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", r.stdout, tc.stdout)
			}
			mu.Lock()
			defer mu.Unlock()
			want := max(tc.conns, 1)
			if conns != want {
				t.Errorf("%d connections, want %d", conns, want)
			}
		})
	}
}

func TestProbeFallbackVersions(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	socket := fakeServer(t, func(nc net.Conn) {
		eachCommand(nc, func(c fakeCommand) string {
			mu.Lock()
			seen = append(seen, c.ProtocolVersion+" "+c.Operation)
			mu.Unlock()
			return response(c, refusedBody)
		})
	})
	j := cli(t, socket, "", "probe", "--json").wantCode(t, exitProtocol)
	env := envelopeOf(t, j, "probe", false)
	if env.Error.Code != protocol.CodeIncompatibleProtocol {
		t.Errorf("error %+v", env.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"2.0 handshake", "1.0 handshake"}; !slices.Equal(seen, want) {
		t.Errorf("handshakes %q, want %q", seen, want)
	}
}
