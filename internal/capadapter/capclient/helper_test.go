package capclient

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// helperArg marks a re-execution of the test binary as a scripted adapter. The behaviour is
// in argv, not in an environment variable, because adapters run with the allowlisted
// environment only: an AIRLOCK_TEST_ADAPTER variable would never reach the child, and the
// tests must exercise exactly the production launch path.
const helperArg = "airlock-test-adapter"

// secretSentinel is what the stderr-secret adapter writes to stderr; it must never leave the
// log ring.
const secretSentinel = "AIRLOCK_SENTINEL_hunter2_4242"

func TestMain(m *testing.M) {
	if len(os.Args) >= 3 && os.Args[1] == helperArg {
		// syscall.Exit skips the race detector's exit-time sleep (a second by default), which
		// would make a race-built adapter miss the graceful stop window.
		syscall.Exit(runHelper(os.Args[2], os.Args[3:]))
	}
	// Warm up what the runtime opens once for child processes (the poller), so that the fd
	// counts of the tests compare like with like.
	if out, err := exec.Command("true").Output(); err != nil {
		fmt.Fprintln(os.Stderr, "warm-up:", err, out)
		os.Exit(2)
	}
	r, w, _ := os.Pipe()
	r.Close()
	w.Close()
	goleak.VerifyTestMain(m)
}

// helperRegistration returns a registration that runs this test binary as adapter mode.
func helperRegistration(t testing.TB, name, mode string, extra ...string) Registration {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err = filepath.EvalSymlinks(exe)
	if err != nil {
		t.Fatal(err)
	}
	return Registration{Name: name, Command: exe, Args: append([]string{helperArg, mode}, extra...)}
}

func lightDescriptor(prefix string) string {
	return `{"capabilityId":"` + prefix + `test_light","title":"Test light","version":"1","observe":true,"actions":[` +
		`{"name":"turn_on","title":"Turn on","input":{"type":"object","properties":{"on":"boolean"},"required":["on"]}},` +
		`{"name":"set_level","title":"Set level","input":{"type":"object","properties":{"label":"string","level":"number"},"required":["level"]}},` +
		`{"name":"fail_with","title":"Fail with a code","input":{"type":"object","properties":{"code":"string"},"required":["code"]}}]}`
}

func switchDescriptor(prefix string) string {
	return `{"capabilityId":"` + prefix + `test_switch","title":"Test switch","version":"2","observe":false,"actions":[` +
		`{"name":"flip","title":"Flip","input":{"type":"object","properties":{}}}]}`
}

