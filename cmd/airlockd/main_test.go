package main

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/ownersock"
)

// TestHelpExitsZero: airlockd --help prints the flags and exits 0, as airlock help does; a
// flag it does not know still exits 2. Before, --help exited 2, which a script or a package
// check running it took for a failure.
func TestHelpExitsZero(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--help"}, 0},
		{[]string{"-h"}, 0},
		{[]string{"--bogus"}, 2},
		{[]string{"--http", "0.0.0.0:0", "--rooms=false"}, 2},
	} {
		var out strings.Builder
		if got := exitCode(run(c.args, &out)); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.args, got, c.want)
		}
		if c.want == 0 && !strings.Contains(out.String(), "-socket") {
			t.Errorf("%v printed %q, want the flags", c.args, out.String())
		}
	}
}

// TestFabricFlags: --fabric excludes the flags that configure the bus otherwise, needs the
// room service, and a file that cannot be loaded stops airlockd before it starts.
func TestFabricFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "fabric.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--fabric", missing, "--nats-via", "/tmp/a.sock"}, "without --nats-via or --nats-listen"},
		{[]string{"--fabric", missing, "--nats-listen", "127.0.0.1:4222"}, "without --nats-via or --nats-listen"},
		{[]string{"--nats-via", "/tmp/a.sock", "--nats-listen", "127.0.0.1:4222"}, "which --nats-via replaces"},
		{[]string{"--nats-via", "/tmp/a.sock", "--rooms=false"}, "need the room service"},
		{[]string{"--nats-url", "nats://127.0.0.1:4222"}, "--nats-url is gone"},
		{[]string{"--fabric", missing, "--rooms=false"}, "need the room service"},
		{[]string{"--fabric", missing}, "--fabric: bus: fabric: fabric_file"},
	} {
		err := run(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestMetricsFlags: --metrics-allow-non-loopback means nothing without --metrics, and a
// non-loopback --metrics without it stops airlockd before it starts.
func TestMetricsFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-allow-non-loopback"}, "--metrics-allow-non-loopback needs --metrics"},
		{[]string{"--metrics", "0.0.0.0:0", "--rooms=false", "--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "state")},
			"metrics endpoint: invalid_config: listen address is not loopback"},
	} {
		err := run(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestAuditFlags: --audit-args, --audit-head-file and --audit-sync mean nothing with
// --audit=false; --audit-sync is answer or interval.
func TestAuditFlags(t *testing.T) {
	for _, args := range [][]string{{"--audit=false", "--audit-args"}, {"--audit=false", "--audit-head-file", "/tmp/h.json"},
		{"--audit=false", "--audit-sync", "interval"}, {"--audit=false", "--audit-sync", "answer"}} {
		if err := run(args, io.Discard); err == nil || !strings.Contains(err.Error(), "need the audit journal (--audit)") {
			t.Errorf("%v: %v", args, err)
		}
	}
	if err := run([]string{"--audit-sync", "always"}, io.Discard); err == nil || !strings.Contains(err.Error(), "answer or interval") {
		t.Errorf("--audit-sync always: %v", err)
	}
}

// TestSecondDaemonSaysWhatToDo: airlockd started on the socket a running daemon serves (the
// default socket, when one runs already) fails "socket is already active" and then says what
// to do about it. Before, the failure alone left a newcomer to guess.
func TestSecondDaemonSaysWhatToDo(t *testing.T) {
	dir := daemontest.ShortDir(t)
	socket := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() { // a daemon that answers the check's dial
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	err = run([]string{"--socket", socket, "--state-dir", filepath.Join(dir, "state"), "--rooms=false", "--no-fs-adapter", "--audit=false"}, io.Discard)
	if !errors.Is(err, ownersock.ErrActive) {
		t.Fatalf("run: %v, want ErrActive", err)
	}
	if h := hint(err); !strings.Contains(h, "another airlockd serves this socket") || !strings.Contains(h, "--socket") {
		t.Errorf("hint %q", h)
	}
}
