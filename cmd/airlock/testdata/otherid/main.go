// Command otherid is a capability adapter written for airlock's tests, in the manner of
// Free4Chat's CUPS printer-status adapter: read-only, one capability, and an envelope check
// that answers a request it will not serve (a protocolVersion other than 1, more than six
// keys, an id that is not 1 to 64 printable ASCII characters) with invalid_request under the
// id "invalid" instead of the request's. airlock's runtime never sends such a request, so
// `airlock validate capability` passes it with a warning on protocol_version.
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
)

const descriptor = `{"capabilityId":"queue_status","title":"Queue status","version":"1","observe":true,"actions":[]}`

var idPattern = regexp.MustCompile(`^[ -~]{1,64}$`)

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	out := bufio.NewWriter(os.Stdout)
	send := func(id string, key string, v any) {
		b, _ := json.Marshal(map[string]any{"protocolVersion": 1, "id": id, key: v})
		out.Write(append(b, '\n'))
		out.Flush()
	}
	fail := func(id, code string) { send(id, "error", map[string]string{"code": code}) }
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return
		}
		var req map[string]json.RawMessage
		if json.Unmarshal(line, &req) != nil || len(req) > 6 || string(req["protocolVersion"]) != "1" {
			fail("invalid", "invalid_request")
			continue
		}
		var id, method, capID string
		if json.Unmarshal(req["id"], &id) != nil || !idPattern.MatchString(id) {
			fail("invalid", "invalid_request")
			continue
		}
		_ = json.Unmarshal(req["method"], &method)
		_ = json.Unmarshal(req["capabilityId"], &capID)
		switch {
		case method == "list":
			send(id, "result", []json.RawMessage{json.RawMessage(descriptor)})
		case method != "describe" && method != "observe" && method != "invoke":
			fail(id, "unsupported_method")
		case capID != "queue_status":
			fail(id, "unknown_capability")
		case method == "describe":
			send(id, "result", json.RawMessage(descriptor))
		case method == "observe":
			send(id, "result", map[string]any{"state": "idle", "acceptingJobs": true})
		default:
			fail(id, "unsupported_action") // read-only
		}
	}
}
