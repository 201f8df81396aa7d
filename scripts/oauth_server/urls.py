from django.urls import include, path

from . import views

urlpatterns = [
    path("", include("oauth2_provider.urls")),
    path("test/approve-device", views.approve_device),
    path("test/refreshes", views.refreshes),
    path("test/grant-alive", views.grant_alive),
    path("test/pause", views.pause),
    path("test/slow-token/<str:seconds>/", views.slow_token),
]
