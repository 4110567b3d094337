// Command noticeboard is a capability adapter written for airlock's tests: a notice board
// that echoes what its callers give it, as a note, a label or a chat board does. It does not
// screen the text it keeps, on purpose: it is the adapter the runtime's result screens must
// cope with without being disabled by one caller.
//
// It projects one capability, "notice_board". post {text: string} keeps the text (the last
// maxNotices are kept) and answers {"posted": text, "notices": n}; clear {} forgets them all
// and answers {"cleared": n}; observe answers {"notices": [the kept texts, oldest first]}. The
// notices live in this process, so a restarted board is empty: a test that finds the board
// still holding a notice knows the process was not restarted.
//
// Its stderr carries one line per call, naming the call and never the text.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

const descriptor = `{"capabilityId":"notice_board","title":"Notice board","version":"1","observe":true,"actions":[` +
	`{"name":"post","title":"Post a notice","input":{"type":"object","properties":{"text":"string"},"required":["text"]}},` +
	`{"name":"clear","title":"Clear the board","input":{"type":"object","properties":{}}}]}`

const (
	// maxFrame is the protocol's bound on one line, LF included.
	maxFrame = 65536
	// maxNotices bounds what the board keeps, well inside the runtime's 32 entries per array.
	maxNotices = 8
)

type request struct {
	ProtocolVersion int             `json:"protocolVersion"`
	ID              string          `json:"id"`
	Method          string          `json:"method"`
	CapabilityID    string          `json:"capabilityId"`
	Action          string          `json:"action"`
	Args            json.RawMessage `json:"args"`
}

type response struct {
	ProtocolVersion int        `json:"protocolVersion"`
	ID              string     `json:"id"`
	Result          any        `json:"result,omitempty"`
	Error           *errorCode `json:"error,omitempty"`
}

type errorCode struct {
	Code string `json:"code"`
}

func main() {
	if err := serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "noticeboard:", err)
		os.Exit(1)
	}
}

func serve(in io.Reader, out io.Writer) error {
	notices := []string{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 4096), maxFrame)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil || req.ID == "" {
			return fmt.Errorf("malformed request")
		}
		resp := response{ProtocolVersion: 1, ID: req.ID}
		var code string
		if req.ProtocolVersion != 1 {
			code = "invalid_request"
		} else {
			resp.Result, code = handle(&notices, &req)
		}
		if code != "" {
			resp.Result, resp.Error = nil, &errorCode{Code: code}
		}
		fmt.Fprintf(os.Stderr, "noticeboard: %s %s → %s (%d notices)\n", req.Method, req.Action, orOK(code), len(notices))
		if err := enc.Encode(&resp); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

func orOK(code string) string {
	if code == "" {
		return "ok"
	}
	return code
}

func handle(notices *[]string, req *request) (any, string) {
	switch req.Method {
	case "list":
		return []json.RawMessage{json.RawMessage(descriptor)}, ""
	case "describe", "observe", "invoke":
	default:
		return nil, "unsupported_method"
	}
	if req.CapabilityID != "notice_board" {
		return nil, "unknown_capability"
	}
	switch req.Method {
	case "describe":
		return json.RawMessage(descriptor), ""
	case "observe":
		return map[string]any{"notices": *notices}, ""
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(req.Args, &args) != nil || args == nil {
		return nil, "invalid_args"
	}
	switch req.Action {
	case "post":
		var text string
		if raw := args["text"]; len(args) != 1 || len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &text) != nil {
			return nil, "invalid_args"
		}
		*notices = append(*notices, text)
		if len(*notices) > maxNotices {
			*notices = (*notices)[len(*notices)-maxNotices:]
		}
		return map[string]any{"posted": text, "notices": len(*notices)}, ""
	case "clear":
		if len(args) != 0 {
			return nil, "invalid_args"
		}
		n := len(*notices)
		*notices = []string{}
		return map[string]any{"cleared": n}, ""
	}
	return nil, "unsupported_action"
}
