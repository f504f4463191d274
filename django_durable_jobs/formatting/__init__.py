"""The surfaces' shared formatting: printable terminal text and human times.

Imports nothing from the package, so the worker, the commands, the admin and the store's log lines
may all use it at their output boundary.
"""