// runHelper is the scripted adapter. Modes:
//
//	normal           lists test_light and test_switch (ids prefixed by argv[3], if any)
//	env              observe returns the names of the environment variables it sees, and the
//	                 value of CUPS_SERVER (a variable a registration may pass)
//	zero, many       list 0 or 9 descriptors
//	malformed        answers list with not-json
//	oversized        answers list with 65,536 spaces and LF (65,537 bytes)
//	wrong-version    answers with protocolVersion 2
//	wrong-id         answers with another id
//	duplicate        writes every response twice
//	dup-observe      writes the observe response twice
//	hang             never answers
//	slow-list        answers list after 500 ms
//	hang-observe     never answers observe
//	crash-observe    exits 6 on observe
//	exit-list        exits 3 on list
//	stderr-flood     writes 1 MiB to stderr, then one 200 KiB line, before serving
//	stderr-secret    writes secretSentinel to stderr on every observe
//	sensitive        a descriptor with an "endpoint" property
//	describe-differs describe returns another title than list
//	url-result       observe returns a URL
//	escaped-*        escape unsafe text past a byte screen (see escapedResponse)
//	big-result       observe returns 5,000 bytes
//	grandchild       starts `sleep 300` (holding stdout) and observe returns its pid
//	ignore-term      ignores SIGTERM and stdin EOF
//	echo             copies stdin lines to stdout (the benchmark's bare echo)
//	bench            a minimal typed Go adapter of test_light (see benchAdapter)
func runHelper(mode string, args []string) int {
	prefix := ""
	if len(args) > 0 {
		prefix = args[0]
	}
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	if mode == "echo" {
		for {
			line, err := in.ReadBytes('\n')
			if err != nil {
				return 0
			}
			out.Write(line)
			out.Flush()
		}
	}
	if mode == "bench" {
		return benchAdapter(in, out)
	}
	var grandchild *exec.Cmd
	switch mode {
	case "stderr-flood":
		chunk := strings.Repeat("flood line with some text\n", 100)
		for i := 0; i < (1<<20)/len(chunk); i++ {
			os.Stderr.WriteString(chunk)
		}
		os.Stderr.WriteString(strings.Repeat("L", 200<<10) + "\n")
		os.Stderr.WriteString("last flood line\n")
	case "grandchild":
		grandchild = exec.Command("sleep", "300")
		grandchild.Stdout = os.Stdout // holds the protocol pipe open, as a careless adapter might
		if err := grandchild.Start(); err != nil {
			return 9
		}
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	}
	on := false
	send := func(v any) {
		b, _ := json.Marshal(v)
		out.Write(b)
		out.WriteByte('\n')
		if mode == "duplicate" {
			out.Write(b)
			out.WriteByte('\n')
		}
		out.Flush()
	}
	raw := func(s string) {
		out.WriteString(s)
		out.Flush()
	}
	version := 1
	if mode == "wrong-version" {
		version = 2
	}
	result := func(id string, r any) map[string]any {
		if mode == "wrong-id" {
			id = "x" + id
		}
		return map[string]any{"protocolVersion": version, "id": id, "result": r}
	}
	errResp := func(id, code string) map[string]any {
		return map[string]any{"protocolVersion": version, "id": id, "error": map[string]any{"code": code}}
	}
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			if mode == "ignore-term" {
				time.Sleep(time.Hour)
			}
			return 0
		}
		var req struct {
			ProtocolVersion int             `json:"protocolVersion"`
			ID              string          `json:"id"`
			Method          string          `json:"method"`
			CapabilityID    string          `json:"capabilityId"`
			Action          string          `json:"action"`
			Args            json.RawMessage `json:"args"`
		}
		if json.Unmarshal(line, &req) != nil {
			send(errResp("?", "invalid_request"))
			continue
		}
		if req.ProtocolVersion != 1 {
			send(errResp(req.ID, "invalid_request"))
			continue
		}
		if mode == "hang" {
			continue
		}
		if frame := escapedResponse(mode, req.Method, req.ID); frame != "" {
			raw(frame)
			continue
		}
		switch req.Method {
		case "list":
			if mode == "slow-list" {
				time.Sleep(500 * time.Millisecond)
				mode = "normal"
			}
			switch mode {
			case "exit-list":
				return 3
			case "malformed":
				raw("not-json\n")
			case "oversized":
				raw(strings.Repeat(" ", 65536) + "\n")
			case "zero":
				send(result(req.ID, []any{}))
			case "many":
				var items []json.RawMessage
				for i := range 9 {
					items = append(items, json.RawMessage(`{"capabilityId":"c`+strconv.Itoa(i)+`","title":"C","version":"1","observe":true,"actions":[]}`))
				}
				send(result(req.ID, items))
			case "sensitive":
				send(result(req.ID, []json.RawMessage{json.RawMessage(`{"capabilityId":"test_light","title":"Test light","version":"1","observe":true,"actions":[{"name":"set","title":"Set","input":{"type":"object","properties":{"endpoint":"string"}}}]}`)}))
			default:
				send(result(req.ID, []json.RawMessage{json.RawMessage(lightDescriptor(prefix)), json.RawMessage(switchDescriptor(prefix))}))
			}
		case "describe":
			switch {
			case mode == "describe-differs":
				send(result(req.ID, json.RawMessage(strings.Replace(lightDescriptor(prefix), "Test light", "Other light", 1))))
			case req.CapabilityID == prefix+"test_light":
				send(result(req.ID, json.RawMessage(lightDescriptor(prefix))))
			case req.CapabilityID == prefix+"test_switch":
				send(result(req.ID, json.RawMessage(switchDescriptor(prefix))))
			default:
				send(errResp(req.ID, "unknown_capability"))
			}
		case "observe":
			switch mode {
			case "hang-observe":
				continue
			case "crash-observe":
				return 6
			case "url-result":
				send(result(req.ID, map[string]any{"note": "see https://example.com/x"}))
			case "big-result":
				send(result(req.ID, map[string]any{"blob": strings.Repeat("a", 5000)}))
			case "env":
				var names []string
				for _, kv := range os.Environ() {
					k, _, _ := strings.Cut(kv, "=")
					names = append(names, k)
				}
				slices.Sort(names)
				send(result(req.ID, map[string]any{"names": names, "cupsServer": os.Getenv("CUPS_SERVER")}))
			case "grandchild":
				send(result(req.ID, map[string]any{"grandchild": grandchild.Process.Pid}))
			case "dup-observe":
				b, _ := json.Marshal(result(req.ID, map[string]any{"on": on}))
				raw(string(b) + "\n" + string(b) + "\n")
			default:
				if mode == "stderr-secret" {
					fmt.Fprintln(os.Stderr, "debug: token is", secretSentinel)
				}
				send(result(req.ID, map[string]any{"source": mode, "pid": os.Getpid(), "on": on}))
			}
		case "invoke":
			var a map[string]any
			json.Unmarshal(req.Args, &a)
			switch req.Action {
			case "turn_on":
				on, _ = a["on"].(bool)
				send(result(req.ID, map[string]any{"ok": true, "on": on}))
			case "set_level":
				send(result(req.ID, map[string]any{"level": a["level"]}))
			case "fail_with":
				code, _ := a["code"].(string)
				send(errResp(req.ID, code))
			case "flip":
				send(result(req.ID, true))
			default:
				send(errResp(req.ID, "unsupported_action"))
			}
		default:
			send(errResp(req.ID, "unsupported_method"))
		}
	}
}

