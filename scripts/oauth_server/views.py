"""Test-only helpers: who is signed in comes from a header, and a few endpoints let the tests
approve a device code, count refreshes and see whether a grant is still alive."""
import json
import time

from django.contrib.auth.middleware import RemoteUserMiddleware
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from oauth2_provider.models import AccessToken, DeviceGrant, RefreshToken


class TestUserMiddleware(RemoteUserMiddleware):
    """The resource owner is the user named by X-Test-User (created on first use)."""
    header = "HTTP_X_TEST_USER"
    force_logout_if_no_header = False


@csrf_exempt
def approve_device(request):
    """POST user_code=…&user=…[&deny=1]: the user approves (or denies) a device code."""
    from django.contrib.auth import get_user_model
    user, _ = get_user_model().objects.get_or_create(username=request.POST.get("user", "alice"))
    try:
        grant = DeviceGrant.objects.get(user_code=request.POST["user_code"])
    except DeviceGrant.DoesNotExist:
        return JsonResponse({"error": "unknown user code"}, status=404)
    grant.user = user
    grant.status = DeviceGrant.DENIED if request.POST.get("deny") else DeviceGrant.AUTHORIZED
    grant.save()
    return JsonResponse({"status": grant.status})


def refreshes(request):
    """GET ?client_id=…: how many refresh tokens were issued to the client (each refresh issues
    one, and so does the first grant), and how many were revoked."""
    client = request.GET["client_id"]
    tokens = RefreshToken.objects.filter(application__client_id=client)
    return JsonResponse({"issued": tokens.count(), "revoked": tokens.exclude(revoked=None).count()})


def grant_alive(request):
    """GET ?client_id=…: whether the client holds an unrevoked refresh token (the grant lives)."""
    client = request.GET["client_id"]
    alive = RefreshToken.objects.filter(application__client_id=client, revoked=None).exists()
    return JsonResponse({"alive": alive})


@csrf_exempt
def pause(request):
    """POST seconds=…: answer after that long (a slow server)."""
    time.sleep(float(request.POST.get("seconds", "1")))
    return HttpResponse("ok")


_token_view = None


@csrf_exempt
def slow_token(request, seconds):
    """The token endpoint, answering `seconds` after it has done its work: a refresh token is
    spent (rotated, reuse protection on) before the answer leaves, as on a slow network."""
    global _token_view
    if _token_view is None:
        from oauth2_provider.views import TokenView
        _token_view = csrf_exempt(TokenView.as_view())
    response = _token_view(request)
    time.sleep(float(seconds))
    return response
