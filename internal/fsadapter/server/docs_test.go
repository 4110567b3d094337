package server

import (
	"os"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
)

// TestCodesDocumented fails when an error code of the operations, the service or the admin
// socket is missing from docs/airlock-fs.md.
func TestCodesDocumented(t *testing.T) {
	b, err := os.ReadFile("../../../docs/airlock-fs.md")
	if err != nil {
		t.Fatal(err)
	}
	codes := append([]string{
		CodeQueueCapacity, CodeIdempotencyConflict, CodeIdempotencyCapacity, CodeIdempotencyInFlight, CodeRequestTimeout,
		CodeOperationDenied, CodeInternal, CodeHandleInResult,
		CodeInvalidRequest, CodeRootInvalid, CodeGrantNotFound, CodeGrantExists, CodeGrantCapacity, CodeServerClosing,
		CodeLineTimeout, CodeConnectionEvicted,
	}, fsops.Codes...)
	for _, c := range codes {
		if !strings.Contains(string(b), "`"+c+"`") {
			t.Errorf("docs/airlock-fs.md does not document %s", c)
		}
	}
}
