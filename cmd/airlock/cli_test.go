package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := cli(t, "/nonexistent.sock", "", args...).wantCode(t, exitOK)
		for _, c := range commandTable() {
			if !strings.Contains(r.stdout, "  "+c.name) {
				t.Errorf("%v: usage does not list %q:\n%s", args, c.name, r.stdout)
			}
		}
	}
	// A group's -h lists its commands; "session --help" was "unknown command".
	for _, args := range [][]string{{"session", "--help"}, {"session", "-h"}, {"adapter", "help"}} {
		r := cli(t, "/nonexistent.sock", "", args...).wantCode(t, exitOK)
		if !strings.HasPrefix(r.stdout, "usage: airlock "+args[0]+" SUBCOMMAND") || !strings.Contains(r.stdout, "  "+args[0]+" list") {
			t.Errorf("%v:\n%s", args, r.stdout)
		}
	}
	// A group alone names its subcommands, each group as the help lists them.
	for _, tc := range []struct{ group, want string }{
		{"session", "session needs a subcommand: open, close, list, show or attach\n"},
		{"cap", "cap needs a subcommand: list, describe, observe or invoke\n"},
		{"policy", "policy needs a subcommand: check\n"},
	} {
		r := cli(t, "/nonexistent.sock", "", tc.group).wantCode(t, exitUsage)
		if !strings.HasPrefix(r.stderr, "airlock: usage: "+tc.want) {
			t.Errorf("%s: %q", tc.group, r.stderr)
		}
	}

	r := cli(t, "/nonexistent.sock", "", "session", "open", "-h").wantCode(t, exitOK)
	if !strings.HasPrefix(r.stdout, "usage: airlock session open SESSION") || !strings.Contains(r.stdout, "-generation") {
		t.Errorf("session open -h:\n%s", r.stdout)
	}

	// A backquoted word in a flag's usage is its placeholder: mcp config's --client once
	// read "-client mcp add". airlock mcp needs --generation with --session only.
	r = cli(t, "/nonexistent.sock", "", "mcp", "config", "-h").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "\n  -client client\n") || !strings.Contains(r.stdout, "[--policy NAME|FILE] [--reopen-for 2m]") {
		t.Errorf("mcp config -h:\n%s", r.stdout)
	}
	r = cli(t, "/nonexistent.sock", "", "mcp", "-h").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "[--policy NAME|FILE]") || !strings.Contains(r.stdout, "\n    \twith --session: the session generation") {
		t.Errorf("mcp -h:\n%s", r.stdout)
	}
}

