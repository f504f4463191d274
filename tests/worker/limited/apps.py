from django.apps import AppConfig


class LimitedConfig(AppConfig):
    name = "tests.worker.limited"
    label = "limited"

    def ready(self) -> None:
        from .ops import register

        register()
