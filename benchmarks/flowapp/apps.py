from django.apps import AppConfig


class FlowBenchConfig(AppConfig):
    name = "benchmarks.flowapp"
    label = "durable_jobs_flow_bench"
    verbose_name = "Durable jobs flow-control benchmark operations"