// TestHelpListsEveryExitCode: airlock help and the README name every exit code the CLI uses,
// each once; 130 (interrupted) was missing from both, so that a script could not tell a ^C
// from a refusal without reading the source.
func TestHelpListsEveryExitCode(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	help := strings.Join(strings.Fields(cli(t, "/nonexistent.sock", "", "help").wantCode(t, exitOK).stdout), " ")
	doc := strings.Join(strings.Fields(string(readme)), " ")
	for _, c := range []struct {
		code    int
		meaning string
	}{
		{exitOK, "ok"}, {exitFailure, "refused by the daemon"}, {exitUsage, "usage"}, {exitUnavailable, "daemon unreachable"},
		{exitNotReady, "not ready"}, {exitProtocol, "protocol failure"}, {exitInterrupted, "interrupted"},
	} {
		want := strconv.Itoa(c.code) + " " + c.meaning
		if !strings.Contains(help, want) {
			t.Errorf("airlock help does not say %q", want)
		}
		if !strings.Contains(doc, want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
}

// TestUsageErrors runs every case against a socket that does not exist: a usage error must be
// reported before the CLI tries to connect (which would exit 69).
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	socket := filepath.Join(daemontest.ShortDir(t), "absent.sock")
	missing := filepath.Join(t.TempDir(), "missing.txt")
	cases := [][]string{
		{},
		{"teleport"},
		{"session"},
		{"session", "teleport"},
		{"adapter"},
		{"adapter", "teleport"},
		{"--no-such-flag", "status"},
		{"status", "extra"},
		{"status", "--verbose"},
		{"probe", "--timeout", "0s"},
		{"probe", "--timeout", "soon"},
		{"session", "open", "s", "--cwd", "/tmp"},
		{"session", "open", "s", "--generation", "1"},
		{"session", "open", "--generation", "1", "--cwd", "/tmp"},
		{"session", "open", "", "--generation", "1", "--cwd", "/tmp"},
		{"session", "open", "s", "t", "--generation", "1", "--cwd", "/tmp"},
		{"session", "open", "s", "--generation", "-1", "--cwd", "/tmp"},
		{"session", "open", "s", "--generation", "x", "--cwd", "/tmp"},
		{"session", "open", "s", "--generation", "1", "--cwd", "/tmp", "--mode", "fork"},
		{"session", "open", "s", "--generation", "1", "--cwd", "/tmp", "--model", "no-slash"},
		{"session", "open", "s", "--generation", "1", "--cwd", "/tmp", "--model", "/id"},
		{"session", "open", "s", "--generation", "1", "--cwd", "/tmp", "--thinking-level", "high"},
		{"session", "open", "s", "--generation", "1", "--cwd", "/tmp", "--protocol", "3.0"},
		{"session", "open", "s", "--generation", "1", "--cwd", "/tmp", "--path", ""},
		{"session", "open", "s", "--generation", "1", "--cwd", "/tmp", "--system-prompt-file", missing},
		{"session", "close", "s"},
		{"session", "close", "--generation", "1"},
		{"session", "list", "--limit", "-1"},
		{"session", "show"},
		{"session", "attach", "s"},
		{"drain", "--timeout-ms", "soon"},
		{"raw", "--wait", "-1s"},
		{"raw", "extra"},
	}
	for _, args := range cases {
		r := cli(t, socket, "", args...)
		if r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d\nstderr: %s", args, r.code, exitUsage, r.stderr)
			continue
		}
		if !strings.HasPrefix(r.stderr, "airlock: usage: ") || r.stdout != "" {
			t.Errorf("%q: stdout %q stderr %q", args, r.stdout, r.stderr)
		}
	}

	// airlock mcp --reopen-for: a --dir server's, never negative. airlock mcp config --name: a
	// letter first, which the clients' parsers cannot take for a number or an option.
	for args, says := range map[string]string{
		"mcp --session s --generation 1 --reopen-for 1m": "airlock: usage: --reopen-for goes with --dir",
		"mcp --dir / --reopen-for -1s":                   "airlock: usage: --reopen-for must not be negative",
		"mcp config --dir / --name 0x10":                 "airlock: usage: --name must be a letter and",
		"mcp config --dir / --name -x":                   "airlock: usage: --name must be a letter and",
		"mcp config --dir / --name _a":                   "airlock: usage: --name must be a letter and",
		"mcp config --dir / --name a+b":                  "airlock: usage: --name must be a letter and",
		// mcp config refuses what airlock mcp --dir would be refused when the client starts it.
		"mcp config --dir / --ops fs.read,fs.bogus":     "airlock: usage: --ops: \"fs.bogus\" is not an operation",
		"mcp config --dir / --ops fs.read,fs.read":      "airlock: usage: --ops names fs.read twice",
		"mcp config --dir / --ops ,":                    "airlock: usage: --ops names no operation",
		"mcp config --dir / --policy ask-write":         "airlock: usage: --policy: no built-in policy is named \"ask-write\"",
		"mcp config --dir / --reopen-for -1s":           "airlock: usage: --reopen-for must not be negative",
		"mcp config --dir / --caps desk_lamp,desk_lamp": "airlock: usage: --caps names desk_lamp twice",
		"mcp config --dir / --caps desk_lamp,Desk":      "airlock: usage: --caps: \"Desk\" is not a capability id",
		// A repeated id would be listed as two that clash, under hashed names.
		"mcp --session s --generation 1 --caps desk_lamp,desk_lamp": "airlock: usage: --caps names desk_lamp twice",
		"mcp --dir / --caps desk_lamp,desk_lamp,":                   "airlock: usage: --caps names desk_lamp twice",
	} {
		if r := cli(t, socket, "", strings.Fields(args)...); r.code != exitUsage || !strings.HasPrefix(r.stderr, says) {
			t.Errorf("%s: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}

	if r := cli(t, socket, "", "mcp", "config", "--dir", "/", "--client", "claude", "--name", "a0x10_-"); r.code != exitOK ||
		!strings.HasPrefix(r.stdout, "claude mcp add a0x10_- -- ") {
		t.Errorf("mcp config --name a0x10_-: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// Without --name, the name is the directory's, fit for every client: "/" has none, and a
	// long one is cut to the 64 characters a name may have.
	long := filepath.Join(t.TempDir(), strings.Repeat("x", 30)+"-"+strings.Repeat("y", 40))
	os.Mkdir(long, 0o700)
	for dir, want := range map[string]string{"/": "airlock", long: "airlock-" + strings.Repeat("x", 30) + "-" + strings.Repeat("y", 25)} {
		if r := cli(t, socket, "", "mcp", "config", "--dir", dir, "--client", "claude"); r.code != exitOK ||
			!strings.HasPrefix(r.stdout, "claude mcp add "+want+" -- ") {
			t.Errorf("mcp config --dir %s: exit %d, stdout %q, stderr %q", dir, r.code, r.stdout, r.stderr)
		}
	}

	// Under --json a usage error is an envelope too.
	r := cli(t, socket, "", "session", "close", "s", "--json").wantCode(t, exitUsage)
	if env := envelopeOf(t, r, "session close", false); env.Error.Code != codeUsage {
		t.Errorf("error %+v", env.Error)
	}
}

func TestPromptFileTooLarge(t *testing.T) {
	t.Parallel()
	big := filepath.Join(t.TempDir(), "big.txt")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", maxPromptFileBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "/nonexistent.sock", "", "session", "open", "s", "--generation", "1", "--cwd", "/tmp", "--system-prompt-file", big).wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "larger than") {
		t.Errorf("stderr %q", r.stderr)
	}
}

// TestMCPConfigPolicyAndReopenFor: airlock mcp config carries --policy (a FILE made absolute)
// and --reopen-for into the mcpServers object and into the claude, codex and gemini lines,
// each line quoted so that a shell gives the client airlock's argv exactly.
func TestMCPConfigPolicyAndReopenFor(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a dir's")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		t.Fatal(err)
	}
	polFile, err := filepath.Abs("p o'l.json")
	if err != nil {
		t.Fatal(err)
	}
	socket := "/run/airlock test/airlockd.sock"
	for _, tc := range []struct {
		flags []string
		tail  []string // argv after --socket S mcp --dir DIR
	}{
		{[]string{"--policy", "ask-writes", "--reopen-for", "30s"}, []string{"--policy", "ask-writes", "--reopen-for=30s"}},
		{[]string{"--policy", "./p o'l.json", "--reopen-for", "0", "--ops", "fs.read,fs.list"},
			[]string{"--ops=fs.read,fs.list", "--policy", polFile, "--reopen-for=0s"}},
	} {
		argv := append([]string{"--socket", socket, "mcp", "--dir", dir}, tc.tail...)
		args := append([]string{"mcp", "config", "--dir", dir, "--name", "srv"}, tc.flags...)

		r := cli(t, socket, "", args...).wantCode(t, exitOK)
		var config struct {
			MCPServers map[string]struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
			} `json:"mcpServers"`
		}
		decode(t, []byte(r.stdout), &config)
		if s := config.MCPServers["srv"]; s.Command != exe || !slices.Equal(s.Args, argv) {
			t.Errorf("%q: mcpServers %q %q, want %q %q", tc.flags, s.Command, s.Args, exe, argv)
		}

		for client, before := range map[string][]string{
			"claude": {"mcp", "add", "srv", "--", exe},
			"codex":  {"mcp", "add", "srv", "--", exe},
			"gemini": {"mcp", "add", "--scope", "user", "srv", exe, "--"},
		} {
			line := cli(t, socket, "", append(args, "--client", client)...).wantCode(t, exitOK).stdout
			// The client is a shell function that prints the words it was given.
			out, err := exec.Command("/bin/sh", "-c", client+`() { printf '%s\0' "$@"; }; `+line).Output()
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
			if want := append(slices.Clone(before), argv...); !slices.Equal(got, want) {
				t.Errorf("%q --client %s: the shell reads %q as %q, want %q", tc.flags, client, line, got, want)
			}
		}
	}
}
