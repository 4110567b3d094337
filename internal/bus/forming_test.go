package bus

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestForming: JetStream's answers while a cluster forms are retryable, its other answers
// and other errors are not, wrapped or not.
func TestForming(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: jsNotAvailable, Description: "JetStream system temporarily unavailable"}, true},
		{fmt.Errorf("bus: %w", &jetstream.APIError{Code: 400, ErrorCode: jsNoPeers, Description: "no suitable peers for placement"}), true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNameInUse}, false},
		{errors.New("503"), false},
		{nil, false},
	} {
		if got := Forming(c.err); got != c.want {
			t.Errorf("Forming(%v) = %v", c.err, got)
		}
	}
}
