package daemontest

// CounterAdapter is a small capability adapter in Python 3 (stdlib only), as an agent would
// write it into its workspace: one capability, agent_counter, whose observation is {"count"}
// and whose one action, bump {by: number}, adds to it. It passes `airlock validate
// capability`. The tests of adapter proposals have a model write it with fs_write.
const CounterAdapter = `import json
import sys

CAP = "agent_counter"
DESC = {
    "capabilityId": CAP,
    "title": "Agent counter",
    "version": "1",
    "observe": True,
    "actions": [
        {"name": "bump", "title": "Bump",
         "input": {"type": "object", "properties": {"by": "number"}, "required": ["by"]}},
    ],
}
count = 0


def handle(req):
    global count
    if req.get("protocolVersion") != 1 or isinstance(req.get("protocolVersion"), bool):
        return None, "invalid_request"
    method = req.get("method")
    if method == "list":
        return [DESC], None
    if method not in ("describe", "observe", "invoke"):
        return None, "unsupported_method"
    if req.get("capabilityId") != CAP:
        return None, "unknown_capability"
    if method == "describe":
        return DESC, None
    if method == "observe":
        return {"count": count}, None
    if req.get("action") != "bump":
        return None, "unsupported_action"
    args = req.get("args")
    if not isinstance(args, dict) or set(args) != {"by"}:
        return None, "invalid_args"
    by = args["by"]
    if isinstance(by, bool) or not isinstance(by, (int, float)):
        return None, "invalid_args"
    count += by
    return {"count": count}, None


for line in sys.stdin:
    try:
        req = json.loads(line)
    except ValueError:
        sys.exit(2)
    if not isinstance(req, dict) or not isinstance(req.get("id"), str):
        sys.exit(2)
    result, code = handle(req)
    resp = {"protocolVersion": 1, "id": req["id"]}
    if code:
        resp["error"] = {"code": code}
    else:
        resp["result"] = result
    sys.stdout.write(json.dumps(resp, separators=(",", ":")) + "\n")
    sys.stdout.flush()
`
