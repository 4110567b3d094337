// Package systemd holds the tests of airlockd.service, the systemd user unit in this directory:
// TestUnitAnalyze runs systemd-analyze verify and security on it, and TestUnitUnderUserManager
// starts it under a real, unprivileged systemd user manager and uses the daemon, its capability
// adapters (Go, Python, Node.js) and a session through the sandbox the unit builds.
//
// The package has no code of its own; the tests are in package systemd_test. Under CI=true a
// test that lacks what it needs (systemd-analyze, root to start a private user manager, python3,
// node) fails instead of skipping.
package systemd
