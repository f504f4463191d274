"""The database dialect and the store's transactions.

Every difference between SQLite, PostgreSQL and MariaDB/MySQL goes through ``dbvendor``;
``transactions`` opens the bounded, lock-capped transactions the store writes in. Built on the job
table (the capacity gate row) and the rules; used by the store, the worker and the checks.
"""
