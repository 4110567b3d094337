#!/usr/bin/env python3
"""python-light: an airlock capability adapter for a light bulb, in plain Python 3 (stdlib only).

It projects one capability, "living_room_light": observe returns {"on", "color"}, and the one
action, set_color {color: string}, sets the bulb's colour ("#RRGGBB") and switches it on.

The bulb is reached over HTTP. Where it lives is configuration private to this adapter: the
only argument is the path of a JSON config file,

    {"bulb": "http://127.0.0.1:8081"}

and the bulb's address never appears in a descriptor, a result or an error. This example only
talks to a loopback bulb (fake_bulb.py is one); a real adapter would keep the device's address
and credentials in the same kind of file.

Usage: light.py CONFIG_FILE
"""
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

CAPABILITY = "living_room_light"
DESCRIPTOR = {
    "capabilityId": CAPABILITY,
    "title": "Living room light",
    "version": "1",
    "observe": True,
    "actions": [
        {
            "name": "set_color",
            "title": "Set color",
            "input": {"type": "object", "properties": {"color": "string"}, "required": ["color"]},
        }
    ],
}

MAX_FRAME = 65536  # one line, LF included
BULB_TIMEOUT = 1.0  # seconds; every answer is due within 1.5 s
MAX_BULB_REPLY = 4096
COLOR = re.compile(r"#[0-9a-fA-F]{6}")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class Refused(Exception):
    """An error answer: its argument is one of the protocol's error codes."""


def log(*parts):
    print("python-light:", *parts, file=sys.stderr, flush=True)


def load_bulb(path):
    """Returns the bulb's base address from the config file, or exits with status 2."""
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        base = config["bulb"]
        parts = urllib.parse.urlsplit(base)
        if parts.scheme != "http" or parts.hostname not in LOOPBACK or parts.port is None:
            raise ValueError("the bulb must be http://LOOPBACK:PORT")
        return base.rstrip("/")
    except (OSError, ValueError, KeyError, TypeError) as e:
        log("unusable config file:", e)
        sys.exit(2)


class Bulb:
    def __init__(self, base):
        self.base = base

    def _call(self, method, where, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + where, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=BULB_TIMEOUT) as resp:
                raw = resp.read(MAX_BULB_REPLY + 1)
        except (urllib.error.URLError, OSError) as e:
            log("bulb unreachable:", e)  # stderr only: the operator may see the address
            raise Refused("unavailable")
        if len(raw) > MAX_BULB_REPLY:
            log("bulb reply too large")
            raise Refused("unavailable")
        try:
            state = json.loads(raw)
            # Project only what the capability promises, never whatever else the bulb says.
            on, color = state["on"], state["color"]
        except (ValueError, KeyError, TypeError):
            log("bulb reply malformed")
            raise Refused("unavailable")
        if not isinstance(on, bool) or not isinstance(color, str) or not COLOR.fullmatch(color):
            log("bulb reply malformed")
            raise Refused("unavailable")
        return {"on": on, "color": color.lower()}

    def state(self):
        return self._call("GET", "/state")

    def set_color(self, color):
        return self._call("POST", "/color", {"color": color})


def handle(bulb, req):
    """Returns the result of one request, or raises Refused."""
    if req.get("protocolVersion") != 1 or isinstance(req.get("protocolVersion"), bool):
        raise Refused("invalid_request")
    method = req.get("method")
    if method == "list":
        return [DESCRIPTOR]
    if method not in ("describe", "observe", "invoke"):
        raise Refused("unsupported_method")
    if req.get("capabilityId") != CAPABILITY:
        raise Refused("unknown_capability")
    if method == "describe":
        return DESCRIPTOR
    if method == "observe":
        return bulb.state()
    if req.get("action") != "set_color":
        raise Refused("unsupported_action")
    # airlock checked the args against the descriptor; the colour format is ours to check.
    args = req.get("args")
    if not isinstance(args, dict) or set(args) != {"color"}:
        raise Refused("invalid_args")
    color = args["color"]
    if not isinstance(color, str) or not COLOR.fullmatch(color):
        raise Refused("invalid_args")
    return bulb.set_color(color.lower())


def answer(req_id, result=None, code=None):
    resp = {"protocolVersion": 1, "id": req_id}
    if code is not None:
        resp["error"] = {"code": code}
    else:
        resp["result"] = result
    sys.stdout.write(json.dumps(resp, separators=(",", ":")) + "\n")
    sys.stdout.flush()  # a buffered answer is a late answer


def main():
    if len(sys.argv) != 2:
        log("usage: light.py CONFIG_FILE")
        return 2
    bulb = Bulb(load_bulb(sys.argv[1]))
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline(MAX_FRAME + 1)
        if not line:
            return 0  # stdin closed: airlock is stopping us
        if len(line) > MAX_FRAME or not line.endswith(b"\n"):
            log("oversized or unterminated request")
            return 2
        try:
            req = json.loads(line)
        except ValueError:
            req = None
        if not isinstance(req, dict) or not isinstance(req.get("id"), str):
            log("malformed request")  # no id to answer to
            return 2
        try:
            answer(req["id"], result=handle(bulb, req))
        except Refused as e:
            answer(req["id"], code=e.args[0])
        except Exception as e:  # a bug here must not take the process down
            log("internal error:", type(e).__name__)
            answer(req["id"], code="internal")


if __name__ == "__main__":
    sys.exit(main())
