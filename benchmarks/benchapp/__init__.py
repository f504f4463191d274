"""The operations the worker benchmark (``python -m benchmarks.worker_latency``) runs."""
