"""The admin names its models in good English: index, sidebar, breadcrumbs and search box."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]


def test_worker_processes_are_spelled_right_on_the_index_and_their_list(root):
    index = root.get("/admin/").content.decode()
    listing = root.get("/admin/durable_jobs/workerprocess/").content.decode()
    for page in (index, listing):
        assert "Worker processes" in page
        assert "processs" not in page.lower()
