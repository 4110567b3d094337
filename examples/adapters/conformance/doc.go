// Package conformance holds the tests that run every example adapter under
// examples/adapters through airlock's conformance harness (internal/validate), the checks
// behind `airlock validate capability`, and then check what each adapter does against the
// thing behind it: a fake bulb, a countdown, a real CUPS queue.
//
// It also runs the guides' own code: every complete program in docs/*.md is marked with an
// <!-- example {…} --> comment before its fence, and TestGuideExamples extracts it and runs
// the validator the marker names on it; a block of a programming language that is neither
// marked so nor <!-- fragment --> fails the test (docs_test.go).
//
// The package has no code of its own; the tests and their helpers are in package
// conformance_test. A test skips only when its language runtime (python3, node, go) or, for
// cups-printer, CUPS itself is absent (under CI=true a missing CUPS fails it: .ci/run installs
// it; see internal/cupstest).
package conformance
