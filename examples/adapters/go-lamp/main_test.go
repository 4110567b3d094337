package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSetBrightness: a level in 0–100 is rounded to a whole percent, one outside is
// invalid_args and leaves the lamp as it was.
func TestSetBrightness(t *testing.T) {
	for _, c := range []struct {
		level string
		want  int
		code  string
	}{
		{"50.7", 51, ""}, {"50.2", 50, ""}, {"0", 0, ""}, {"100", 100, ""}, {"99.5", 100, ""},
		{"-0.1", 60, "invalid_args"}, {"100.01", 60, "invalid_args"}, {`"50"`, 60, "invalid_args"},
	} {
		state := lamp{Brightness: 60}
		req := request{ProtocolVersion: 1, ID: "1", Method: "invoke", CapabilityID: "desk_lamp",
			Action: "set_brightness", Args: json.RawMessage(`{"level":` + c.level + `}`)}
		_, code := handle(&state, &req)
		if code != c.code || state.Brightness != c.want {
			t.Errorf("level %s: brightness %d, code %q; want %d, %q", c.level, state.Brightness, code, c.want, c.code)
		}
	}
}

// TestServeAnswersEachLine runs the stdio loop on a script of requests.
func TestServeAnswersEachLine(t *testing.T) {
	in := strings.NewReader(`{"protocolVersion":1,"id":"a","method":"invoke","capabilityId":"desk_lamp","action":"set_brightness","args":{"level":12.6}}` + "\n" +
		`{"protocolVersion":1,"id":"b","method":"observe","capabilityId":"desk_lamp"}` + "\n")
	var out strings.Builder
	if err := serve(in, &out); err != nil {
		t.Fatal(err)
	}
	want := `{"protocolVersion":1,"id":"a","result":{"on":false,"brightness":13}}` + "\n" +
		`{"protocolVersion":1,"id":"b","result":{"on":false,"brightness":13}}` + "\n"
	if out.String() != want {
		t.Fatalf("answers:\n%s\nwant:\n%s", out.String(), want)
	}
}
