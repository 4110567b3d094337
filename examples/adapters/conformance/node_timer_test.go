package conformance_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/validate"
)

type timerState struct {
	Running          bool    `json:"running"`
	RemainingSeconds float64 `json:"remainingSeconds"`
}

func TestNodeTimer(t *testing.T) {
	nodeBin := node(t)
	timer := adapterFile(t, "node-timer", "timer.js")
	conform(t, validate.Config{
		Command:    nodeBin,
		Args:       []string{timer},
		Action:     "start",
		ActionArgs: json.RawMessage(`{"seconds":90}`),
	})

	c := startAdapter(t, nodeBin, timer)
	const id = "kitchen_timer"
	var st timerState
	if observe(t, c, id, &st); st != (timerState{}) {
		t.Errorf("a fresh timer = %+v, want stopped at 0", st)
	}
	if res := invoke(t, c, id, "start", `{"seconds":90}`, &st); !st.Running || st.RemainingSeconds != 90 {
		t.Errorf("start 90 = %s", res)
	}
	if res := observe(t, c, id, &st); !st.Running || st.RemainingSeconds < 89 || st.RemainingSeconds > 90 {
		t.Errorf("observe after start 90 = %s", res)
	}
	if res := invoke(t, c, id, "cancel", `{}`, &st); st != (timerState{}) {
		t.Errorf("cancel = %s", res)
	}
	if res := observe(t, c, id, &st); st != (timerState{}) {
		t.Errorf("observe after cancel = %s", res)
	}

	// A short countdown runs out by itself.
	invoke(t, c, id, "start", `{"seconds":0.2}`, &st)
	if !st.Running || st.RemainingSeconds != 1 {
		t.Errorf("start 0.2 = %+v, want running with 1 second (rounded up)", st)
	}
	time.Sleep(300 * time.Millisecond)
	if res := observe(t, c, id, &st); st != (timerState{}) {
		t.Errorf("observe after the countdown ran out = %s", res)
	}

	// Ranges are the adapter's to check: the runtime only knows that seconds is a number.
	for _, args := range []string{`{"seconds":0}`, `{"seconds":-5}`, `{"seconds":86401}`} {
		if _, err := c.Invoke(callCtx(t), id, "start", json.RawMessage(args)); capadapter.CodeOf(err) != capadapter.CodeInvalidArgs {
			t.Errorf("start %s: %v, want invalid_args", args, err)
		}
	}
}
