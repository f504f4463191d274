from django.apps import AppConfig


class DurableJobsConfig(AppConfig):
    name = "django_durable_jobs"
    label = "durable_jobs"
    verbose_name = "Durable jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from . import checks  # noqa: F401 - registers the system checks

        autodiscover_modules("jobs")
