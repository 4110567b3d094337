package orphan

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// The test binary doubles as the processes of a group: ORPHAN_HELPER=leader starts a helper
// in its own group (ORPHAN_HELPER=helper), prints the helper's pid, and then, like the
// helper, waits for a signal, whatever happens to its stdin.
func TestMain(m *testing.M) {
	switch os.Getenv("ORPHAN_HELPER") {
	case "leader":
		h := exec.Command(os.Args[0])
		h.Env = append(os.Environ(), "ORPHAN_HELPER=helper")
		if err := h.Start(); err != nil {
			os.Exit(3)
		}
		fmt.Println(h.Process.Pid)
		waitForever()
	case "helper":
		waitForever()
	}
	os.Exit(m.Run())
}

// waitForever blocks until a signal ends the process (a bare select would be reported as a
// deadlock).
func waitForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// startGroup starts a leader of a process group of its own, with a helper in the group, and
// returns the leader's command and the helper's pid.
func startGroup(t *testing.T) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "ORPHAN_HELPER=leader")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	helper, aerr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || aerr != nil {
		t.Fatalf("helper pid: %q %v %v", line, err, aerr)
	}
	return cmd, helper
}

func TestOpenKillsTheGroupsADeadDaemonLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "adapter-groups")
	l, reaped, err := Open(path, nil)
	if err != nil || len(reaped) != 0 {
		t.Fatalf("fresh ledger: %v %v", reaped, err)
	}
	cmd, helper := startGroup(t)
	leader, helperProc := daemontest.Watch(t, cmd.Process.Pid), daemontest.Watch(t, helper)
	l.Started(cmd.Process.Pid)
	if g := l.Groups(); len(g) != 1 || g[0].PGID != cmd.Process.Pid || g[0].Start == 0 {
		t.Fatalf("recorded: %+v", g)
	}
	// The daemon dies here without reaping: the next one opens the same ledger.
	_, reaped, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(reaped) != 1 || reaped[0].PGID != cmd.Process.Pid || reaped[0].Members != 2 || !reaped[0].Gone {
		t.Fatalf("reaped: %+v", reaped)
	}
	if !leader.Exited(0) || !helperProc.Exited(0) {
		t.Fatal("Open returned with the group still running")
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("leader: %v", err)
	}
	// The ledger Open leaves is empty: a third start kills nothing.
	if _, reaped, err := Open(path, nil); err != nil || len(reaped) != 0 {
		t.Fatalf("third open: %v %v", reaped, err)
	}
}

func TestStartedAndReapedKeepTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "adapter-groups")
	l, _, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ := startGroup(t)
	l.Started(cmd.Process.Pid)
	boot, groups, err := Parse(must(os.ReadFile(path)))
	if err != nil || boot != bootID() || len(groups) != 1 || groups[0].PGID != cmd.Process.Pid {
		t.Fatalf("file after Started: %q %+v %v", boot, groups, err)
	}
	l.Reaped(cmd.Process.Pid)
	l.Reaped(12345) // not recorded: nothing changes
	if _, groups, err := Parse(must(os.ReadFile(path))); err != nil || len(groups) != 0 || len(l.Groups()) != 0 {
		t.Fatalf("file after Reaped: %+v %v", groups, err)
	}
	// A pid that is not running is not recorded.
	l.Started(1 << 30)
	if len(l.Groups()) != 0 {
		t.Fatalf("a pid that does not run was recorded: %+v", l.Groups())
	}
}

