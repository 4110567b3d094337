package audit

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// crashChildEnv makes the test binary a child that appends until it is killed (TestMain);
// crashModeEnv is its journal's sync mode.
const (
	crashChildEnv = "AIRLOCK_AUDIT_CRASH_CHILD"
	crashModeEnv  = "AIRLOCK_AUDIT_CRASH_SYNC"
)

// crashChild appends started/outcome pairs from four goroutines to the journal in dir, with
// small segments so that kills land in rotations too, and reports each acknowledged record on
// stdout as "KIND KEY SEQ". As the gate does, it writes the started record with AppendNoWait
// and the outcome with Append. It never returns normally: the parent kills it.
func crashChild(dir string) {
	j, _, err := Open(dir, Options{MaxSegmentBytes: 4 << 10, MaxSegments: 1 << 20, Sync: SyncMode(os.Getenv(crashModeEnv))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	report := func(kind, key string, seq uint64) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := os.Stdout.WriteString(fmt.Sprintf("%s %s %d\n", kind, key, seq)); err != nil {
			os.Exit(4)
		}
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("%d-%d-%d", os.Getpid(), w, i)
				s, err := j.AppendNoWait(Entry{Kind: KindStarted, Door: DoorOwner, Actor: Actor{Session: "crash"},
					Target: Target{Op: "fs.write", Path: key}, IdempotencyKey: key})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				report("started", key, s.Seq)
				o, err := j.Append(Entry{Kind: KindOutcome, Ref: s.Seq, Door: DoorOwner, Actor: Actor{Session: "crash"},
					Target: Target{Op: "fs.write", Path: key}, Outcome: "ok", IdempotencyKey: key})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				report("outcome", key, o.Seq)
			}
		})
	}
	wg.Wait()
}

// TestKillNineLosesNothingAcknowledged kills a real appending process with SIGKILL at random
// points, again and again on one journal, and checks after each kill that the journal opens
// (cutting a torn tail), verifies, and holds every record the child reported acknowledged
// exactly once, and no record twice: in both sync modes, since a record is written before
// any append returns. Every other round also tears the newest segment's tail before
// reopening, as a power loss could.
func TestKillNineLosesNothingAcknowledged(t *testing.T) {
	for _, mode := range []SyncMode{SyncAnswer, SyncInterval} {
		t.Run(string(mode), func(t *testing.T) { killNine(t, mode) })
	}
}

func killNine(t *testing.T, mode SyncMode) {
	dir := newDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{} // "kind key" -> seq
	torn := 0
	const rounds = 8
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashModeEnv+"="+string(mode))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAt := 1 + rand.IntN(600)
		sc := bufio.NewScanner(out) // lines are short; Scanner bounds them at 64 KiB
		n := 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				t.Fatalf("child wrote %q", sc.Text())
			}
			seq, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			acked[f[0]+" "+f[1]] = seq
			if n++; n == killAt {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v (killAt %d, %d acks); stderr: %s", round, err, killAt, n, stderr.String())
		}

		// A power loss can tear a write, and so can the kill itself: the kernel looks for a
		// fatal signal between the pages of one write(2), so a record that crosses a page
		// boundary may be cut there (never acknowledged: the child dies inside the write).
		// Every other round, the newest segment also gets part of a line, as a torn write
		// would leave it.
		var fragment int
		if round%2 == 1 {
			fragment = tearTail(t, dir)
		}
		j, rep, err := Open(dir, Options{MaxSegmentBytes: 4 << 10, MaxSegments: 1 << 20})
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		if rep.TornBytes > 0 {
			torn++
		}
		if fragment > 0 && rep.TornBytes < int64(fragment) {
			t.Fatalf("round %d: a torn tail of %d bytes, Open cut %d", round, fragment, rep.TornBytes)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		mustVerify(t, dir)
		found := map[string]uint64{}
		err = Read(context.Background(), dir, Query{}, false, func(_ []byte, r *Record) error {
			k := string(r.Kind) + " " + r.Target.Path
			if _, dup := found[k]; dup {
				return fmt.Errorf("%s recorded twice", k)
			}
			if r.IdempotencyKeySHA256 != Digest([]byte(r.Target.Path)) {
				return fmt.Errorf("%s has the wrong key digest", k)
			}
			found[k] = r.Seq
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for k, seq := range acked {
			if got, ok := found[k]; !ok || got != seq {
				t.Fatalf("round %d: acknowledged %s (seq %d) is missing from the journal (found %d, %v)", round, k, seq, got, ok)
			}
		}
		t.Logf("round %d: killed after %d acks; torn tail %d bytes; %d records acknowledged so far", round, n, rep.TornBytes, len(acked))
	}
	t.Logf("%d of %d reopenings cut a torn tail", torn, rounds)
}

// tearTail appends part of the newest segment's last line to it, as a torn write would leave
// it, and returns how many bytes; none when the segment is empty (a kill after its creation,
// before its header: Open removes it).
func tearTail(t *testing.T, dir string) int {
	t.Helper()
	nums := mustList(t, dir)
	newest := segPath(dir, nums[len(nums)-1])
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		t.Logf("the kill left %s empty", segmentName(nums[len(nums)-1]))
		return 0
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	last := lines[len(lines)-1]
	fragment := 1 + rand.IntN(len(last)-1)
	f, err := os.OpenFile(newest, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(last[:fragment]); err != nil {
		t.Fatal(err)
	}
	return fragment
}
