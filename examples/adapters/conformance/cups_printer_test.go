package conformance_test

import (
	"testing"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/cupstest"
	"github.com/airlockhq/airlock/internal/validate"
)

// testQueue is the CUPS queue the test creates on its private cupsd.
const testQueue = "airlock-test"

type printerState struct {
	State         string `json:"state"`
	AcceptingJobs bool   `json:"acceptingJobs"`
}

func TestCUPSPrinter(t *testing.T) {
	python := python3(t)
	c := cupstest.Start(t)
	// A raw queue (no driver) that prints to /dev/null, enabled and accepting jobs.
	c.AddQueue(t, testQueue)
	// The queue and the server are in the adapter's config file, never in its arguments.
	config := writeJSON(t, t.TempDir(), "printer.json", map[string]string{"queue": testQueue, "server": c.Socket})
	printer := adapterFile(t, "cups-printer", "printer.py")

	conform(t, validate.Config{Command: python, Args: []string{printer, config}})

	a := startAdapter(t, python, printer, config)
	const id = "printer_status"
	var st printerState
	var seen [][]byte
	expect := func(what string, want printerState) {
		t.Helper()
		raw := observe(t, a, id, &st)
		seen = append(seen, raw)
		if st != want {
			t.Errorf("%s: observe = %s, want %+v", what, raw, want)
		}
	}
	expect("a new queue", printerState{State: "idle", AcceptingJobs: true})
	c.Must(t, "cupsdisable", testQueue)
	expect("after cupsdisable", printerState{State: "stopped", AcceptingJobs: true})
	c.Must(t, "cupsreject", testQueue)
	expect("after cupsreject", printerState{State: "stopped", AcceptingJobs: false})
	c.Must(t, "cupsenable", testQueue)
	expect("after cupsenable", printerState{State: "idle", AcceptingJobs: false})

	// Neither the queue nor the server leaves the adapter.
	assertHidden(t, []string{testQueue, c.Socket, c.Dir}, append(seen, descriptorsJSON(t, a))...)

	// A queue that does not exist: the adapter starts (it asks CUPS only when observed) and
	// answers unavailable.
	missing := writeJSON(t, t.TempDir(), "missing.json", map[string]string{"queue": "no-such-queue", "server": c.Socket})
	m := startAdapter(t, python, printer, missing)
	if _, err := m.Observe(callCtx(t), id); capadapter.CodeOf(err) != capadapter.CodeUnavailable {
		t.Errorf("observe of a missing queue: %v, want unavailable", err)
	}
}
