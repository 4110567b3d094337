package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/protocol"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	cli(t, d.Socket, "", "session", "open", "st-1", "--generation", "4", "--cwd", t.TempDir()).wantCode(t, exitOK)

	t.Run("human", func(t *testing.T) {
		r := cli(t, d.Socket, "", "status").wantCode(t, exitOK)
		for _, re := range []string{
			`(?m)^host\s+\S+$`,
			`(?m)^ready\s+true$`,
			`(?m)^phase\s+ready$`,
			`(?m)^draining\s+false$`,
			`(?m)^uptime\s+\S+$`,
			`(?m)^connections\s+[1-9]\d*$`,
			`(?m)^sessions\s+1 resident, 0 dormant$`,
			`(?m)^SESSION\s+GEN\s+STATE\s+QUEUED\s+SEQ\s+ATTACHED\s+IDLE$`,
			`(?m)^st-1\s+4\s+idle\s+0\s+0\s+0\s+\S+$`,
		} {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Errorf("status output does not match %s:\n%s", re, r.stdout)
			}
		}
		if r.stderr != "" {
			t.Errorf("stderr: %q", r.stderr)
		}
	})

	t.Run("json", func(t *testing.T) {
		r := cli(t, d.Socket, "", "status", "--json").wantCode(t, exitOK)
		env := envelopeOf(t, r, "status", true)
		var h protocol.HostSnapshot
		decode(t, env.Data, &h)
		if !h.Ready || h.HostInstanceID == "" || h.Recovery.Phase != protocol.PhaseReady {
			t.Errorf("host snapshot: ready=%t id=%q phase=%q", h.Ready, h.HostInstanceID, h.Recovery.Phase)
		}
		if len(h.Sessions) != 1 || h.Sessions[0].SessionID != "st-1" || h.Sessions[0].Generation != 4 {
			t.Errorf("sessions: %+v", h.Sessions)
		}
		// The host in the envelope is the one a probe sees.
		p := cli(t, d.Socket, "", "probe", "--json").wantCode(t, exitOK)
		var pr probeResult
		decode(t, envelopeOf(t, p, "probe", true).Data, &pr)
		if pr.HostInstanceID != h.HostInstanceID {
			t.Errorf("probe hostInstanceId %q, status %q", pr.HostInstanceID, h.HostInstanceID)
		}
	})

	t.Run("socket after command", func(t *testing.T) {
		r := cli(t, "/nonexistent/airlockd.sock", "", "status", "--socket", d.Socket).wantCode(t, exitOK)
		if !strings.Contains(r.stdout, "st-1") {
			t.Errorf("status via --socket after the command:\n%s", r.stdout)
		}
	})
}

func TestDrain(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	r := cli(t, d.Socket, "", "drain", "--timeout-ms", "50", "--json").wantCode(t, exitOK)
	var res protocol.DrainResult
	decode(t, envelopeOf(t, r, "drain", true).Data, &res)
	if !res.Draining || res.TimeoutMs != 50 {
		t.Errorf("drain result %+v", res)
	}

	// A draining host answers but is not ready.
	p := cli(t, d.Socket, "", "probe").wantCode(t, exitNotReady)
	if !strings.HasPrefix(p.stdout, "not ready ") || !strings.Contains(p.stdout, "draining=true") {
		t.Errorf("probe of a draining host: %q", p.stdout)
	}
	o := cli(t, d.Socket, "", "session", "open", "late", "--generation", "1", "--cwd", t.TempDir()).wantCode(t, exitFailure)
	if !strings.Contains(o.stderr, "airlock: "+protocol.CodeHostDraining+": ") {
		t.Errorf("open while draining: stderr %q", o.stderr)
	}

	bad := cli(t, d.Socket, "", "drain", "--timeout-ms", "-5").wantCode(t, exitFailure)
	if !strings.Contains(bad.stderr, "airlock: "+protocol.CodeInvalidField+": ") {
		t.Errorf("negative timeout: stderr %q", bad.stderr)
	}
}

// TestStatusRecoveryLine: the recovery line names the failure codes with their counts and says
// nothing more when there is none; it printed Go's map syntax ("0 failures map[]").
func TestStatusRecoveryLine(t *testing.T) {
	for _, tc := range []struct {
		codes map[string]int
		count int
		want  string
	}{
		{nil, 0, "recovery 0 replayed, 0 pending, 1 indeterminate, 0 failures\n"},
		{map[string]int{}, 0, "recovery 0 replayed, 0 pending, 1 indeterminate, 0 failures\n"},
		{map[string]int{"restore_open_failed": 1, "manifest_generation_mismatch": 2}, 3,
			"recovery 0 replayed, 0 pending, 1 indeterminate, 3 failures (manifest_generation_mismatch=2, restore_open_failed=1)\n"},
	} {
		var b strings.Builder
		h := protocol.HostSnapshot{Recovery: protocol.RecoveryHealth{IndeterminateRequests: 1, FailureCount: tc.count, FailureCodes: tc.codes}}
		printHost(&b, &h)
		var line string
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "recovery") {
				line = strings.Join(strings.Fields(l), " ") + "\n"
			}
		}
		if line != tc.want {
			t.Errorf("%v: recovery line %q, want %q", tc.codes, line, tc.want)
		}
	}
}
