from django.apps import AppConfig


class AsyncOpsConfig(AppConfig):
    name = "tests.worker.asyncops"
    label = "asyncops"

    def ready(self) -> None:
        from .ops import register

        register()
