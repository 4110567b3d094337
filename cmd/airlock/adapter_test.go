package main

import (
	"bytes"
	"context"
	"encoding/json"
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
