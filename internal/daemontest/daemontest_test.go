package daemontest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

type runFunc func() int

func (f runFunc) Run() int { return f() }

func TestMainRemovesWhatBuildMade(t *testing.T) {
	t.Cleanup(removeBuilt)
	bin := Build(t, "./internal/daemontest/flooder")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("built %s: %v", bin, err)
	}
	ran := false
	code := Main(runFunc(func() int {
		ran = true
		if _, err := os.Stat(bin); err != nil {
			t.Errorf("removed while the tests run: %v", err)
		}
		return 3
	})).Run()
	if !ran || code != 3 {
		t.Fatalf("Main ran the tests %v, code %d; want the tests' code 3", ran, code)
	}
	if _, err := os.Stat(filepath.Dir(bin)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the build directory after Main: %v; want it gone", err)
	}
	again := Build(t, "./internal/daemontest/flooder")
	if _, err := os.Stat(again); err != nil {
		t.Fatalf("a build after Main: %v", err)
	}
}

func TestGoroutinesStarted(t *testing.T) {
	if n := GoroutinesStarted(func() {}); n > 2 {
		t.Errorf("nothing started %d goroutines", n)
	}
	done := make(chan struct{})
	n := GoroutinesStarted(func() {
		for range 20 {
			go func() { done <- struct{}{} }()
		}
		for range 20 {
			<-done
		}
	})
	if n < 20 {
		t.Errorf("20 goroutines counted as %d", n)
	}
}
