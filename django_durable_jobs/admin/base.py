"""What every admin page of the app shares: rows are evidence, never added, changed or deleted,
and they are read from the database the app's tables live in (``DURABLE_JOBS['DATABASE']``)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.http import HttpResponseBadRequest
from django.template.response import TemplateResponse

from ..rules.conf import jobs_settings

# Payload columns: a list never reads them, however big they are.
LARGE_TEXT = ("proposal", "checkpoint", "result", "error")
# The context of a page that needs the whole width (a wide list, a traceback): without the
# admin's navigation sidebar, which takes a quarter of a 1,280 px screen.
WIDE = {"is_nav_sidebar_enabled": False}


class OnJobsDatabase:
    """Rows read from ``DURABLE_JOBS['DATABASE']``, the alias the app's tables live in.

    Input no page of the admin sends is refused before any query, the same way on every
    database: a NUL byte anywhere in a list's query or form (PostgreSQL's driver refuses it in
    a string, where SQLite and MariaDB would find nothing) is a 400, and so is a selected row
    whose id is not an id; an object id holding one finds no object.
    """

    def get_queryset(self, request):
        """Read from ``DURABLE_JOBS['DATABASE']``: the list, its filters, each page and inline,
        and the rows an action is given."""
        return super().get_queryset(request).using(jobs_settings.DATABASE)

    def changelist_view(self, request, extra_context=None):
        refusal = _refusal(request, self.model._meta.pk)
        if refusal:
            return HttpResponseBadRequest(refusal, content_type="text/plain; charset=utf-8")
        return super().changelist_view(request, extra_context)

    def get_object(self, request, object_id, from_field=None):
        if "\x00" in str(object_id):
            return None  # no row's key holds one: the admin says it does not exist
        return super().get_object(request, object_id, from_field)


def _refusal(request, pk) -> str | None:
    """Return why a list refuses ``request`` (a NUL byte, a selected row that is no id), or None."""
    sent = [("query", request.GET)]
    if request.method == "POST":
        sent.append(("form", request.POST))
    for where, data in sent:
        for key, values in data.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                return f"The {where} holds a NUL byte, which no field of this app holds."
    if request.method == "POST":
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                pk.to_python(value)
            except ValidationError:
                return f"{value!r} is not the id of a row of this list; select rows on the list."
    return None


class ReadOnly(OnJobsDatabase):
    """No add, change or delete for anybody (superusers included); viewing as Django decides."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdmin(ReadOnly, admin.ModelAdmin):
    """A read-only admin page."""


def confirmation(
    model_admin: admin.ModelAdmin, request, question: str, answer: str, page: str, **shown
) -> TemplateResponse:
    """Return the page that asks to confirm a request (cancel, retry) of one row, POSTing back.

    ``question`` is "Title? Explanation"; ``shown`` adds what the model's template shows of the
    row (``admin/<app>/<model>/request_confirmation.html``).
    """
    opts = model_admin.opts
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": opts,
        "title": question.split("?")[0] + "?",
        "question": question.split("?", 1)[1].strip(),
        "answer": answer,
        "page_url": page,
        **shown,
    }
    template = f"admin/{opts.app_label}/{opts.model_name}/request_confirmation.html"
    return TemplateResponse(request, template, context)
