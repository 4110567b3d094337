package daemon_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/hint"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
)

// startAirlockFS runs a real airlock-fs and returns a grant of root to session generation 1
// with ops, as a descriptor for open.
func startAirlockFS(t *testing.T, host, root, session, ops string) map[string]any {
	t.Helper()
	bin := daemontest.Binary(t, "airlock-fs")
	dir := daemontest.ShortDir(t)
	socket, admin := filepath.Join(dir, "fs.sock"), filepath.Join(dir, "admin.sock")
	cmd := exec.Command(bin, "serve", "--socket", socket, "--admin-socket", admin)
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	for deadline := time.Now().Add(20 * time.Second); exec.Command(bin, "grants", "--admin-socket", admin).Run() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("airlock-fs did not start:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, err := exec.Command(bin, "grant", "--admin-socket", admin, "--root", root, "--host-instance", host,
		"--session", session, "--generation", "1", "--operations", ops).Output()
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	var desc map[string]any
	if err := json.Unmarshal(out, &desc); err != nil {
		t.Fatal(err)
	}
	return desc
}

// TestTurnToolErrorsCarryAHint: in an agent turn of a real airlockd, with a real airlock-fs
// and a scripted model server, the tool output the model reads for a failed call carries the
// code and the code's hint: airlock-fs's refusals (bare codes when they reach the runtime) and
// an argument the runtime refuses, whose message names it and what it must be.
func TestTurnToolErrorsCarryAHint(t *testing.T) {
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	c := d.Dial()
	cwd := filepath.Join(daemontest.ShortDir(t), "work")
	os.Mkdir(cwd, 0o700)
	os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte("one\n"), 0o600)
	desc := startAirlockFS(t, hostID(t, c), cwd, "agent", "fs.list,fs.write,fs.edit")
	if r := call(t, c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: withTools(modelOpen(cwd), desc)}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{
			{ID: "call_0", Name: "fs_write", Arguments: `{"path":"notes.txt","content":"x","create":true}`},
			{ID: "call_1", Name: "fs_edit", Arguments: `{"path":"notes.txt","edits":[{"oldText":"two","newText":"2"}]}`},
			{ID: "call_2", Name: "fs_list", Arguments: `{"path":".","maxEntries":0}`},
		}},
		modeltest.Reply{Text: "done"},
	)
	if r := wake(t, c, "agent", 1, "k1", "go", true); !r.OK {
		t.Fatalf("wake: %v", r.Err())
	}
	reqs := llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model saw %d requests", len(reqs))
	}
	outputs := map[string]string{}
	for _, m := range reqs[1].Request.Messages {
		if m.Role == model.RoleTool {
			outputs[m.ToolCallID] = m.Content
		}
	}
	for id, want := range map[string]struct {
		code, says string
	}{
		"call_0": {"file_exists", ""},
		"call_1": {"edit_not_found", ""},
		"call_2": {"adapter_request_invalid", "maxEntries must be an integer from 1 to 10000"},
	} {
		var out struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Hint    string `json:"hint"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(outputs[id]), &out); err != nil || out.Error.Code != want.code ||
			out.Error.Hint != hint.For(want.code) || out.Error.Hint == hint.Fallback || !strings.Contains(out.Error.Message, want.says) {
			t.Errorf("%s: the model read %q, want %s with its hint and %q", id, outputs[id], want.code, want.says)
		}
	}
}
