// Package bench holds benchmarks that cross component boundaries: each one runs a real airlockd
// with real child processes and measures it next to baselines taken in the same run. It has no
// code of its own; see the _test.go files, and run them with
//
//	go test -run '^$' -bench . -benchtime 5000x ./internal/bench/
package bench
