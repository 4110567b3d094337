package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
)

func TestAdapterAndCapCommands(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	d := daemontest.Start(t, daemontest.Options{})
	cli := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"--socket", d.Socket}, args...), nil, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := cli("adapter", "register", "lamp", "--", lamp); code != 0 || !strings.Contains(out, "registered lamp: ready") {
		t.Fatalf("register: %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli("adapter", "list"); code != 0 || !strings.Contains(out, "desk_lamp") {
		t.Fatalf("adapter list: %d %q", code, out)
	}
	if code, out, _ := cli("cap", "list"); code != 0 || !strings.Contains(out, "desk_lamp") || !strings.Contains(out, "set_power,set_brightness") {
		t.Fatalf("cap list: %d %q", code, out)
	}
	if code, out, _ := cli("cap", "describe", "--id", "desk_lamp"); code != 0 || !strings.Contains(out, `"set_brightness"`) {
		t.Fatalf("cap describe: %d %q", code, out)
	}
	code, out, _ := cli("cap", "invoke", "--id", "desk_lamp", "--action", "set_brightness", "--args", `{"level":30}`, "--json")
	var env struct {
		OK   bool `json:"ok"`
		Data struct {
			Result struct {
				Brightness int `json:"brightness"`
			} `json:"result"`
		} `json:"data"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &env) != nil || !env.OK || env.Data.Result.Brightness != 30 {
		t.Fatalf("cap invoke: %d %q", code, out)
	}
	if code, out, _ := cli("cap", "observe", "--id", "desk_lamp"); code != 0 || !strings.Contains(out, `"brightness": 30`) {
		t.Fatalf("cap observe: %d %q", code, out)
	}
	if code, _, errOut := cli("cap", "invoke", "--id", "desk_lamp", "--action", "set_brightness", "--args", `{"level":"high"}`); code != 1 || !strings.Contains(errOut, "airlock: invalid_args:") {
		t.Fatalf("invalid args: %d %q", code, errOut)
	}
	if code, out, _ := cli("status"); code != 0 || !strings.Contains(out, "ADAPTER") || !strings.Contains(out, "lamp") {
		t.Fatalf("status lacks adapters: %d %q", code, out)
	}
	if code, _, _ := cli("adapter", "logs", "lamp"); code != 0 {
		t.Fatalf("adapter logs: %d", code)
	}
	if code, _, _ := cli("adapter", "remove", "lamp"); code != 0 {
		t.Fatalf("adapter remove: %d", code)
	}
	for _, args := range [][]string{
		{"adapter", "register", "lamp", lamp},                          // no --
		{"adapter", "register", "lamp", "--"},                          // no command
		{"cap", "observe"},                                             // no --id
		{"cap", "invoke", "--id", "desk_lamp"},                         // no --action
		{"cap", "invoke", "--id", "x", "--action", "a", "--args", "{"}, // bad JSON
	} {
		if code, _, _ := cli(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestAdapterTemporaryAndApproveCommands(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	d := daemontest.Start(t, daemontest.Options{})
	cli := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"--socket", d.Socket}, args...), nil, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	// The room must exist: a registration tied to a room this host is not in is refused.
	waitFor(t, "the room service", func() bool { code, _, _ := cli("room", "status"); return code == 0 })
	if code, _, errOut := cli("adapter", "register", "--room", "kitchen", "lamp", "--", lamp); code != 1 || !strings.Contains(errOut, "unknown_room") {
		t.Fatalf("register tied to a room this host is not in: %d %q", code, errOut)
	}
	if code, out, errOut := cli("room", "create", "kitchen"); code != 0 {
		t.Fatalf("room create: %d %q %q", code, out, errOut)
	}
	code, out, errOut := cli("adapter", "register", "--room", "kitchen", "--lease", "2h", "lamp", "--", lamp)
	if code != 0 || !strings.Contains(out, "temporary: room kitchen, lease until ") {
		t.Fatalf("register: %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli("adapter", "list"); code != 0 || !strings.Contains(out, "TEMPORARY") || !strings.Contains(out, "room kitchen") ||
		!strings.Contains(out, "executable:") {
		t.Fatalf("adapter list: %d %q", code, out)
	}
	if code, out, _ := cli("adapter", "approve", "lamp"); code != 0 || !strings.Contains(out, "lamp is unchanged") || !strings.Contains(out, "executable") {
		t.Fatalf("adapter approve: %d %q", code, out)
	}
	code, out, _ = cli("adapter", "approve", "--json", "lamp")
	var env struct {
		OK   bool `json:"ok"`
		Data struct {
			Restarted bool `json:"restarted"`
			Digests   []struct {
				Old string `json:"old"`
				New string `json:"new"`
			} `json:"digests"`
		} `json:"data"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &env) != nil || !env.OK || env.Data.Restarted || len(env.Data.Digests) != 1 ||
		len(env.Data.Digests[0].Old) != 64 || env.Data.Digests[0].Old != env.Data.Digests[0].New {
		t.Fatalf("adapter approve --json: %d %q", code, out)
	}
	if code, _, errOut := cli("adapter", "approve", "nobody"); code != 1 || !strings.Contains(errOut, "unknown_adapter") {
		t.Fatalf("approve unknown: %d %q", code, errOut)
	}
	for _, args := range [][]string{
		{"adapter", "register", "--lease", "500ms", "lamp", "--", lamp},
		{"adapter", "register", "--lease", "721h", "lamp", "--", lamp},
		{"adapter", "register", "--session", "s", "lamp", "--", lamp},
		{"adapter", "register", "--generation", "2", "lamp", "--", lamp},
		{"adapter", "approve"},
	} {
		if code, _, _ := cli(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := cli("adapter", "register", "--room", "Kitchen", "lamp2", "--", lamp); code != 1 || !strings.Contains(errOut, "invalid_field") {
		t.Fatalf("bad room: %d %q", code, errOut)
	}
}

// TestAdapterPassEnvUnsetIsSaid: a --pass-env variable the daemon's environment does not set
// (exported to the operator's shell only, say) is said at register, on stderr, and in the
// adapter's passEnvUnset, which adapter list --json shows too.
func TestAdapterPassEnvUnsetIsSaid(t *testing.T) {
	probe := daemontest.Build(t, "./internal/daemon/testdata/envprobe")
	d := daemontest.Start(t, daemontest.Options{Env: []string{"PROBE_SET=1"}})
	cli := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"--socket", d.Socket}, args...), nil, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := cli("adapter", "register", "probe", "--pass-env", "PROBE_SET", "--pass-env", "PROBE_NOT_IN_THE_DAEMON", "--", probe, "PROBE_SET", t.TempDir()+"/tool")
	if code != 0 || !strings.Contains(errOut, "the daemon's environment does not set PROBE_NOT_IN_THE_DAEMON: the adapter starts without it") ||
		strings.Contains(errOut, "PROBE_SET,") || !strings.Contains(out, "passed from the daemon's environment: PROBE_SET, PROBE_NOT_IN_THE_DAEMON") {
		t.Fatalf("register: %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli("adapter", "list", "--json"); code != 0 || !strings.Contains(out, `"passEnvUnset": [
          "PROBE_NOT_IN_THE_DAEMON"
        ]`) {
		t.Fatalf("adapter list --json: %d %s", code, out)
	}
}

// TestAdapterPassEnvAndAvailabilityCommands: adapter register --pass-env names a variable,
// which adapter list and status show (the value never); after three unavailable observes,
// cap list, its --json and status show the capability unavailable with the reason.
func TestAdapterPassEnvAndAvailabilityCommands(t *testing.T) {
	probe := daemontest.Build(t, "./internal/daemon/testdata/envprobe")
	const secret = "cli-probe-value-91c3"
	d := daemontest.Start(t, daemontest.Options{Env: []string{"PROBE_TOKEN=" + secret}})
	cli := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"--socket", d.Socket}, args...), nil, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	missing := t.TempDir() + "/tool"
	code, out, errOut := cli("adapter", "register", "probe", "--pass-env", "PROBE_TOKEN", "--", probe, "PROBE_TOKEN", missing)
	if code != 0 || !strings.Contains(out, "passed from the daemon's environment: PROBE_TOKEN") {
		t.Fatalf("register: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli("adapter", "register", "bad", "--pass-env", "LD_PRELOAD", "--", probe, "X", missing); code != 1 || !strings.Contains(errOut, "invalid_registration") {
		t.Fatalf("register with LD_PRELOAD: %d %q", code, errOut)
	}
	if code, out, _ := cli("adapter", "list"); code != 0 || !strings.Contains(out, "PASS ENV") || !strings.Contains(out, "PROBE_TOKEN") {
		t.Fatalf("adapter list: %d %q", code, out)
	}
	for range 3 {
		if code, _, errOut := cli("cap", "observe", "--id", "env_probe"); code != 1 || !strings.Contains(errOut, "unavailable") {
			t.Fatalf("observe without the tool: %d %q", code, errOut)
		}
	}
	if code, out, _ := cli("cap", "list"); code != 0 || !strings.Contains(out, "false (calls_unavailable)") {
		t.Fatalf("cap list: %d %q", code, out)
	}
	code, out, _ = cli("cap", "list", "--json")
	if code != 0 || !strings.Contains(out, `"available": false,
        "unavailableReason": "calls_unavailable"`) {
		t.Fatalf("cap list --json: %d %q", code, out)
	}
	code, out, _ = cli("status")
	if code != 0 || !strings.Contains(out, "env_probe(calls_unavailable)") {
		t.Fatalf("status: %d %q", code, out)
	}
	_, js, _ := cli("status", "--json")
	var env struct {
		Data struct {
			Adapters []struct {
				PassEnv []string `json:"passEnv"`
			} `json:"adapters"`
		} `json:"data"`
	}
	if strings.Contains(out+js, secret) || json.Unmarshal([]byte(js), &env) != nil || len(env.Data.Adapters) != 1 ||
		strings.Join(env.Data.Adapters[0].PassEnv, ",") != "PROBE_TOKEN" {
		t.Fatalf("status --json: %q", js)
	}
}

// TestAdapterRegisterInterpreterScriptRelative: `adapter register NAME -- sh lamp.sh`, run in
// the script's directory, registers the script there (as airlock validate capability, run
// there, checks it), not a lamp.sh in the daemon's directory, and records its digest.
func TestAdapterRegisterInterpreterScriptRelative(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	d := daemontest.Start(t, daemontest.Options{})
	dir := t.TempDir()
	script := filepath.Join(dir, "lamp.sh")
	if err := os.WriteFile(script, []byte("exec '"+lamp+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--socket", d.Socket, "adapter", "register", "lamp", "--json", "--", "sh", "lamp.sh"}, nil, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("register: %d %q %q", code, stdout.String(), stderr.String())
	}
	var env struct {
		Data struct {
			Adapter struct {
				State   string   `json:"state"`
				Args    []string `json:"args"`
				Digests []struct {
					Role string `json:"role"`
					Path string `json:"path"`
				} `json:"digests"`
			} `json:"adapter"`
		} `json:"data"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &env); err != nil {
		t.Fatal(err)
	}
	a := env.Data.Adapter
	if a.State != "ready" || len(a.Args) != 1 || a.Args[0] != script {
		t.Fatalf("adapter %+v, want ready with args [%s]", a, script)
	}
	if len(a.Digests) != 2 || a.Digests[1].Role != "script" || a.Digests[1].Path != script {
		t.Fatalf("digests %+v, want the script %s", a.Digests, script)
	}
}
