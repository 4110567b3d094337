// Command envprobe is a capability adapter written for the daemon's tests: it stands for an
// adapter that needs a tool the machine may lack and a variable from the daemon's
// environment. Its one capability, env_probe, observes whether the variable named by its first
// argument is set and how long its value is (never the value); while the file named by its
// second argument does not exist (the missing tool), observe answers unavailable.
//
// Usage: envprobe VAR FILE
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

const descriptor = `{"capabilityId":"env_probe","title":"Environment probe","version":"1","observe":true,"actions":[]}`

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: envprobe VAR FILE")
		os.Exit(2)
	}
	name, file := os.Args[1], os.Args[2]
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	out := bufio.NewWriter(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return
		}
		var req struct {
			ProtocolVersion int    `json:"protocolVersion"`
			ID              string `json:"id"`
			Method          string `json:"method"`
			CapabilityID    string `json:"capabilityId"`
		}
		if json.Unmarshal(line, &req) != nil || req.ID == "" {
			fmt.Fprintln(os.Stderr, "envprobe: unreadable request")
			continue
		}
		resp := map[string]any{"protocolVersion": 1, "id": req.ID}
		fail := func(code string) { resp["error"] = map[string]string{"code": code} }
		switch {
		case req.ProtocolVersion != 1:
			fail("invalid_request")
		case req.Method == "list":
			resp["result"] = []json.RawMessage{json.RawMessage(descriptor)}
		case req.Method != "describe" && req.Method != "observe" && req.Method != "invoke":
			fail("unsupported_method")
		case req.CapabilityID != "env_probe":
			fail("unknown_capability")
		case req.Method == "describe":
			resp["result"] = json.RawMessage(descriptor)
		case req.Method == "invoke":
			fail("unsupported_action")
		default:
			if _, err := os.Stat(file); err != nil {
				fmt.Fprintln(os.Stderr, "envprobe: the file it needs is missing")
				fail("unavailable")
				break
			}
			v, set := os.LookupEnv(name)
			resp["result"] = map[string]any{"set": set, "length": len(v)}
		}
		b, _ := json.Marshal(resp)
		out.Write(append(b, '\n'))
		out.Flush()
	}
}
