# A test authorization server for Keysmith's provider tests: django-oauth-toolkit with refresh
# tokens rotating under reuse protection (no grace period), PKCE required, revocation,
# introspection and the device flow. Test-only: it trusts an X-Test-User header for who is
# signed in, and has /test/ endpoints that approve device codes and count refreshes.
# Started and stopped by scripts/with-oauth-server.sh; never deploy it.
import os

BASE = os.environ["KEYSMITH_OAUTH_STATE"]
SECRET_KEY = "keysmith-test-only-" + os.environ.get("KEYSMITH_OAUTH_SECRET", "x")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
ROOT_URLCONF = "oauth_server.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "oauth_server.views.TestUserMiddleware",
]
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.RemoteUserBackend", "django.contrib.auth.backends.ModelBackend"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(BASE, "db.sqlite3"),
        # Parallel refreshes: wait for the writer instead of "database is locked", and take the
        # write lock at BEGIN so two refreshes of one grant serialize.
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True, "OPTIONS": {}}]
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "handlers": {"file": {"class": "logging.FileHandler", "filename": os.path.join(BASE, "server.log")}},
           "root": {"handlers": ["file"], "level": "WARNING"}}

# Test-only: client secrets and passwords hashed fast (Django's default, PBKDF2 with a million
# rounds, made every confidential client's request cost half a second on the test machine).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

OAUTH2_PROVIDER = {
    "ACCESS_TOKEN_EXPIRE_SECONDS": int(os.environ.get("KEYSMITH_OAUTH_ACCESS_SECONDS", "3600")),
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": 0,
    "PKCE_REQUIRED": True,
    "DEVICE_FLOW_INTERVAL": 1,
    "OAUTH_DEVICE_VERIFICATION_URI": "http://127.0.0.1/device",
    "SCOPES": {"read": "read", "write": "write", "admin": "admin", "introspection": "introspection"},
    "DEFAULT_SCOPES": ["read"],
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http"],
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "REQUEST_APPROVAL_PROMPT": "auto",
}
