#!/usr/bin/env python3
"""A fake Amazon CloudWatch Logs API for the collector's awsemf exporter (tests/collector only).

awsemf writes metrics as "embedded metric format" (EMF) log events through the CloudWatch Logs API:
AWS JSON 1.1 protocol, `POST /` with `X-Amz-Target: Logs_20140328.<Operation>` and a JSON body. This server
answers the operations awsemf calls, as the real service would for a fresh account:

  PutLogEvents        400 ResourceNotFoundException until the group and the stream exist (awsemf then
                      creates them), else 200 with a nextSequenceToken (awsemf sends again without one)
  CreateLogStream     400 ResourceNotFoundException while the group does not exist, else 200
  CreateLogGroup      200 (ResourceAlreadyExistsException the second time)
  PutRetentionPolicy  200 for an existing group
  anything else       400 UnknownOperationException (and recorded, so the test sees it)

Every request is appended to OUT (JSON lines: {"target", "body"}); the request signature is not checked
(fake credentials). Listens on 127.0.0.1:PORT (0: a free one) until killed and prints `listening PORT`.

Usage: fake_cloudwatch_logs.py PORT OUT
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREFIX = "Logs_20140328."
_lock = threading.Lock()
_groups = set()
_streams = set()
_sequence = [0]


def _error(kind, message):
    return 400, {"__type": kind, "message": message}


def answer(operation, body):
    """(HTTP status, JSON reply) for one operation, updating the account's groups and streams."""
    group = body.get("logGroupName")
    stream = body.get("logStreamName")
    with _lock:
        if operation == "CreateLogGroup":
            if group in _groups:
                return _error("ResourceAlreadyExistsException", "The specified log group already exists")
            _groups.add(group)
            return 200, {}
        if operation == "PutRetentionPolicy":
            if group not in _groups:
                return _error("ResourceNotFoundException", "The specified log group does not exist.")
            return 200, {}
        if operation == "CreateLogStream":
            if group not in _groups:
                return _error("ResourceNotFoundException", "The specified log group does not exist.")
            if (group, stream) in _streams:
                return _error("ResourceAlreadyExistsException", "The specified log stream already exists")
            _streams.add((group, stream))
            return 200, {}
        if operation == "PutLogEvents":
            if (group, stream) not in _streams:
                return _error("ResourceNotFoundException", "The specified log stream does not exist.")
            _sequence[0] += 1
            return 200, {"nextSequenceToken": f"{_sequence[0]:056d}"}
    return _error("UnknownOperationException", f"fake_cloudwatch_logs.py does not know {operation}")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    out = None

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        target = self.headers.get("X-Amz-Target", "")
        try:
            body = json.loads(raw or b"{}")
        except ValueError as e:
            status, reply = _error("SerializationException", str(e))
            body = {"unparsed": raw.decode("utf-8", "replace")}
        else:
            status, reply = (answer(target[len(PREFIX):], body) if target.startswith(PREFIX)
                             else _error("UnknownOperationException", f"X-Amz-Target {target!r}"))
        with _lock:
            with open(self.out, "a") as f:
                f.write(json.dumps({"target": target, "status": status, "body": body}) + "\n")
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("x-amzn-RequestId", f"fake-{_sequence[0]}")
        if status != 200:
            self.send_header("X-Amzn-ErrorType", reply["__type"])
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    Handler.out = out
    open(out, "a").close()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
