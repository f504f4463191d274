from django.apps import AppConfig


class DemoAppConfig(AppConfig):
    name = "demoapp"
    default_auto_field = "django.db.models.BigAutoField"
