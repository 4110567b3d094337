package bus

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
)

// TestWatchStopDoesNotWaitForJetStream: a watch stopped while no JetStream answers (its server
// gone, as for the last node of a fabric after the others) returns at once. Stop waited for the
// deletion of the watch's consumer, up to 5 s for an answer that never came.
func TestWatchStopDoesNotWaitForJetStream(t *testing.T) {
	s := startServer(t, ServerConfig{})
	c := dial(t, s, true) // by URL: the connection outlives the server, reconnecting
	ctx := ctxTimeout(t, 10*time.Second)
	kv, err := c.Bucket(ctx, busport.BucketConfig{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var watches []busport.Subscription
	for range 3 {
		w, err := kv.Watch(ctx, ">", func(busport.Entry) {})
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, w)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, w := range watches {
		if err := w.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// 5 s per watch before; a second is generous for three on a loaded machine.
	if took := time.Since(start); took > time.Second {
		t.Fatalf("stopping 3 watches with no JetStream took %v", took)
	}
}
