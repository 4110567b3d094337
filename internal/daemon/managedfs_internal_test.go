package daemon

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
)

// TestRestoreKeepsATransientFailure: restore gives up a lost generation only for a permanent
// refusal. One that failed retryably while the child stays up (an admin request that timed
// out on a loaded child, host_not_ready, …) is tried again after a backoff until it binds;
// one cut off by the child exiting, or still failing when the daemon stops, stays lost for the
// next child.
func TestRestoreKeepsATransientFailure(t *testing.T) {
	transient := protocol.Retryable(CodeFSAdapterUnavailable, "airlockd's airlock-fs did not answer")
	permanent := protocol.Errorf("root_invalid", "the root is gone")
	cases := []struct {
		name string
		// answer is the regrant's n-th answer (from 0); it may close the child's exit or stop
		// the daemon.
		answer   func(n int, exit, stop func()) (bool, *protocol.Error)
		calls    int
		stayLost bool
	}{
		{"transient then bound", func(n int, _, _ func()) (bool, *protocol.Error) {
			if n < 2 {
				return false, transient
			}
			return true, nil
		}, 3, false},
		{"permanent", func(int, func(), func()) (bool, *protocol.Error) { return false, permanent }, 1, false},
		{"nothing to repair", func(int, func(), func()) (bool, *protocol.Error) { return false, nil }, 1, false},
		{"the child exits", func(_ int, exit, _ func()) (bool, *protocol.Error) {
			exit()
			return false, transient
		}, 1, true},
		{"transient until the child exits", func(n int, exit, _ func()) (bool, *protocol.Error) {
			if n == 1 {
				exit()
			}
			return false, transient
		}, 2, true},
		{"transient until the daemon stops", func(n int, _, stop func()) (bool, *protocol.Error) {
			if n == 1 {
				stop()
			}
			return false, transient
		}, 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newManagedFS(ManagedFSConfig{}, "/nonexistent/d.sock", "h", slog.New(slog.NewTextHandler(io.Discard, nil)))
			m.regrantBackoff = time.Millisecond
			k := generationKey{"a", 1}
			m.lost[k] = true
			exited := make(chan struct{})
			calls := 0
			m.regrant = func(_ context.Context, id string, generation int64) (bool, *protocol.Error) {
				if id != k.session || generation != k.generation {
					t.Errorf("regrant of %s/%d", id, generation)
				}
				calls++
				return tc.answer(calls-1, func() { close(exited) }, func() { close(m.stop) })
			}
			m.restore(exited)
			if calls != tc.calls {
				t.Errorf("%d regrants, want %d", calls, tc.calls)
			}
			if lost := slices.Collect(maps.Keys(m.lost)); (len(lost) == 1) != tc.stayLost {
				t.Errorf("lost after restore: %v, want lost %v", lost, tc.stayLost)
			}
		})
	}
}
