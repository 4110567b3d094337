#!/usr/bin/env python3
"""airlock_fs_ro: a read-only host tool adapter (protocol 1.0) in stdlib-only Python 3.

It serves one grant, given by a JSON config file:

    {"socket": "/run/user/1000/fs-ro.sock", "root": "/home/me/work",
     "adapterId": "airlock-fs-ro", "adapterVersion": "0.1.0",
     "binding": {"hostInstanceId": "...", "sessionId": "...", "generation": 1,
                 "capabilityHandle": "<32-512 base64url characters>"},
     "operations": ["fs.list", "fs.stat", "fs.read", "fs.search"],
     "limits": {"maxRequestBytes": 1048576, "maxResponseBytes": 1048576,
                "maxConcurrentRequests": 4, "maxQueuedRequests": 16,
                "requestTimeoutMs": 30000, "maxIdempotencyKeys": 256,
                "idempotencyTtlMs": 3600000}}

Usage: airlock_fs_ro.py CONFIG          serve until SIGTERM or SIGINT
       airlock_fs_ro.py CONFIG --descriptor   print the grant's descriptor (holds the handle)

Every path is resolved component by component beneath a directory descriptor of the root
with O_NOFOLLOW, so symbolic links are refused wherever they appear; devices, FIFOs and
sockets are never opened as files. Each connection has a thread; the grant has at most one
bound connection at a time. Requests of a connection run in order, so an abort always finds
its target already answered (aborted: false).
"""

import errno
import hmac
import json
import os
import re
import signal
import socket
import stat
import struct
import sys
import threading
import time
import unicodedata

