#!/usr/bin/env python3
"""A git smart-HTTP server for the tests: git's own git-http-backend behind Basic authentication,
on 127.0.0.1 only.

    git-http-server.py ROOT USERS PORTFILE

ROOT holds the bare repositories; USERS has one `user:password` line per user and is read again
on every request (a test changes a password by rewriting it); the port the server listens on is
written to PORTFILE once it listens. Every request is logged to ROOT/requests.log as
`METHOD PATH STATUS USER`. Stops on SIGTERM.

With USERS given as `introspect=URL`, a password is instead an OAuth access token, accepted
while the authorization server's introspection endpoint (RFC 7662, at URL) says it is active;
the server authenticates there as $GIT_SERVER_INTROSPECT_CLIENT (`client_id:secret`).
"""
import base64
import http.server
import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request

ROOT, USERS, PORTFILE = sys.argv[1], sys.argv[2], sys.argv[3]


def users():
    table = {}
    with open(USERS, encoding="utf-8") as f:
        for line in f.read().splitlines():
            name, _, password = line.partition(":")
            if name:
                table[name] = password
    return table


def token_active(token):
    """Whether the authorization server says the access token is active."""
    url = USERS[len("introspect="):]
    client = os.environ["GIT_SERVER_INTROSPECT_CLIENT"]
    request = urllib.request.Request(url, data=urllib.parse.urlencode({"token": token}).encode(),
                                     headers={"Authorization": "Basic " + base64.b64encode(client.encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer).get("active") is True
    except Exception:
        return False


def valid(name, password):
    if USERS.startswith("introspect="):
        return token_active(password)
    return users().get(name) == password


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.serve()

    def do_POST(self):
        self.serve()

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def record(self, status, user):
        with open(os.path.join(ROOT, "requests.log"), "a", encoding="utf-8") as f:
            f.write(f"{self.command} {self.path} {status} {user or '-'}\n")

    def serve(self):
        user = None
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                name, _, password = base64.b64decode(auth[6:]).decode("utf-8").partition(":")
            except Exception:
                name, password = None, None
            if name is not None and valid(name, password):
                user = name
        data = self.body()
        if user is None:
            self.record(401, None)
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="keysmith-test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        env = dict(os.environ, GIT_PROJECT_ROOT=ROOT, GIT_HTTP_EXPORT_ALL="1", PATH_INFO=path, QUERY_STRING=query,
                   REQUEST_METHOD=self.command, CONTENT_TYPE=self.headers.get("Content-Type", ""), REMOTE_USER=user,
                   REMOTE_ADDR="127.0.0.1", CONTENT_LENGTH=str(len(data)))
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        output = subprocess.run(["git", "http-backend"], input=data, env=env, capture_output=True).stdout
        separator = b"\r\n\r\n" if b"\r\n\r\n" in output else b"\n\n"
        head, _, payload = output.partition(separator)
        status, headers = 200, []
        for line in head.replace(b"\r\n", b"\n").split(b"\n"):
            key, _, value = line.decode("latin-1").partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.record(status, user)
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
with open(PORTFILE + ".tmp", "w", encoding="utf-8") as f:
    f.write(str(server.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
server.serve_forever()
