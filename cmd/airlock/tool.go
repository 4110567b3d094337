package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
)

// maxArgumentsBytes bounds the JSON arguments read from stdin: the largest tool request an
// adapter may accept (maxRequestBytes) is 4 MiB.
const maxArgumentsBytes = 4 << 20

// argFlags collects repeated --arg key=value flags.
type argFlags []string

func (f *argFlags) String() string     { return strings.Join(*f, ",") }
func (f *argFlags) Set(v string) error { *f = append(*f, v); return nil }

// tool calls a granted host tool operation through the daemon:
// airlock tool SESSION OPERATION --generation N [--call-id ID] [--arg key=value …].
// Without --arg the arguments are a JSON object read from stdin. A value that parses as JSON
// (a number, true, false, null, an object, an array) is sent as such; anything else is a
// string, sent as written.
func (a *app) tool(ctx context.Context, args []string) int {
	o, fs := a.newCommand("tool")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {toolCallId, operation, data}")
	gen := generationFlag(fs)
	callID := fs.String("call-id", "", "tool call id; a retry with the same id reuses the idempotency key (default: a fresh one)")
	var kv argFlags
	fs.Var(&kv, "arg", "an argument as `key=value` (repeatable): a value that is JSON other than a string (1, true, null, {…}, […]) is sent as that JSON, anything else as a string (for a string such as 1 or true, give the arguments as a JSON object on stdin); without any --arg, a JSON object is read from stdin")
	pos, code, done := a.parse(o, fs, args, "SESSION", "OPERATION")
	if done {
		return code
	}
	if err := checkGeneration(fs, *gen); err != nil {
		return a.failUsage(o, err)
	}
	arguments, err := a.toolArguments(kv)
	if err != nil {
		return a.failUsage(o, err)
	}
	if *callID == "" {
		*callID = "cli-" + rand.Text()
	}
	data, err := a.gatedCall(ctx, client.Command{
		Operation: protocol.OpInvokeTool, SessionID: pos[0], Generation: gen,
		Payload: protocol.InvokeToolPayload{ToolCallID: *callID, Operation: pos[1], Arguments: arguments},
	}, pos[1])
	if err != nil {
		return o.fail(err)
	}
	var res protocol.ToolResult
	if err := decodeData(data, &res); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		// fs.read prints the text as it is; everything else as indented JSON.
		var read struct {
			Content *string `json:"content"`
		}
		if pos[1] == "fs.read" && json.Unmarshal(res.Data, &read) == nil && read.Content != nil {
			io.WriteString(w, *read.Content)
			return
		}
		out, err := json.MarshalIndent(res.Data, "", "  ")
		if err != nil {
			out = res.Data
		}
		fmt.Fprintf(w, "%s\n", out)
	})
}

func (a *app) toolArguments(kv argFlags) (json.RawMessage, error) {
	if len(kv) == 0 {
		if a.stdin == nil {
			return nil, usageErrorf("give --arg key=value, or a JSON object on stdin")
		}
		b, err := readBounded(a.stdin, maxArgumentsBytes, "the arguments on stdin")
		if err != nil {
			return nil, err
		}
		raw := json.RawMessage(strings.TrimSpace(string(b)))
		if !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
			return nil, usageErrorf("stdin is not a JSON object")
		}
		return raw, nil
	}
	m := make(map[string]json.RawMessage, len(kv))
	for _, pair := range kv {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--arg %q: want key=value", pair)
		}
		if _, dup := m[k]; dup {
			return nil, usageErrorf("--arg %s given twice", k)
		}
		if json.Valid([]byte(v)) && v != "" && !strings.HasPrefix(v, `"`) {
			m[k] = json.RawMessage(v)
		} else {
			s, _ := json.Marshal(v)
			m[k] = s
		}
	}
	return json.Marshal(m)
}

// readBounded reads all of r, refusing more than limit bytes: every input the CLI reads whole
// (arguments, a descriptor, a prompt) goes through it.
func readBounded(r io.Reader, limit int, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	switch {
	case err != nil:
		return nil, usageErrorf("cannot read %s: %v", what, err)
	case len(b) > limit:
		return nil, usageErrorf("%s is larger than %d bytes", what, limit)
	}
	return b, nil
}
