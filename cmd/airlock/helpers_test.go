package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(daemontest.Main(m))
}

// waitTimeout bounds every wait in these tests; it only runs out when something is broken.
const waitTimeout = 20 * time.Second

// result is what one in-process run of the CLI produced.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the CLI in-process against socket with the given stdin.
func cli(t *testing.T, socket, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	code := run(ctx, append([]string{"--socket", socket}, args...), strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// wantCode fails the test when r did not exit with code.
func (r result) wantCode(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// jsonEnvelope is the --json output, decoded strictly.
type jsonEnvelope struct {
	Schema  string          `json:"schema"`
	Command string          `json:"command"`
	OK      bool            `json:"ok"`
	Data    json.RawMessage `json:"data"`
	Error   *protocol.Error `json:"error"`
}

// envelopeOf checks that stdout is exactly one envelope of command and returns it.
func envelopeOf(t *testing.T, r result, command string, ok bool) jsonEnvelope {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	var env jsonEnvelope
	if err := dec.Decode(&env); err != nil {
		t.Fatalf("stdout is not a JSON envelope: %v\n%s", err, r.stdout)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", r.stdout)
	}
	if env.Schema != cliSchema || env.Command != command || env.OK != ok {
		t.Fatalf("envelope schema=%q command=%q ok=%t, want %q %q %t", env.Schema, env.Command, env.OK, cliSchema, command, ok)
	}
	if ok && (env.Error != nil || len(env.Data) == 0) {
		t.Fatalf("ok envelope must have data and no error:\n%s", r.stdout)
	}
	if !ok && (env.Error == nil || env.Error.Code == "" || env.Error.Message == "") {
		t.Fatalf("failed envelope must have error {code, message}:\n%s", r.stdout)
	}
	return env
}

// decode decodes raw into v, failing the test on error.
func decode(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

// waitFor polls cond until it holds, failing after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startDaemon starts a real airlockd for one test and waits until it is ready. The daemon
// answers handshakes while it still recovers its catalog, and daemontest.Start returns on the
// first answer, so an open right after it could meet host_not_ready.
func startDaemon(t *testing.T) *daemontest.Daemon {
	t.Helper()
	// A provider the session tests name; nothing listens there, and no test runs a turn.
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "prov=http://127.0.0.1:9/v1"}})
	waitFor(t, "airlockd to be ready", func() bool {
		var out, errb bytes.Buffer
		return run(context.Background(), []string{"--socket", d.Socket, "probe"}, strings.NewReader(""), &out, &errb) == exitOK
	})
	return d
}

// fakeServer listens on a Unix socket and runs serve for each connection; it stands in for a
// peer that is not airlockd. It stops, and waits for its goroutines, at the end of the test.
func fakeServer(t *testing.T, serve func(nc net.Conn)) string {
	t.Helper()
	socket := filepath.Join(daemontest.ShortDir(t), "fake.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				defer nc.Close()
				serve(nc)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return socket
}

// command is what a fake server reads of a command line.
type fakeCommand struct {
	ProtocolVersion string `json:"protocolVersion"`
	RequestID       string `json:"requestId"`
	Operation       string `json:"operation"`
}

// eachCommand calls answer for every command line read from nc and writes what it returns.
func eachCommand(nc net.Conn, answer func(c fakeCommand) string) {
	sc := bufio.NewScanner(nc)
	for sc.Scan() {
		var c fakeCommand
		if json.Unmarshal(sc.Bytes(), &c) != nil {
			return
		}
		if _, err := nc.Write([]byte(answer(c) + "\n")); err != nil && !errors.Is(err, net.ErrClosed) {
			return
		}
	}
}
