#!/usr/bin/env python3
"""Send one QMP command to a QEMU and print the JSON reply (python3 stdlib only).

Usage: qmp.py [--timeout S] [--pretty] SOCKET|NAME COMMAND [ARGS-JSON]

SOCKET is a QMP unix socket path; a bare NAME means
$STEALSCOPE_TESTENV_RUN/NAME/qmp.sock (default run dir /run/stealscope-testenv).
Sends qmp_capabilities, then {"execute": COMMAND, "arguments": ARGS}, and prints
the reply object ({"return": ...}) as one JSON line. Asynchronous events are
skipped. Exit status: 0 on "return", 1 on a QMP "error", 2 on usage/connection errors.

Examples:
  qmp.py vmA query-cpus-fast
  qmp.py /run/stealscope-testenv/vmA/qmp.sock query-status
  qmp.py vmA human-monitor-command '{"command-line": "info numa"}'
"""
import argparse
import json
import os
import socket
import sys


class QMP:
    def __init__(self, path, timeout):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        greeting = self._read()
        if "QMP" not in greeting:
            raise RuntimeError(f"unexpected QMP greeting: {greeting}")
        reply = self.execute("qmp_capabilities")
        if "return" not in reply:
            raise RuntimeError(f"qmp_capabilities failed: {reply}")

    def _read(self):
        """Read one JSON object (QMP sends one per line)."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("QMP socket closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def execute(self, command, arguments=None):
        msg = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            obj = self._read()
            if "event" not in obj:  # skip async events such as SHUTDOWN
                return obj

    def close(self):
        self.sock.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--pretty", action="store_true", help="indent the JSON output")
    ap.add_argument("socket", help="QMP socket path or VM name")
    ap.add_argument("command")
    ap.add_argument("arguments", nargs="?", help="JSON object of command arguments")
    a = ap.parse_args()

    path = a.socket
    if "/" not in path:
        run = os.environ.get("STEALSCOPE_TESTENV_RUN", "/run/stealscope-testenv")
        path = os.path.join(run, path, "qmp.sock")
    try:
        args = json.loads(a.arguments) if a.arguments else None
    except json.JSONDecodeError as e:
        print(f"qmp.py: error: ARGS is not valid JSON: {e}", file=sys.stderr)
        return 2
    try:
        q = QMP(path, a.timeout)
        reply = q.execute(a.command, args)
        q.close()
    except (OSError, ConnectionError, RuntimeError, ValueError) as e:
        print(f"qmp.py: error: {path}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(reply, indent=2 if a.pretty else None))
    return 0 if "return" in reply else 1


if __name__ == "__main__":
    sys.exit(main())
