from django.apps import AppConfig


class BenchAsyncAppConfig(AppConfig):
    name = "benchmarks.asyncapp"
    label = "durable_jobs_bench_async"
    verbose_name = "Durable jobs benchmark async operations"
