package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// callT runs cmd with a deadline and fails the test on a transport error or a refusal.
func callT(t *testing.T, c *client.Client, cmd client.Command) *client.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Call(ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd.Operation, err)
	}
	if !r.OK {
		t.Fatalf("%s: %v", cmd.Operation, r.Err())
	}
	return r
}

// waitEnded waits until c's current connection has ended.
func waitEnded(t *testing.T, c *client.Client) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not close the connection")
	}
}

// metric reads one of the daemon's host metrics.
func metric(t *testing.T, c *client.Client, name string) uint64 {
	t.Helper()
	var host protocol.HostSnapshot
	if err := callT(t, c, client.Command{Operation: protocol.OpStatus}).Decode(&host); err != nil {
		t.Fatal(err)
	}
	return host.Metrics[name]
}

// TestReconnectAfterEviction evicts a client's idle connection with a real airlockd whose
// per-process share is one connection: dialling a second client evicts the first. The first
// client's connection ends with the daemon's code, and its next call, a non-idempotent open,
// succeeds on a new connection (evicting the second client in turn), and runs once: the
// session exists at generation 1. A call made at once after the evicting dial, racing the
// notice, succeeds too.
func TestReconnectAfterEviction(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-connections-per-peer", "1"}})
	first := d.Dial()
	callT(t, first, client.Command{Operation: protocol.OpHandshake})
	second := d.Dial()
	callT(t, second, client.Command{Operation: protocol.OpHandshake})
	waitEnded(t, first)
	if err := first.Err(); !errors.Is(err, client.ErrClosed) || !strings.Contains(err.Error(), protocol.CodeConnectionEvicted) {
		t.Fatalf("the evicted connection ended with %v, want ErrClosed naming %s", err, protocol.CodeConnectionEvicted)
	}

	gen := int64(1)
	callT(t, first, client.Command{Operation: protocol.OpOpen, SessionID: "s", Generation: &gen, Payload: map[string]any{
		"cwd": t.TempDir(), "session": map[string]any{"mode": "memory"},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": "none"}}})
	waitEnded(t, second) // the reconnect took the one connection of this process
	var list struct {
		Sessions []struct {
			SessionID  string `json:"sessionId"`
			Generation int64  `json:"generation"`
		} `json:"sessions"`
	}
	if err := callT(t, second, client.Command{Operation: protocol.OpListSessions}).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(list.Sessions); string(b) != `[{"sessionId":"s","generation":1}]` {
		t.Fatalf("sessions after the reconnected open: %s", b)
	}

	// Without waiting for the notice: the call's write may still succeed, or fail on the
	// closed socket, before the reader sees why the connection ended.
	for range 20 {
		other := d.Dial()
		callT(t, other, client.Command{Operation: protocol.OpHandshake})
		callT(t, first, client.Command{Operation: protocol.OpStatus})
		other.Close()
	}
	if n := metric(t, first, "connectionsEvicted"); n < 22 {
		t.Fatalf("connectionsEvicted = %d, want at least 22", n)
	}
}

// TestReconnectAfterFirstLineTimeout lets the daemon close a new connection that sent nothing
// (line_timeout, firstLine): nothing ran on it, so the next call reconnects and succeeds.
func TestReconnectAfterFirstLineTimeout(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--first-line-timeout", "200ms"}})
	c := d.Dial()
	waitEnded(t, c)
	if err := c.Err(); !strings.Contains(err.Error(), protocol.CodeLineTimeout) {
		t.Fatalf("the connection ended with %v, want %s", err, protocol.CodeLineTimeout)
	}
	callT(t, c, client.Command{Operation: protocol.OpHandshake})
}

// TestNoReconnectAfterShutdown checks that a connection the daemon closed without saying it
// was idle is not reconnected: a stopped daemon's client fails with ErrClosed, and no new
// connection is attempted (none could tell whether a request in flight ran).
func TestNoReconnectAfterShutdown(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	callT(t, c, client.Command{Operation: protocol.OpHandshake})
	d.Stop()
	waitEnded(t, c)
	_, err := c.Call(context.Background(), client.Command{Operation: protocol.OpHandshake})
	if !errors.Is(err, client.ErrClosed) || strings.Contains(err.Error(), "reconnect") {
		t.Fatalf("a call after shutdown: %v, want ErrClosed without a reconnect", err)
	}
}
