"""A misbehaving authorization server for Keysmith's tests: each path answers wrongly in one way.

    python bad_server.py PORTFILE

Serves on 127.0.0.1 at a port the kernel picks (written to PORTFILE) until killed."""
import http.server
import json
import os
import sys
import time
import urllib.parse


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body, headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        path = self.path
        if path == "/oversize":
            self.answer(200, b'{"access_token":"' + b"a" * (1 << 20) + b'","token_type":"Bearer"}')
        elif path == "/not-json":
            self.answer(200, b"<html>hello</html>")
        elif path == "/wrong-types":
            self.answer(200, {"access_token": 5, "token_type": "Bearer"})
        elif path == "/expires-fraction":
            self.answer(200, {"access_token": "a", "token_type": "Bearer", "expires_in": 1.5})
        elif path == "/trickle":
            # The head at once, then the body a byte at a time, slower than any whole-request bound.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1)
        elif path == "/missing":
            self.answer(200, {"token_type": "Bearer"})
        elif path == "/redirect":
            self.answer(302, b"", [("Location", "http://127.0.0.1:1/token")])
        elif path == "/error":
            self.answer(400, {"error": "invalid_grant", "error_description": "line one\nline two \u001b[31mred"})
        elif path == "/echo":
            # An error that quotes what the client sent (its refresh token, its client secret).
            self.answer(400, {"error": "invalid_grant", "error_description": "you sent " + urllib.parse.unquote_plus(body.decode())})
        elif path == "/unavailable":
            self.answer(503, b"", [("Retry-After", "7")])
        elif path == "/server-error-invalid-grant":
            # A server that fails and says invalid_grant in its 500: not a refusal (RFC 6749 §5.2 errors are 400/401).
            self.answer(500, {"error": "invalid_grant"})
        elif path == "/unavailable-oauth":
            self.answer(503, {"error": "temporarily_unavailable"}, [("Retry-After", "7")])
        elif path == "/extra-fields":
            # A rotated answer Keysmith must keep although some of its extra fields cannot be.
            self.answer(200, b'{"access_token":"kept","token_type":"Bearer","refresh_token":"r2","id_token":"' + b"x" * 70000
                        + b'","odd":"\\ud800","team":1,"team":2}')
        elif path == "/slow":
            time.sleep(5)
            self.answer(200, {"access_token": "late", "token_type": "Bearer"})
        elif path == "/good":
            self.answer(200, {"access_token": "good", "token_type": "Bearer", "expires_in": 3600, "scope": "read"})
        else:
            self.answer(404, b"")


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(server.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