// TestOpenSparesWhatIsNotProvablyOurs: a group whose leader runs with another start time (its
// pid given to another process), a ledger of another boot and an unreadable ledger kill
// nothing.
func TestOpenSparesWhatIsNotProvablyOurs(t *testing.T) {
	cmd, helper := startGroup(t)
	st, ok := readStat(cmd.Process.Pid)
	if !ok {
		t.Fatal("no stat of the leader")
	}
	leader, helperProc := daemontest.Watch(t, cmd.Process.Pid), daemontest.Watch(t, helper)
	for name, ledger := range map[string][]byte{
		"another start time": Format(bootID(), []Group{{PGID: cmd.Process.Pid, Start: st.start + 1}}),
		"another boot":       Format("3b1c0f0e-0000-4000-8000-000000000000", []Group{{PGID: cmd.Process.Pid, Start: st.start}}),
		"unreadable":         append(Format(bootID(), []Group{{PGID: cmd.Process.Pid, Start: st.start}}), "x y\n"...),
	} {
		path := filepath.Join(t.TempDir(), "adapter-groups")
		if err := os.WriteFile(path, ledger, 0o600); err != nil {
			t.Fatal(err)
		}
		l, reaped, err := Open(path, nil)
		if err != nil || len(reaped) != 0 {
			t.Fatalf("%s: reaped %+v, %v", name, reaped, err)
		}
		if leader.Exited(0) || helperProc.Exited(0) {
			t.Fatalf("%s: the group was killed", name)
		}
		if _, groups, err := Parse(must(os.ReadFile(path))); err != nil || len(groups) != 0 || len(l.Groups()) != 0 {
			t.Fatalf("%s: the ledger was not emptied: %+v %v", name, groups, err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	good := Format("b00f", []Group{{PGID: 4242, Start: 99}})
	if boot, g, err := Parse(good); err != nil || boot != "b00f" || len(g) != 1 || g[0] != (Group{4242, 99}) {
		t.Fatalf("good: %q %+v %v", boot, g, err)
	}
	for _, bad := range []string{
		"",
		"hello\n",
		header + "\n",
		header + "a b\n",
		header + "\r\r\n", // a boot id is hex digits and dashes
		header + "B00F\n",
		header + "b00f\n1 5\n",    // pid 1 is never one of ours
		header + "b00f\n42 0\n",   // no start time
		header + "b00f\n42\n",     // one field
		header + "b00f\n-42 7\n",  // a negative group would be a pid
		header + "b00f\n42 7 8\n", // three fields
		header + "b00f\n" + strings.Repeat("9", 300) + " 1\n", // over the line bound
	} {
		if _, _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) = nil error", bad)
		}
	}
	var many bytes.Buffer
	many.WriteString(header + "b00f\n")
	for i := range MaxGroups + 10 {
		fmt.Fprintf(&many, "%d 1\n", i+2)
	}
	if _, g, err := Parse(many.Bytes()); err != nil || len(g) != MaxGroups {
		t.Fatalf("a long ledger: %d groups, %v", len(g), err)
	}
}

func TestParseStat(t *testing.T) {
	fields := func(comm string) string {
		// Fields 3 to 22 of a stat line, pgrp (5) 777 and start time (22) 123456.
		return "4242 (" + comm + ") S 1 777 777 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 200 18446744073709551615"
	}
	for _, comm := range []string{"sleep", "a b", "x) S 1 2 3 (y", "))", ""} {
		st, ok := parseStat([]byte(fields(comm)))
		if !ok || st.pgrp != 777 || st.start != 123456 {
			t.Errorf("comm %q: %+v %v", comm, st, ok)
		}
	}
	for _, bad := range []string{"", "4242 sleep S 1", "4242 (sleep) S 1 x", "4242 (sleep) S 1 777 777"} {
		if _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("parseStat(%q) ok", bad)
		}
	}
	if st, ok := readStat(os.Getpid()); !ok || st.pgrp != syscall.Getpgrp() || st.start == 0 {
		t.Fatalf("this process: %+v %v", st, ok)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Format("b00f", []Group{{PGID: 4242, Start: 99}, {PGID: 7, Start: 1}}))
	f.Add([]byte(header + "b00f\n42 x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		boot, groups, err := Parse(data)
		if err != nil {
			return
		}
		if len(groups) > MaxGroups {
			t.Fatalf("%d groups", len(groups))
		}
		again, g2, err := Parse(Format(boot, groups))
		if err != nil || again != boot || len(g2) != len(groups) {
			t.Fatalf("round trip: %q %+v %v", again, g2, err)
		}
		for i := range groups {
			if g2[i] != groups[i] || groups[i].PGID <= 1 || groups[i].Start == 0 {
				t.Fatalf("group %d: %+v", i, groups[i])
			}
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4242 (sleep) S 1 777 777 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 200"))
	f.Add([]byte("1 ((a)) R"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, ok := parseStat(data)
		if !ok && st != (stat{}) {
			t.Fatalf("not ok, but %+v", st)
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
