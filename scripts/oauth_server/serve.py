"""Runs the test authorization server on 127.0.0.1 at a port the kernel picks.

    KEYSMITH_OAUTH_STATE=DIR python serve.py

(KEYSMITH_OAUTH_PORT=N binds that port instead: a server started again where it was.)

Creates DIR/db.sqlite3 (migrated), the test clients, writes DIR/server.json with the server's
URL, port, PID and clients (client secrets included: they exist only for this server), then
serves until killed. Settings come from the environment (settings.py)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oauth_server.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from oauth2_provider.models import Application  # noqa: E402

state = os.environ["KEYSMITH_OAUTH_STATE"]
call_command("migrate", verbosity=0, interactive=False)

SECRET = "test-client-secret-" + os.environ.get("KEYSMITH_OAUTH_SECRET", "x")
clients = {
    # A public client for people: the device flow (and refreshing what it got).
    "device": ("ks-device", Application.CLIENT_PUBLIC, Application.GRANT_DEVICE_CODE, ""),
    # A public client for the browser: authorization code with PKCE, loopback redirect.
    "code": ("ks-code", Application.CLIENT_PUBLIC, Application.GRANT_AUTHORIZATION_CODE, "http://127.0.0.1/callback"),
    # A confidential client for services: client credentials.
    "service": ("ks-service", Application.CLIENT_CONFIDENTIAL, Application.GRANT_CLIENT_CREDENTIALS, ""),
    # A confidential client that has a user's grant by the password grant (tests set one up fast).
    "password": ("ks-password", Application.CLIENT_CONFIDENTIAL, Application.GRANT_PASSWORD, ""),
}
described = {}
for name, (client_id, client_type, grant, redirect) in clients.items():
    if not Application.objects.filter(client_id=client_id).exists():
        Application.objects.create(client_id=client_id, name=name, client_type=client_type, authorization_grant_type=grant,
                                   redirect_uris=redirect, client_secret=SECRET, skip_authorization=True, algorithm="")
    described[name] = {"client_id": client_id, "confidential": client_type == Application.CLIENT_CONFIDENTIAL}

# Users for the password grant.
from django.contrib.auth import get_user_model  # noqa: E402
for user in ("alice", "bob"):
    if not get_user_model().objects.filter(username=user).exists():
        get_user_model().objects.create_user(username=user, password="pw-" + user)

server = ThreadedWSGIServer(("127.0.0.1", int(os.environ.get("KEYSMITH_OAUTH_PORT", "0"))), WSGIRequestHandler)
server.daemon_threads = True
server.set_app(get_wsgi_application())
port = server.server_address[1]
info = {"url": f"http://127.0.0.1:{port}", "port": port, "pid": os.getpid(), "client_secret": SECRET, "clients": described}
with open(os.path.join(state, "server.json.tmp"), "w") as out:
    json.dump(info, out)
os.rename(os.path.join(state, "server.json.tmp"), os.path.join(state, "server.json"))
server.serve_forever()