PROTOCOL_VERSION = "1.0"
READ_OPS = ("fs.list", "fs.stat", "fs.read", "fs.search")
ALL_OPS = ("fs.list", "fs.stat", "fs.read", "fs.search", "fs.write", "fs.edit")
LIMIT_BOUNDS = {
    "maxRequestBytes": (2048, 4 << 20),
    "maxResponseBytes": (1024, 4 << 20),
    "maxConcurrentRequests": (1, 64),
    "maxQueuedRequests": (0, 256),
    "requestTimeoutMs": (100, 120000),
    "maxIdempotencyKeys": (1, 4096),
    "idempotencyTtlMs": (1000, 86400000),
}
IDENTITY = ("protocolVersion", "kind", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation")
MEMBERS = {  # the members each inbound kind carries besides the identity
    "bind": {"capabilityHandle", "operations", "limits"},
    "invoke": {"requestId", "idempotencyKey", "operation", "payload"},
    "abort": {"requestId", "targetRequestId"},
    "revoke": set(),
}
PAYLOADS = {  # member: (type, required)
    "fs.list": {"path": ("path", True), "maxEntries": ((1, 10000), False)},
    "fs.stat": {"path": ("path", True)},
    "fs.read": {"path": ("path", True), "offset": ((0, 2**53 - 1), False), "maxBytes": ((1, 4 << 20), False)},
    "fs.search": {"path": ("path", True), "query": ("query", True), "maxResults": ((1, 10000), False)},
}
WIRE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*", re.ASCII)
MAX_CONTENT = 4 << 20
BIND_WAIT = 10.0
SEARCH_FILE_MAX = 16 << 20
SEARCH_MAX_FILES = 200000
SEARCH_MAX_DEPTH = 64


class OpError(Exception):
    """A typed error result. The message never names a path, the root or the handle."""

    def __init__(self, code, message, retryable=False):
        super().__init__(message)
        self.code, self.message, self.retryable = code, message, retryable


class Closed(Exception):
    """The connection must end, without a further frame."""


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def no_duplicates(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError("duplicate key")
        obj[k] = v
    return obj


def reject_constant(_):
    raise ValueError("not JSON")


def strict_loads(b):
    return json.loads(b.decode("utf-8"), object_pairs_hook=no_duplicates, parse_constant=reject_constant)


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def has_control(s):
    return any(unicodedata.category(c) == "Cc" for c in s)


def check_path(p):
    """The protocol's relative-path rules; raises invalid_path."""
    if not isinstance(p, str):
        raise OpError("invalid_argument", "path must be a string")
    try:
        n = len(p.encode("utf-8"))
    except UnicodeEncodeError:
        raise OpError("invalid_path", "path is not UTF-8")
    if n == 0 or n > 4096 or p.startswith("/") or "\\" in p or has_control(p):
        raise OpError("invalid_path", "path must be a canonical root-relative POSIX path")
    if p == ".":
        return []
    parts = p.split("/")
    if any(s in ("", ".", "..") for s in parts):
        raise OpError("invalid_path", "path must be a canonical root-relative POSIX path")
    return parts


def modified_at(st):
    secs, ns = divmod(st.st_mtime_ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + ".%09dZ" % ns


def os_error(e):
    if e.errno == errno.ELOOP:
        return OpError("path_symlink", "a component of the path is a symbolic link")
    if e.errno == errno.ENOENT:
        return OpError("not_found", "the path does not exist")
    if e.errno == errno.ENOTDIR:
        return OpError("not_a_directory", "a component of the path is not a directory")
    if e.errno in (errno.EACCES, errno.EPERM):
        return OpError("permission_denied", "the operating system refused access")
    return OpError("io_error", "the operating system failed the operation", e.errno in (errno.EINTR, errno.EAGAIN, errno.EIO))


class Root:
    """Confinement: every object is reached by openat from the root's descriptor, one
    component at a time, with O_NOFOLLOW."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def open(self, parts, want=None):
        """Opens the object parts names and returns (fd, stat). want is "file", "directory"
        or None; symlinks, devices, FIFOs and sockets are refused."""
        cur = os.dup(self.fd)
        try:
            for i, name in enumerate(parts):
                last = i == len(parts) - 1
                try:
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                except OSError as e:
                    raise os_error(e)
                if stat.S_ISLNK(st.st_mode):
                    raise OpError("path_symlink", "a component of the path is a symbolic link")
                if stat.S_ISDIR(st.st_mode):
                    flags = os.O_RDONLY | os.O_DIRECTORY
                elif stat.S_ISREG(st.st_mode) and last:
                    flags = os.O_RDONLY | os.O_NONBLOCK
                elif stat.S_ISREG(st.st_mode):
                    raise OpError("not_a_directory", "a component of the path is not a directory")
                else:
                    raise OpError("unsupported_file_type", "the path is not a regular file or directory")
                try:
                    nfd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=cur)
                except OSError as e:
                    raise os_error(e)
                os.close(cur)
                cur = nfd
            st = os.fstat(cur)  # the object actually opened, whatever raced with the lstat
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise OpError("unsupported_file_type", "the path is not a regular file or directory")
            if want == "file" and not stat.S_ISREG(st.st_mode):
                raise OpError("not_a_file", "the path is a directory")
            if want == "directory" and not stat.S_ISDIR(st.st_mode):
                raise OpError("not_a_directory", "the path is not a directory")
            fd, cur = cur, -1
            return fd, st
        finally:
            if cur >= 0:
                os.close(cur)


def entry_name_ok(name):
    try:
        b = name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 0 < len(b) <= 255 and name not in (".", "..") and "/" not in name and not has_control(name)


def decode_prefix(b, at_eof):
    """Decodes b as UTF-8, cutting an incomplete final character unless at_eof."""
    for cut in range(0, 4):
        if cut > len(b) or (cut and at_eof):
            break
        try:
            return b[: len(b) - cut].decode("utf-8"), len(b) - cut
        except UnicodeDecodeError as e:
            if e.start < len(b) - 3:
                break
    raise OpError("not_utf8", "the content is not UTF-8")


class Adapter:
    def __init__(self, cfg):
        self.cfg = cfg
        b = cfg["binding"]
        self.identity = {"adapterId": cfg["adapterId"], "adapterVersion": cfg["adapterVersion"],
                         "hostInstanceId": b["hostInstanceId"], "sessionId": b["sessionId"],
                         "generation": b["generation"]}
        self.handle = b["capabilityHandle"]
        self.ops = list(cfg["operations"])
        self.limits = dict(cfg["limits"])
        for op in self.ops:
            if op not in READ_OPS:
                raise SystemExit("airlock_fs_ro: %s is not a read-only operation" % op)
        if len(set(self.ops)) != len(self.ops) or not self.ops:
            raise SystemExit("airlock_fs_ro: operations must be unique and not empty")
        if set(self.limits) != set(LIMIT_BOUNDS) or not all(
                is_int(self.limits[k]) and lo <= self.limits[k] <= hi for k, (lo, hi) in LIMIT_BOUNDS.items()):
            raise SystemExit("airlock_fs_ro: limits must hold the seven limits within their ranges")
        self.root = Root(cfg["root"])
        self.memory = {}  # idempotency key -> (fingerprint, outcome, expiry)
        self.lock = threading.Lock()  # guards bound and memory
        self.bound = False

    def descriptor(self):
        return {"protocolVersion": PROTOCOL_VERSION, "adapterId": self.identity["adapterId"],
                "adapterVersion": self.identity["adapterVersion"],
                "endpoint": {"transport": "unix", "path": self.cfg["socket"]},
                "binding": dict(self.cfg["binding"]), "operations": self.ops, "limits": self.limits}

    def frame(self, kind, **members):
        f = {"protocolVersion": PROTOCOL_VERSION, "kind": kind}
        f.update(self.identity)
        f.update(members)
        return f

    # ---- connection ----

    def serve_conn(self, conn):
        if hasattr(socket, "SO_PEERCRED"):
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            if uid != os.getuid():
                return
        conn.settimeout(BIND_WAIT)
        rf = conn.makefile("rb")
        bound = False
        try:
            f = self.read_frame(rf)
            self.check_bind(f)
            with self.lock:
                if self.bound:
                    return  # a grant has at most one connection
                self.bound = bound = True
            conn.settimeout(None)
            self.send(conn, self.frame("bound", operations=self.ops, limits=self.limits))
            while True:
                f = self.read_frame(rf)
                kind = f["kind"]
                if kind == "invoke":
                    with self.lock:
                        frame = self.invoke(f)
                    self.send(conn, frame)
                elif kind == "abort":
                    # Requests run in order: the target, if it ever existed, was answered.
                    self.send(conn, self.frame("aborted", requestId=f["requestId"],
                                               targetRequestId=f["targetRequestId"], aborted=False))
                elif kind == "revoke":
                    self.send(conn, self.frame("revoked"))
                    return
                else:
                    return
        except (Closed, OSError, ValueError):
            return
        finally:
            rf.close()
            if bound:
                with self.lock:
                    self.bound = False

    def send(self, conn, f):
        b = dumps(f)
        if len(b) > self.limits["maxResponseBytes"] or self.handle.encode() in b:
            raise Closed()
        conn.sendall(b)

    def read_frame(self, rf):
        limit = self.limits["maxRequestBytes"]
        line = rf.readline(limit)
        if not line.endswith(b"\n"):
            raise Closed()  # end of stream, or a line over maxRequestBytes
        try:
            f = strict_loads(line[:-1])
        except (ValueError, UnicodeDecodeError):
            raise Closed()
        if not isinstance(f, dict) or f.get("protocolVersion") != PROTOCOL_VERSION:
            raise Closed()
        kind = f.get("kind")
        if kind not in MEMBERS or set(f) != set(IDENTITY) | MEMBERS[kind]:
            raise Closed()
        for k, v in self.identity.items():
            if type(f[k]) is not type(v) or f[k] != v:
                raise Closed()
        return f

    def check_bind(self, f):
        if f["kind"] != "bind":
            raise Closed()
        h = f["capabilityHandle"]
        if not isinstance(h, str) or not hmac.compare_digest(h.encode("utf-8", "replace"), self.handle.encode()):
            raise Closed()
        if f["operations"] != self.ops:
            raise Closed()
        lim = f["limits"]
        if not isinstance(lim, dict) or set(lim) != set(self.limits) or any(
                not is_int(lim[k]) or lim[k] != v for k, v in self.limits.items()):
            raise Closed()

    # ---- invoke ----

    def invoke(self, f):
        rid, key, op, payload = f["requestId"], f["idempotencyKey"], f["operation"], f["payload"]
        if not (isinstance(rid, str) and len(rid) <= 128 and WIRE_ID.fullmatch(rid)):
            raise Closed()
        if not (isinstance(key, str) and len(key) <= 512 and WIRE_ID.fullmatch(key)):
            raise Closed()
        if op not in ALL_OPS:
            raise Closed()

        def answer(outcome):
            ok, value = outcome
            if ok:
                return self.frame("result", requestId=rid, idempotencyKey=key, operation=op, ok=True, data=value)
            return self.frame("result", requestId=rid, idempotencyKey=key, operation=op, ok=False, error=value)

        try:
            if op not in self.ops:
                raise OpError("operation_denied", "the grant does not include the operation")
            args = self.check_payload(op, payload)
        except OpError as e:  # malformed or denied: no effect, nothing remembered
            return answer((False, {"code": e.code, "message": e.message, "retryable": e.retryable}))
        fingerprint = op + "\0" + json.dumps(args, sort_keys=True)
        now = time.monotonic()
        for k in [k for k, v in self.memory.items() if v[2] <= now]:
            del self.memory[k]
        seen = self.memory.get(key)
        if seen is not None:
            if seen[0] != fingerprint:
                return answer((False, {"code": "idempotency_conflict",
                                       "message": "idempotency key was used with another operation or payload",
                                       "retryable": False}))
            return answer(seen[1])
        try:
            outcome = (True, self.run(op, args))
            frame = answer(outcome)
            if self.handle.encode() in dumps(frame):
                raise OpError("handle_in_result", "the result would contain the capability handle")
            if len(dumps(frame)) > self.limits["maxResponseBytes"]:
                raise OpError("too_large", "the result does not fit maxResponseBytes")
        except (OpError, OSError) as e:
            if isinstance(e, OSError):
                e = os_error(e)
            outcome = (False, {"code": e.code, "message": e.message, "retryable": e.retryable})
            frame = answer(outcome)
            if e.retryable:
                return frame
        if len(self.memory) >= self.limits["maxIdempotencyKeys"]:
            del self.memory[min(self.memory, key=lambda k: self.memory[k][2])]
        self.memory[key] = (fingerprint, outcome, now + self.limits["idempotencyTtlMs"] / 1000.0)
        return frame

    def check_payload(self, op, payload):
        if not isinstance(payload, dict):
            raise OpError("invalid_argument", "payload must be an object")
        spec = PAYLOADS.get(op)
        if spec is None:
            raise OpError("operation_denied", "the grant does not include the operation")
        for k in payload:
            if k not in spec:
                raise OpError("invalid_argument", "payload has an unknown member")
        args = {}
        for k, (kind, required) in spec.items():
            if k not in payload:
                if required:
                    raise OpError("invalid_argument", "payload lacks a required member")
                continue
            v = payload[k]
            if kind == "path":
                check_path(v)
            elif kind == "query":
                if not isinstance(v, str) or not 1 <= len(v) <= 4096 or has_surrogate(v):
                    raise OpError("invalid_argument", "query must be 1 to 4096 characters")
            else:
                lo, hi = kind
                if not is_int(v) or not lo <= v <= hi:
                    raise OpError("invalid_argument", "an integer member is out of bounds")
            args[k] = v
        return args

    def run(self, op, a):
        parts = check_path(a["path"])
        if op == "fs.stat":
            fd, st = self.root.open(parts)
            os.close(fd)
            kind = "directory" if stat.S_ISDIR(st.st_mode) else "file"
            return {"type": kind, "size": st.st_size if kind == "file" else 0, "modifiedAt": modified_at(st)}
        if op == "fs.list":
            return self.list(parts, a.get("maxEntries", 1000))
        if op == "fs.read":
            return self.read(parts, a.get("offset", 0), a.get("maxBytes", 65536))
        return self.search(a["path"], parts, a["query"], a.get("maxResults", 1000))

    def budget(self):
        return self.limits["maxResponseBytes"] - 1024  # room for the frame around the data

    def list(self, parts, max_entries):
        fd, _ = self.root.open(parts, "directory")
        try:
            names = sorted(n for n in os.listdir(fd) if entry_name_ok(n))
            entries, truncated, size = [], False, 0
            for name in names:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    e = {"name": name, "type": "file", "size": st.st_size, "modifiedAt": modified_at(st)}
                elif stat.S_ISDIR(st.st_mode):
                    e = {"name": name, "type": "directory", "modifiedAt": modified_at(st)}
                else:
                    continue  # symlinks, devices, FIFOs and sockets are not listed
                size += len(dumps(e))
                if len(entries) == max_entries or size > self.budget():
                    truncated = True
                    break
                entries.append(e)
            return {"entries": entries, "truncated": truncated}
        finally:
            os.close(fd)

    def read(self, parts, offset, max_bytes):
        fd, st = self.root.open(parts, "file")
        try:
            # JSON escaping can grow content up to six times; a larger window is cut below.
            want = min(max_bytes, MAX_CONTENT, max(1, self.budget()))
            data = os.pread(fd, want, offset) if offset < st.st_size else b""
            at_eof = offset + len(data) >= st.st_size
            text, n = decode_prefix(data, at_eof)
            while len(dumps(text)) > self.budget() and n > 0:
                text, n = decode_prefix(data[: n // 2], False)
                at_eof = False
            return {"content": text, "bytesRead": n, "eof": at_eof and offset + n >= st.st_size}
        finally:
            os.close(fd)

    def search(self, path, parts, query, max_results):
        fd, st = self.root.open(parts)
        matches, state = [], {"files": 0, "size": 0, "truncated": False}
        prefix = "" if path == "." else path

        def add(rel, lineno, col, text):
            if len(matches) >= max_results:
                state["truncated"] = True
                return False
            b = text.encode("utf-8")
            if len(b) > 4096:
                text = b[:4096].decode("utf-8", "ignore")
            m = {"path": rel, "line": lineno, "column": col, "text": text}
            state["size"] += len(dumps(m))
            if state["size"] > self.budget():
                state["truncated"] = True
                return False
            matches.append(m)
            return True

        def scan_file(ffd, rel):
            if os.fstat(ffd).st_size > SEARCH_FILE_MAX:
                return True
            chunks = []
            while True:
                b = os.read(ffd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
            data = b"".join(chunks)
            if b"\0" in data[:8192]:
                return True  # binary files (a NUL in the first 8 KiB) are skipped
            try:
                content = data.decode("utf-8")
            except UnicodeDecodeError:
                return True  # so are files that are not UTF-8
            # One entry per line, at its first occurrence; a str index counts code points, so
            # the column is in characters. A query across lines is reported where it starts.
            lineno, counted, at = 1, 0, content.find(query)
            while at >= 0:
                lineno += content.count("\n", counted, at)
                counted = at
                start = content.rfind("\n", 0, at) + 1
                end = content.find("\n", start)
                line = content[start:] if end < 0 else content[start:end]
                if not add(rel, lineno, at - start + 1, line):
                    return False
                nl = content.find("\n", at)
                if nl < 0:
                    break
                at = content.find(query, nl + 1)
            return True

        def walk(dfd, rel, depth):
            if depth > SEARCH_MAX_DEPTH:
                state["truncated"] = True
                return True
            entries = []
            for name in os.listdir(dfd):
                if not entry_name_ok(name):
                    continue
                try:
                    entries.append((name, os.stat(name, dir_fd=dfd, follow_symlinks=False)))
                except OSError:
                    continue
            # Full paths in byte order: a directory sorts as its name and "/", so that
            # "a.txt" comes before "a/z.txt". (UTF-8 keeps code point order.)
            entries.sort(key=lambda e: e[0] + "/" if stat.S_ISDIR(e[1].st_mode) else e[0])
            for name, cst in entries:
                state["files"] += 1
                if state["files"] > SEARCH_MAX_FILES:
                    state["truncated"] = True
                    return False
                child = name if not rel else rel + "/" + name
                if stat.S_ISDIR(cst.st_mode):
                    flags = os.O_RDONLY | os.O_DIRECTORY
                elif stat.S_ISREG(cst.st_mode):
                    flags = os.O_RDONLY | os.O_NONBLOCK
                else:
                    continue  # symlinks and special files are never followed or read
                try:
                    cfd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=dfd)
                except OSError:
                    continue
                try:
                    cst = os.fstat(cfd)
                    if stat.S_ISDIR(cst.st_mode):
                        more = walk(cfd, child, depth + 1)
                    elif stat.S_ISREG(cst.st_mode):
                        more = scan_file(cfd, child)
                    else:
                        more = True
                finally:
                    os.close(cfd)
                if not more:
                    return False
            return True

        try:
            if stat.S_ISDIR(st.st_mode):
                walk(fd, prefix, 0)
            else:
                scan_file(fd, path)
        finally:
            os.close(fd)
        return {"matches": matches, "truncated": state["truncated"]}


def has_surrogate(s):
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def listen(path):
    parent = os.path.dirname(path)
    st = os.lstat(parent)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SystemExit("airlock_fs_ro: the socket's directory must be an owner-only directory")
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)  # stale; a live adapter would own it, but one grant means one adapter
    except FileNotFoundError:
        pass
    old = os.umask(0o077)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    s.listen(8)
    return s


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--descriptor"):
        sys.stderr.write("usage: airlock_fs_ro.py CONFIG [--descriptor]\n")
        return 2
    with open(argv[1], "rb") as fh:
        cfg = strict_loads(fh.read())
    adapter = Adapter(cfg)
    if len(argv) == 3:
        sys.stdout.write(json.dumps(adapter.descriptor()) + "\n")
        return 0

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    path = cfg["socket"]
    srv = listen(path)
    ident = os.stat(path)
    def serve(conn):
        try:
            adapter.serve_conn(conn)
        finally:
            conn.close()

    try:
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    finally:
        srv.close()
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == (ident.st_dev, ident.st_ino):
                os.unlink(path)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
