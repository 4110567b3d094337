package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

func TestErrorConstruction(t *testing.T) {
	e := Errorf(CodeStaleGeneration, "generation %d is older than %d", 1, 2).
		With("currentGeneration", 2).With("receivedGeneration", 1)
	if e.Retryable || e.Message != "generation 1 is older than 2" || e.Error() != "stale_generation: generation 1 is older than 2" {
		t.Errorf("Errorf gave %+v", e)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":"stale_generation","message":"generation 1 is older than 2","retryable":false,"details":{"currentGeneration":2,"receivedGeneration":1}}`
	if string(b) != want {
		t.Errorf("wire form %s\nwant      %s", b, want)
	}

	r := Retryable(CodeSessionBusy, "busy")
	b, _ = json.Marshal(r)
	if want := `{"code":"session_busy","message":"busy","retryable":true}`; string(b) != want {
		t.Errorf("wire form %s, want %s (no details member when there are none)", b, want)
	}
}

func TestErrorIs(t *testing.T) {
	e := Errorf(CodeSessionNotFound, "no such session")
	wrapped := fmt.Errorf("open: %w", e)
	if !errors.Is(wrapped, &Error{Code: CodeSessionNotFound}) {
		t.Error("errors.Is does not match by code through a wrap")
	}
	if errors.Is(wrapped, &Error{Code: CodeSessionBusy}) {
		t.Error("errors.Is matched a different code")
	}
	if errors.Is(e, errors.New(CodeSessionNotFound)) {
		t.Error("errors.Is matched a non-*Error")
	}
}

func TestAsError(t *testing.T) {
	if AsError(nil) != nil {
		t.Error("AsError(nil) != nil")
	}
	e := Errorf(CodeHostDraining, "draining")
	if got := AsError(fmt.Errorf("ctx: %w", e)); got != e {
		t.Errorf("AsError lost the wire error: %v", got)
	}
	got := AsError(errors.New("open /home/alice/.secret: permission denied"))
	if got.Code != CodeInternal || got.Message != "internal error" || got.Retryable || got.Details != nil {
		t.Errorf("AsError(plain) = %+v, want a bare internal_error", got)
	}
}