// benchAdapter is how a small Go adapter would be written: typed structs, encoding/json, one
// reused encoder. It serves list, describe and observe of test_light.
func benchAdapter(in *bufio.Reader, out *bufio.Writer) int {
	type request struct {
		ProtocolVersion int    `json:"protocolVersion"`
		ID              string `json:"id"`
		Method          string `json:"method"`
		CapabilityID    string `json:"capabilityId"`
	}
	type state struct {
		On    bool `json:"on"`
		Level int  `json:"level"`
	}
	type response struct {
		ProtocolVersion int    `json:"protocolVersion"`
		ID              string `json:"id"`
		Result          any    `json:"result,omitempty"`
		Error           *struct {
			Code string `json:"code"`
		} `json:"error,omitempty"`
	}
	enc := json.NewEncoder(out)
	desc := json.RawMessage(lightDescriptor(""))
	for {
		line, err := in.ReadSlice('\n')
		if err != nil {
			return 0
		}
		var req request
		resp := response{ProtocolVersion: 1}
		if json.Unmarshal(line, &req) != nil || req.ProtocolVersion != 1 {
			resp.ID, resp.Error = "?", &struct {
				Code string `json:"code"`
			}{"invalid_request"}
		} else {
			resp.ID = req.ID
			switch req.Method {
			case "list":
				resp.Result = []json.RawMessage{desc}
			case "describe":
				resp.Result = desc
			case "observe":
				resp.Result = state{Level: 42}
			default:
				resp.Error = &struct {
					Code string `json:"code"`
				}{"unsupported_method"}
			}
		}
		enc.Encode(&resp)
		out.Flush()
	}
}
