package capclient

import (
	"bufio"
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// BenchmarkObserve measures an observe round trip through the Supervisor to a re-executed Go
// adapter, next to a bare echo of a request-sized line through a child's stdio pipes, both in
// the same run and interleaved so that machine load affects them alike. It reports p50 and
// p99 of each and the ratio of the p50s.
func BenchmarkObserve(b *testing.B) {
	s, err := New(Options{StartTimeout: testStartTimeout})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Register(context.Background(), helperRegistration(b, "bench", "bench")); err != nil {
		b.Fatal(err)
	}
	reg := helperRegistration(b, "echo", "echo")
	echo := exec.Command(reg.Command, reg.Args...)
	echo.Env = adapterEnv(nil)
	in, err := echo.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := echo.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := echo.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		in.Close()
		echo.Wait()
	}()
	out := bufio.NewReader(outPipe)
	line := []byte(`{"protocolVersion":1,"id":"1","method":"observe","capabilityId":"test_light"}` + "\n")
	ctx := context.Background()

	observe := make([]time.Duration, 0, b.N)
	bare := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.Observe(ctx, "test_light"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := in.Write(line); err != nil {
			b.Fatal(err)
		}
		if _, err := out.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		observe = append(observe, t1.Sub(t0))
		bare = append(bare, t2.Sub(t1))
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(float64(len(d)-1)*p)].Nanoseconds())
	}
	op50, op99 := pct(observe, 0.50), pct(observe, 0.99)
	bp50, bp99 := pct(bare, 0.50), pct(bare, 0.99)
	b.ReportMetric(op50, "observe-p50-ns")
	b.ReportMetric(op99, "observe-p99-ns")
	b.ReportMetric(bp50, "echo-p50-ns")
	b.ReportMetric(bp99, "echo-p99-ns")
	b.ReportMetric(op50/bp50, "p50-ratio")
}
