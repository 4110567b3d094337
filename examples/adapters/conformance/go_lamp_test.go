package conformance_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/validate"
)

func TestGoLamp(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not in PATH: cannot build go-lamp")
	}
	bin := filepath.Join(t.TempDir(), "go-lamp")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".")
	build.Dir = filepath.Dir(adapterFile(t, "go-lamp", "main.go"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build go-lamp: %v\n%s", err, out)
	}
	conform(t, validate.Config{
		Command:    bin,
		Action:     "set_brightness",
		ActionArgs: json.RawMessage(`{"level":40}`),
	})
}
