package proposal_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/proposal"
	"github.com/airlockhq/airlock/internal/protocol"
)

// TestParseRefusals: every malformed proposal is refused with its code and the field.
func TestParseRefusals(t *testing.T) {
	long := strings.Repeat("a", proposal.MaxArgBytes+1)
	cases := []struct {
		name, doc, code, field string
	}{
		{"unknown key", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":["x"],"passEnv":["TOKEN"]}`, proposal.CodeInvalid, "passEnv"},
		{"case variant", `{"Name":"a","command":"sh","args":["a.sh"],"capabilities":["x"]}`, proposal.CodeInvalid, "Name"},
		{"duplicate key", `{"name":"a","name":"b","command":"sh","args":["a.sh"],"capabilities":["x"]}`, proposal.CodeInvalid, "name"},
		{"unknown publish key", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":["x"],"publish":{"room":"r","capabilities":[{"capabilityId":"x","observe":true}],"approveEach":false}}`, proposal.CodeInvalid, "publish.approveEach"},
		{"bad name", `{"name":"A!","command":"sh","args":["a.sh"],"capabilities":["x"]}`, proposal.CodeInvalid, "name"},
		{"long arg", `{"name":"a","command":"sh","args":["a.sh","` + long + `"],"capabilities":["x"]}`, proposal.CodeInvalid, "args[1]"},
		{"control char", `{"name":"a","command":"sh","args":["a.sh","x\u0007"],"capabilities":["x"]}`, proposal.CodeInvalid, "args[1]"},
		{"no capabilities", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":[]}`, proposal.CodeInvalid, "capabilities"},
		{"bad capability", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":["X Y"]}`, proposal.CodeInvalid, "capabilities[0]"},
		{"twice", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":["x","x"]}`, proposal.CodeInvalid, "capabilities[1]"},
		{"lease", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":["x"],"leaseSeconds":999999}`, proposal.CodeInvalid, "leaseSeconds"},
		{"publish unexpected", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":["x"],"publish":{"room":"r","capabilities":[{"capabilityId":"y","observe":true}]}}`, proposal.CodeInvalid, "publish.capabilities[0].capabilityId"},
		{"publish nothing", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":["x"],"publish":{"room":"r","capabilities":[{"capabilityId":"x"}]}}`, proposal.CodeInvalid, "publish.capabilities[0]"},
		{"publish bad room", `{"name":"a","command":"sh","args":["a.sh"],"capabilities":["x"],"publish":{"room":"R","capabilities":[{"capabilityId":"x","observe":true}]}}`, proposal.CodeInvalid, "publish.room"},
		{"no script", `{"name":"a","command":"python3","capabilities":["x"]}`, proposal.CodeInvalid, "args"},
		{"env wrapper", `{"name":"a","command":"env","args":["TOKEN=x","sh","a.sh"],"capabilities":["x"]}`, proposal.CodeEnvRefused, "command"},
		{"env wrapper path", `{"name":"a","command":"/usr/bin/env","args":["sh","a.sh"],"capabilities":["x"]}`, proposal.CodeEnvRefused, "command"},
		{"assignment", `{"name":"a","command":"sh","args":["a.sh","API_KEY=secret"],"capabilities":["x"]}`, proposal.CodeEnvRefused, "args[1]"},
		{"reference", `{"name":"a","command":"sh","args":["a.sh","${HOME}"],"capabilities":["x"]}`, proposal.CodeEnvRefused, "args[1]"},
		{"pass env", `{"name":"a","command":"sh","args":["a.sh","--pass-env=TOKEN"],"capabilities":["x"]}`, proposal.CodeEnvRefused, "args[1]"},
		{"shell -c", `{"name":"a","command":"sh","args":["-c","echo hi"],"capabilities":["x"]}`, proposal.CodeInlineCode, "args[0]"},
		{"python -c", `{"name":"a","command":"python3","args":["-c","print(1)"],"capabilities":["x"]}`, proposal.CodeInlineCode, "args[0]"},
		{"dot dot arg", `{"name":"a","command":"sh","args":["a.sh","../secret"],"capabilities":["x"]}`, proposal.CodeOutsideWorkspace, "args[1]"},
		{"not an object", `["a"]`, proposal.CodeInvalid, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := proposal.Parse([]byte(c.doc))
			var pe *proposal.Error
			if err == nil || !asError(err, &pe) || pe.Code != c.code || pe.Field != c.field {
				t.Fatalf("Parse: %v, want %s at %q", err, c.code, c.field)
			}
		})
	}
	if _, err := proposal.Parse([]byte(`{"name":"a","command":"sh","args":["a.sh"],"capabilities":["x"]}`)); err != nil {
		t.Fatalf("a valid proposal: %v", err)
	}
	if _, err := proposal.Parse([]byte(`{"name":"` + strings.Repeat("a", proposal.MaxBytes) + `"}`)); proposal.CodeOf(err) != proposal.CodeInvalid {
		t.Fatalf("an oversized proposal: %v", err)
	}
}

func asError(err error, pe **proposal.Error) bool {
	e, ok := err.(*proposal.Error)
	*pe = e
	return ok
}

func sum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestResolveConfinement: files outside the workspace, through a symbolic link or "..", and
// a command that is neither a workspace file nor an interpreter, are refused, and each escape
// names the file it must not reach; a valid proposal is pinned by SHA-256.
func TestResolveConfinement(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.sh")
	if err := os.WriteFile(secret, []byte("echo secret\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(ws, "adapter.sh"), []byte("#!/bin/sh\necho hi\n"), 0o700))
	must(os.WriteFile(filepath.Join(ws, "conf.json"), []byte("{}"), 0o600))
	must(os.Mkdir(filepath.Join(ws, "lib"), 0o700))
	must(os.Symlink(secret, filepath.Join(ws, "link.sh")))
	must(os.Symlink(outside, filepath.Join(ws, "out")))
	must(os.Mkdir(filepath.Join(ws, "dir.sh"), 0o700))

	cases := []struct {
		name    string
		command string
		args    []string
		code    string
		field   string
	}{
		{"absolute outside", secret, nil, proposal.CodeOutsideWorkspace, "command"},
		{"script outside", "sh", []string{secret}, proposal.CodeOutsideWorkspace, "args[0]"},
		{"script dot dot", "sh", []string{"lib/../../" + filepath.Base(outside) + "/secret.sh"}, proposal.CodeOutsideWorkspace, "args[0]"},
		{"symlinked script", "sh", []string{"link.sh"}, proposal.CodeOutsideWorkspace, "args[0]"},
		{"symlinked dir", "sh", []string{"out/secret.sh"}, proposal.CodeOutsideWorkspace, "args[0]"},
		{"symlinked command", "link.sh", nil, proposal.CodeOutsideWorkspace, "command"},
		{"directory", "sh", []string{"dir.sh"}, proposal.CodeOutsideWorkspace, "args[0]"},
		{"system command", "curl", []string{"http://x"}, proposal.CodeOutsideWorkspace, "command"},
		{"arg outside", "sh", []string{"adapter.sh", secret}, proposal.CodeOutsideWorkspace, "args[1]"},
		{"arg through link", "sh", []string{"adapter.sh", "out/secret.sh"}, proposal.CodeOutsideWorkspace, "args[1]"},
		{"missing script", "sh", []string{"nope.sh"}, proposal.CodeInvalid, "args[0]"},
		{"not executable", "conf.json", nil, proposal.CodeInvalid, "command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &proposal.Proposal{Name: "a", Command: c.command, Args: c.args, Capabilities: []string{"x"}}
			plan, err := proposal.Resolve(p, ws)
			var pe *proposal.Error
			if err == nil || !asError(err, &pe) || pe.Code != c.code || pe.Field != c.field {
				t.Fatalf("Resolve: %+v %v, want %s at %q", plan, err, c.code, c.field)
			}
			if strings.Contains(err.Error(), "echo secret") {
				t.Fatalf("the refusal quotes the file: %v", err)
			}
		})
	}

	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	p := &proposal.Proposal{Name: "a", Command: "sh", Args: []string{"adapter.sh", "conf.json", "--verbose", "word"}, Capabilities: []string{"x"}}
	plan, err := proposal.Resolve(p, ws)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.EvalSymlinks(ws)
	want := []string{filepath.Join(root, "adapter.sh"), filepath.Join(root, "conf.json"), "--verbose", "word"}
	if plan.Command != sh || strings.Join(plan.Args, " ") != strings.Join(want, " ") {
		t.Fatalf("plan: %+v", plan)
	}
	if len(plan.Files) != 2 || plan.Files[0].Role != capclient.RoleExecutable || plan.Files[0].SHA256 != sum(t, sh) ||
		plan.Files[1].Role != capclient.RoleScript || plan.Files[1].SHA256 != sum(t, filepath.Join(ws, "adapter.sh")) {
		t.Fatalf("pins: %+v", plan.Files)
	}
	if f, changed := plan.Current(); changed {
		t.Fatalf("unchanged files reported changed: %+v", f)
	}
	if _, changed := plan.Changed([]capclient.FileDigest{
		{Role: capclient.RoleExecutable, Path: sh, SHA256: plan.Files[0].SHA256},
		{Role: capclient.RoleScript, Path: plan.Args[0], SHA256: plan.Files[1].SHA256},
	}); changed {
		t.Fatal("the same digests reported changed")
	}
	must(os.WriteFile(filepath.Join(ws, "adapter.sh"), []byte("#!/bin/sh\necho swapped\n"), 0o700))
	if f, changed := plan.Current(); !changed || f.Role != capclient.RoleScript {
		t.Fatalf("a changed script: %+v %v", f, changed)
	}
	if f, changed := plan.Changed([]capclient.FileDigest{
		{Role: capclient.RoleExecutable, Path: sh, SHA256: plan.Files[0].SHA256},
		{Role: capclient.RoleScript, Path: plan.Args[0], SHA256: sum(t, filepath.Join(ws, "adapter.sh"))},
	}); !changed || f.Role != capclient.RoleScript {
		t.Fatalf("a changed recorded script: %+v %v", f, changed)
	}
	// A file swapped for a link after the proposal is refused too.
	must(os.Remove(filepath.Join(ws, "adapter.sh")))
	must(os.Symlink(secret, filepath.Join(ws, "adapter.sh")))
	if _, changed := plan.Current(); !changed {
		t.Fatal("a script swapped for a link reported unchanged")
	}

	// A workspace executable is pinned as the executable.
	p = &proposal.Proposal{Name: "a", Command: "lib/../conf.json", Capabilities: []string{"x"}}
	if _, err := proposal.Resolve(p, ws); proposal.CodeOf(err) != proposal.CodeOutsideWorkspace {
		t.Fatalf("a command with ..: %v", err)
	}
	must(os.WriteFile(filepath.Join(ws, "bin"), []byte("#!/bin/sh\n"), 0o700))
	plan, err = proposal.Resolve(&proposal.Proposal{Name: "a", Command: "bin", Capabilities: []string{"x"}}, ws)
	if err != nil || plan.Command != filepath.Join(root, "bin") || len(plan.Files) != 1 || plan.Files[0].Role != capclient.RoleExecutable {
		t.Fatalf("a workspace executable: %+v %v", plan, err)
	}
}

// TestBoundsMatchTheWire: the owner socket's bound on a proposal is this package's.
func TestBoundsMatchTheWire(t *testing.T) {
	if protocol.MaxProposalBytes != proposal.MaxBytes {
		t.Fatalf("protocol.MaxProposalBytes %d, proposal.MaxBytes %d", protocol.MaxProposalBytes, proposal.MaxBytes)
	}
}
