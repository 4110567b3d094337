#!/usr/bin/env python3
"""fake_bulb: a tiny HTTP light bulb for trying python-light without hardware.

    GET  /state  -> {"on": false, "color": "#ffffff"}
    POST /color  {"color": "#RRGGBB"} -> the new state (the bulb switches on)
    GET  /log    -> every request served so far, as ["GET /state", "POST /color #123456", ...]

It listens on 127.0.0.1 only. With --port 0 (the default) it picks a free port; either way
it prints "listening PORT" on stdout once it is ready. It stops when stdin closes (or on
Ctrl-C), so a test that started it cannot leave it behind.

Usage: fake_bulb.py [--port PORT]
"""
import argparse
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COLOR = re.compile(r"#[0-9a-fA-F]{6}")


class Bulb(BaseHTTPRequestHandler):
    state = {"on": False, "color": "#ffffff"}
    seen = []
    lock = threading.Lock()

    def log_message(self, fmt, *args):  # keep stderr quiet
        pass

    def reply(self, status, body):
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):
        with self.lock:
            if self.path == "/state":
                self.seen.append("GET /state")
                self.reply(200, self.state)
            elif self.path == "/log":
                self.reply(200, self.seen)
            else:
                self.reply(404, {"error": "not found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(min(length, 4096)))
            color = body["color"]
            if not isinstance(color, str) or not COLOR.fullmatch(color):
                raise ValueError(color)
        except (ValueError, KeyError, TypeError):
            self.reply(400, {"error": "bad color"})
            return
        with self.lock:
            if self.path != "/color":
                self.reply(404, {"error": "not found"})
                return
            self.seen.append("POST /color " + color)
            self.state.update(on=True, color=color)
            self.reply(200, self.state)


def main():
    parser = argparse.ArgumentParser(description="A fake HTTP light bulb on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0)
    port = parser.parse_args().port
    server = ThreadingHTTPServer(("127.0.0.1", port), Bulb)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("listening", server.server_address[1], flush=True)
    try:
        sys.stdin.read()  # until stdin closes
    except KeyboardInterrupt:
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
