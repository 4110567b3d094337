package client_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestMain is in the external test package: the tests that start airlockd import daemontest,
// which imports this package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(daemontest.Main(m))
}
