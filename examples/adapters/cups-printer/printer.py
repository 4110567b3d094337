#!/usr/bin/env python3
"""cups-printer: a read-only airlock capability adapter for a CUPS print queue (stdlib only).

It projects one capability, "printer_status". Observe returns

    {"state": "idle" | "printing" | "stopped", "acceptingJobs": true | false}

read from `lpstat -p QUEUE -a QUEUE`. There are no actions: it never submits, cancels or
changes anything.

Which queue (and, optionally, which CUPS server) is configuration private to this adapter: the
only argument is the path of a JSON config file,

    {"queue": "office", "server": "/run/cups/cups.sock"}

"server" is optional and is passed to lpstat as -h. Without it, the server is the
CUPS_SERVER environment variable, CUPS's own name for it, which the operator passes by naming it
at registration (airlock adapter register printer --pass-env CUPS_SERVER -- ...); without either,
lpstat uses the system's default server (/etc/cups/client.conf, else the local scheduler). The
adapter never reads a client.conf under HOME: lpstat runs without HOME. Neither the queue name
nor the server ever appears in a descriptor, a result or an error.

Usage: printer.py CONFIG_FILE
"""
import json
import os
import re
import shutil
import subprocess
import sys

CAPABILITY = "printer_status"
DESCRIPTOR = {
    "capabilityId": CAPABILITY,
    "title": "Printer status",
    "version": "1",
    "observe": True,
    "actions": [],
}

MAX_FRAME = 65536  # one line, LF included
LPSTAT_TIMEOUT = 1.0  # seconds; every answer is due within 1.5 s
QUEUE = re.compile(r"[A-Za-z0-9_.-]{1,127}")


class Refused(Exception):
    """An error answer: its argument is one of the protocol's error codes."""


def log(*parts):
    print("cups-printer:", *parts, file=sys.stderr, flush=True)


def load_config(path):
    """Returns (queue, server or None) from the config file and CUPS_SERVER, or exits with
    status 2."""
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        queue = config["queue"]
        server = config.get("server")
        if not isinstance(queue, str) or not QUEUE.fullmatch(queue):
            raise ValueError("queue must match " + QUEUE.pattern)
        if server is None:
            server = os.environ.get("CUPS_SERVER") or None  # passed with --pass-env CUPS_SERVER
        if server is not None and (not isinstance(server, str) or not server or server.startswith("-")):
            raise ValueError("server (config or CUPS_SERVER) must be a host, host:port or socket path")
        return queue, server
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        log("unusable config file:", e)
        sys.exit(2)


class Printer:
    def __init__(self, queue, server):
        self.queue = queue
        self.server = server
        self.lpstat = shutil.which("lpstat") or "/usr/bin/lpstat"

    def status(self):
        cmd = [self.lpstat]
        if self.server:
            cmd += ["-h", self.server]
        cmd += ["-p", self.queue, "-a", self.queue]
        # The C locale, so that lpstat's wording is the English one parsed below.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "LC_ALL": "C"}
        try:
            out = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env, timeout=LPSTAT_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            log("lpstat failed:", type(e).__name__)
            raise Refused("unavailable")
        if out.returncode != 0:
            log("lpstat exited", out.returncode, out.stderr.decode(errors="replace").strip()[:200])
            raise Refused("unavailable")
        return parse(self.queue, out.stdout.decode(errors="replace"))


def parse(queue, text):
    """Parses lpstat -p/-a output for queue, e.g.

        printer office is idle.  enabled since Wed Dec  2 14:58:33 2026
        printer office now printing office-12.  enabled since ...
        printer office disabled since Wed Dec  2 14:58:33 2026 -
        office accepting requests since Wed Dec  2 14:58:33 2026
        office not accepting requests since Wed Dec  2 14:58:33 2026 -
    """
    state = accepting = None
    for line in text.splitlines():
        if line.startswith("printer " + queue + " "):
            rest = line[len("printer " + queue + " "):]
            if rest.startswith("disabled") or rest.startswith("is stopped"):
                state = "stopped"
            elif rest.startswith("is idle"):
                state = "idle"
            elif rest.startswith("now printing") or rest.startswith("is printing"):
                state = "printing"
        elif line.startswith(queue + " not accepting requests"):
            accepting = False
        elif line.startswith(queue + " accepting requests"):
            accepting = True
    if state is None or accepting is None:
        log("lpstat output not understood")
        raise Refused("unavailable")
    return {"state": state, "acceptingJobs": accepting}


def handle(printer, req):
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
        return printer.status()
    raise Refused("unsupported_action")  # read-only: no action at all


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
        log("usage: printer.py CONFIG_FILE")
        return 2
    printer = Printer(*load_config(sys.argv[1]))
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
            answer(req["id"], result=handle(printer, req))
        except Refused as e:
            answer(req["id"], code=e.args[0])
        except Exception as e:  # a bug here must not take the process down
            log("internal error:", type(e).__name__)
            answer(req["id"], code="internal")


if __name__ == "__main__":
    sys.exit(main())
