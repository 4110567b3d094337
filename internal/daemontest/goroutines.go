package daemontest

import "runtime/metrics"

// GoroutinesStarted runs f and returns how many goroutines the process started meanwhile,
// f's and any the runtime started on its own (a GC's workers): a test bounds what a path
// starts per call by it.
func GoroutinesStarted(f func()) uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	f()
	metrics.Read(s)
	return s[0].Value.Uint64() - before
}
