package capclient

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/capadapter"
)

func TestNormalizeRegistration(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "adapter")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh in PATH")
	}
	args16 := make([]string, 16)
	cases := []struct {
		name string
		reg  Registration
		want string // resolved command, or "" for invalid_registration
	}{
		{"absolute", Registration{Name: "light", Command: exe, Args: args16}, exe},
		{"from PATH", Registration{Name: "a.b-c_1", Command: "sh"}, sh},
		{"empty command", Registration{Name: "x", Command: ""}, ""},
		{"blank command", Registration{Name: "x", Command: "  "}, ""},
		{"relative", Registration{Name: "x", Command: "./adapter"}, ""},
		{"not executable", Registration{Name: "x", Command: plain}, ""},
		{"directory", Registration{Name: "x", Command: dir}, ""},
		{"missing", Registration{Name: "x", Command: "airlock-no-such-adapter"}, ""},
		{"17 args", Registration{Name: "x", Command: exe, Args: make([]string, 17)}, ""},
		{"NUL arg", Registration{Name: "x", Command: exe, Args: []string{"a\x00b"}}, ""},
		{"NUL command", Registration{Name: "x", Command: exe + "\x00"}, ""},
		{"long arg", Registration{Name: "x", Command: exe, Args: []string{strings.Repeat("a", 1025)}}, ""},
		{"invalid UTF-8", Registration{Name: "x", Command: exe, Args: []string{"\xff"}}, ""},
		{"bad name", Registration{Name: "Light", Command: exe}, ""},
		{"empty name", Registration{Name: "", Command: exe}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizeRegistration(tc.reg)
			if tc.want == "" {
				wantCode(t, err, capadapter.CodeInvalidRegistration)
				return
			}
			if err != nil || got.Command != tc.want || got.Name != tc.reg.Name || got.Args == nil {
				t.Fatalf("got %+v, %v; want command %s", got, err, tc.want)
			}
		})
	}
}
