// Command go-lamp is a capability adapter for airlock written in plain Go, with no airlock
// packages: it shows that the adapter protocol (one JSON object per line on stdin and stdout)
// needs nothing but a JSON library.
//
// It projects one capability, "desk_lamp": a lamp whose state lives in this process (a real
// adapter would talk to the device here, with credentials only it knows). Observe returns
// {"on", "brightness"}; the actions are set_power {on: boolean} and set_brightness
// {level: number from 0 to 100, rounded to a whole percent}.
//
// Register it with: airlock adapter register lamp -- /path/to/go-lamp
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
)

const descriptor = `{"capabilityId":"desk_lamp","title":"Desk lamp","version":"1","observe":true,"actions":[` +
	`{"name":"set_power","title":"Switch on or off","input":{"type":"object","properties":{"on":"boolean"},"required":["on"]}},` +
	`{"name":"set_brightness","title":"Set brightness","input":{"type":"object","properties":{"level":"number"},"required":["level"]}}]}`

// maxFrame is the protocol's bound on one line, LF included.
const maxFrame = 65536

type request struct {
	ProtocolVersion int             `json:"protocolVersion"`
	ID              string          `json:"id"`
	Method          string          `json:"method"`
	CapabilityID    string          `json:"capabilityId"`
	Action          string          `json:"action"`
	Args            json.RawMessage `json:"args"`
}

// response is one answer, with exactly one of Result and Error set. A struct rather than a map:
// no map to build and no keys to sort for every answer.
type response struct {
	ProtocolVersion int        `json:"protocolVersion"`
	ID              string     `json:"id"`
	Result          any        `json:"result,omitempty"`
	Error           *errorCode `json:"error,omitempty"`
}

type errorCode struct {
	Code string `json:"code"`
}

type lamp struct {
	On         bool `json:"on"`
	Brightness int  `json:"brightness"`
}

func main() {
	if err := serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "go-lamp:", err)
		os.Exit(1)
	}
}

func serve(in io.Reader, out io.Writer) error {
	state := lamp{Brightness: 60}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 4096), maxFrame)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w) // Encode ends each answer with the LF the protocol wants
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil || req.ProtocolVersion != 1 || req.ID == "" {
			// Without a usable id there is nothing to answer to.
			return fmt.Errorf("malformed request")
		}
		result, code := handle(&state, &req)
		resp := response{ProtocolVersion: 1, ID: req.ID, Result: result}
		if code != "" {
			resp.Result, resp.Error = nil, &errorCode{Code: code}
		}
		if err := enc.Encode(&resp); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	// stdin closed: the runtime is stopping us; exit cleanly.
	return sc.Err()
}

func handle(state *lamp, req *request) (any, string) {
	switch req.Method {
	case "list":
		return []json.RawMessage{json.RawMessage(descriptor)}, ""
	case "describe", "observe", "invoke":
	default:
		return nil, "unsupported_method"
	}
	if req.CapabilityID != "desk_lamp" {
		return nil, "unknown_capability"
	}
	switch req.Method {
	case "describe":
		return json.RawMessage(descriptor), ""
	case "observe":
		return state, ""
	}
	switch req.Action {
	case "set_power":
		var a struct {
			On *bool `json:"on"`
		}
		if !decodeArgs(req.Args, &a) || a.On == nil {
			return nil, "invalid_args"
		}
		state.On = *a.On
	case "set_brightness":
		var a struct {
			Level *float64 `json:"level"`
		}
		if !decodeArgs(req.Args, &a) || a.Level == nil || *a.Level < 0 || *a.Level > 100 {
			return nil, "invalid_args"
		}
		state.Brightness = int(math.Round(*a.Level)) // 50.7 is 51, not 50
	default:
		return nil, "unsupported_action"
	}
	return state, ""
}

// decodeArgs decodes an action's arguments, refusing any member the action does not declare:
// an adapter checks its input even though the runtime already did.
func decodeArgs(raw json.RawMessage, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v) == nil
}
