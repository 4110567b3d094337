package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// TestWakeTicketReconcileCommands runs turns from the CLI against a real airlockd and a
// scripted model: streamed text, --json, --no-wait with ticket, and the refusals of reconcile,
// steer and abort.
func TestWakeTicketReconcileCommands(t *testing.T) {
	llm := modeltest.New()
	t.Cleanup(llm.Close)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	cwd := t.TempDir()
	cli(t, d.Socket, "", "session", "open", "s", "--generation", "1", "--cwd", cwd, "--model", "local/m").wantCode(t, exitOK)

	llm.Push(modeltest.Reply{Text: "Hello there.", Chunk: 3, Usage: model.Usage{TotalTokens: 12}})
	r := cli(t, d.Socket, "", "wake", "s", "say hello", "--generation", "1", "--key", "k1").wantCode(t, exitOK)
	if r.stdout != "Hello there.\n" || !strings.Contains(r.stderr, "turn stop: 1 model call(s), 0 tool call(s), 12 tokens") {
		t.Fatalf("wake output:\n%s\n%s", r.stdout, r.stderr)
	}
	// A retry with the key prints the recorded answer; the prompt may come from stdin.
	r = cli(t, d.Socket, "say hello\n", "wake", "s", "-", "--generation", "1", "--key", "k1").wantCode(t, exitOK)
	if r.stdout != "Hello there.\n" || llm.Count() != 1 {
		t.Fatalf("retry: %q after %d model calls", r.stdout, llm.Count())
	}
	var env jsonEnvelope
	r = cli(t, d.Socket, "", "wake", "s", "say hello", "--generation", "1", "--key", "k1", "--json").wantCode(t, exitOK)
	var wr struct {
		Result protocol.TurnResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &env); err != nil || !env.OK || json.Unmarshal(env.Data, &wr) != nil || wr.Result.Text != "Hello there." {
		t.Fatalf("--json: %v %s", err, r.stdout)
	}

	llm.Push(modeltest.Reply{Text: "later"})
	r = cli(t, d.Socket, "", "wake", "s", "and later", "--generation", "1", "--key", "k2", "--no-wait").wantCode(t, exitOK)
	id := protocol.TicketID("s", "k2")
	if !strings.HasPrefix(r.stdout, id+" ") {
		t.Fatalf("--no-wait: %q", r.stdout)
	}
	// Poll until the turn is over, so that steer below finds nothing running.
	deadline := time.Now().Add(waitTimeout)
	for {
		r = cli(t, d.Socket, "", "ticket", id).wantCode(t, exitOK)
		if !strings.HasPrefix(r.stdout, id+" ") || !strings.Contains(r.stdout, "key k2") {
			t.Fatalf("ticket: %s", r.stdout)
		}
		if strings.HasPrefix(r.stdout, id+" succeeded") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticket never succeeded: %s", r.stdout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r = cli(t, d.Socket, "", "reconcile", id, "--outcome", "failed").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "ticket_not_indeterminate") && !strings.Contains(r.stderr, "ticket_not_found") {
		t.Fatalf("reconcile: %s", r.stderr)
	}
	cli(t, d.Socket, "", "reconcile", id).wantCode(t, exitUsage)
	cli(t, d.Socket, "", "ticket", "ticket-short").wantCode(t, exitFailure)

	r = cli(t, d.Socket, "", "steer", "s", "faster", "--generation", "1").wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "session_not_running") {
		t.Fatalf("steer: %s", r.stderr)
	}
	r = cli(t, d.Socket, "", "abort", "s", "--generation", "1").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "had no running turn") {
		t.Fatalf("abort: %s", r.stdout)
	}
	cli(t, d.Socket, "", "wake", "s", "x").wantCode(t, exitUsage) // no --generation
}

// TestReadTextBounds: a prompt from stdin is read whole but never beyond its bound.
func TestReadTextBounds(t *testing.T) {
	a := &app{stdin: strings.NewReader(strings.Repeat("x", maxPromptBytes+1))}
	if _, err := a.readText("-", "prompt"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized prompt: %v", err)
	}
	a = &app{stdin: strings.NewReader("hello\n")}
	if got, err := a.readText("-", "prompt"); err != nil || got != "hello" {
		t.Fatalf("prompt from stdin: %q %v", got, err)
	}
	if _, err := (&app{}).readText("-", "prompt"); err == nil {
		t.Fatal("no stdin accepted")
	}
}
