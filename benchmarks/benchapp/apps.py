from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    name = "benchmarks.benchapp"
    label = "durable_jobs_bench"
    verbose_name = "Durable jobs benchmark operations"
