"""The REST API's bearer tokens: list, create (the token shown once), revoke.

A token is made by :func:`~django_durable_jobs.models.tokens.create_token`, as ``manage.py jobs
token create`` makes it, and ended by :func:`~django_durable_jobs.models.tokens.revoke_token`. The
full token exists only in the response to the form that made it: it is never stored, not in the
session, not in the admin's history. The stored SHA-256 is never shown, searched, ordered or
filtered on: every lookup that names it is refused (400), however it is reached.

A token acts as its user: whoever holds it may do through the API what that user may do. So
``add_apitoken`` makes tokens for oneself only; ``add_apitoken_for_others`` (with it) also for
another active user, and even then only one whose every permission the maker holds (a superuser
only by a superuser): no token reaches further than the person who made it. ``change_apitoken``
renames and revokes, ``view_apitoken`` reads. Nobody deletes a token: revoke it, and its row
keeps saying who could call the API and when it was last used.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import router
from django.db.models import Q
from django.db.models.constants import LOOKUP_SEP
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from ..models import ApiToken
from ..models.tokens import (
    TOKEN_PREFIX,
    create_token,
    revoke_token,
    token_expired,
    token_expiry,
    token_operations,
)
from ..rules import validation
from ..rules.conf import jobs_settings
from ..rules.errors import InputInvalid
from . import format as fmt
from .base import OnJobsDatabase
from .minting import MINT_FOR_OTHERS, OneselfWidget, mint_refusal

ACTIVE, EXPIRED, REVOKED = "active", "expired", "revoked"
STATE_COLOURS = {ACTIVE: "#1e7e34", EXPIRED: "#6c757d", REVOKED: "#c0392b"}
CREATED_TEMPLATE = "admin/durable_jobs/apitoken/token_created.html"
HASH_FIELD = "token_hash"


def token_state(row: ApiToken) -> str:
    """Return ``revoked``, ``expired`` or ``active``: whether the API accepts the token now."""
    if row.revoked_at is not None:
        return REVOKED
    return EXPIRED if token_expired(row) else ACTIVE


def _checked(check, value):
    """Return ``check(value)``; its refusal becomes the form field's error."""
    try:
        return check(value)
    except InputInvalid as exc:
        raise ValidationError(exc.message) from None


class ApiTokenLabelForm(forms.ModelForm):
    """The one thing a token's page can change: its label, checked as at creation."""

    def clean_name(self) -> str:
        name = self.cleaned_data.get("name") or ""
        return _checked(lambda n: validation.name(n, "token name"), name) if name else ""


class ApiTokenCreationForm(ApiTokenLabelForm):
    """What a new token needs; checked by the rules ``create_token`` applies."""

    operations_text = forms.CharField(
        label="Operations",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="The operations the token may submit, one per line or separated by commas. "
        "Empty: every registered operation.",
    )

    minter = None  # the requesting user; ApiTokenAdmin.get_form sets it

    class Meta:
        model = ApiToken
        fields = ("user", "scope", "name", "expires_at")
        help_texts = {
            "scope": "The only scope the token can see and submit to.",
            "name": "A label to recognise the token by.",
            "expires_at": "Empty: the token never expires.",
        }

    def clean_user(self):
        user = self.cleaned_data["user"]
        refusal = "Nobody is signed in." if self.minter is None else mint_refusal(self.minter, user)
        if refusal:
            raise ValidationError(refusal)
        return user

    def clean_scope(self) -> str:
        return _checked(validation.scope, self.cleaned_data["scope"])

    def clean_operations_text(self) -> list[str]:
        text = self.cleaned_data.get("operations_text") or ""
        names = [part.strip() for part in text.replace(",", "\n").splitlines() if part.strip()]
        return _checked(token_operations, names)

    def clean_expires_at(self):
        return _checked(token_expiry, self.cleaned_data.get("expires_at"))


class TokenStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [(ACTIVE, ACTIVE), (EXPIRED, EXPIRED), (REVOKED, REVOKED)]

    def queryset(self, request, queryset):
        now = timezone.now()
        live = queryset.filter(revoked_at__isnull=True)
        if self.value() == ACTIVE:
            return live.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        if self.value() == EXPIRED:
            return live.filter(expires_at__lte=now)
        if self.value() == REVOKED:
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApiToken)
class ApiTokenAdmin(OnJobsDatabase, admin.ModelAdmin):
    form = ApiTokenLabelForm
    add_form = ApiTokenCreationForm
    list_display = (
        "label",
        "token_prefix",
        "user",
        "scope",
        "operations_shown",
        "expires_at",
        "created_at",
        "last_used_at",
        "state_badge",
    )
    list_display_links = ("label",)
    list_filter = (TokenStateFilter, "scope")
    list_select_related = ("user",)
    ordering = ("-created_at", "-id")
    actions = ["revoke_tokens"]
    add_fields = ("user", "scope", "name", "operations_text", "expires_at")
    # The token's page: its label (the one field that may change), the list's columns, and when
    # it was revoked.
    change_fields = ("name", *list_display[1:-1], "revoked_at", "state_badge")
    raw_id_fields = ("user",)

    def get_search_fields(self, request):
        # The public prefix, never the hash.
        return ("name", "prefix", "scope", f"user__{get_user_model().USERNAME_FIELD}")

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        """Refuse every lookup that names the hash (``?token_hash__startswith=`` would tell it
        character by character), from this model or through a relation back to it; Django
        answers a refused lookup with 400."""
        if HASH_FIELD in lookup.split(LOOKUP_SEP):
            return False
        return super().lookup_allowed(lookup, value, request)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    # -- forms ------------------------------------------------------------------------------------

    def get_fields(self, request, obj=None):
        return self.add_fields if obj is None else self.change_fields

    def get_readonly_fields(self, request, obj=None):
        # A token's reach (user, scope, operations, expiry) is what its holder was given; only
        # its label may change. Revoke it and make another to change the rest.
        return () if obj is None else self.change_fields[1:]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = self.add_form
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is None:
            form.minter = request.user  # a class made for this request by modelform_factory
        return form

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        """The user a new token acts as: the requesting user, read-only, unless they may make
        tokens for others (then any user's id, checked by :func:`mint_refusal`)."""
        if db_field.name == "user":
            if request.user.has_perm(MINT_FOR_OTHERS):
                kwargs["help_text"] = (
                    "The user the token acts as: you, or an active user whose every permission "
                    "you hold too."
                )
            else:
                kwargs["widget"] = OneselfWidget(request.user)
                kwargs["help_text"] = (
                    "The token acts as you: you may create tokens only for yourself."
                )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_changeform_initial_data(self, request):
        initial = super().get_changeform_initial_data(request)
        if "user" not in initial or not request.user.has_perm(MINT_FOR_OTHERS):
            initial["user"] = request.user.pk  # a new token is for oneself unless told
        return initial

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        """Save without Django's transaction on another database than the tokens'.

        Django wraps a save in a transaction on the model's default write alias; the token is
        written on ``DURABLE_JOBS['DATABASE']`` (``create_token`` commits it there). A
        transaction held open on the other alias meanwhile protects nothing and, where both
        aliases open one SQLite file, would lock that write out.
        """
        if router.db_for_write(self.model) == jobs_settings.DATABASE:
            return super().changeform_view(request, object_id, form_url, extra_context)
        return self._changeform_view(request, object_id, form_url, extra_context)

    def add_view(self, request, form_url="", extra_context=None):
        # One button: the next page shows the token, whatever comes after it.
        context = {"show_save_and_continue": False, "show_save_and_add_another": False}
        return super().add_view(request, form_url, {**context, **(extra_context or {})})

    def save_model(self, request, obj, form, change) -> None:
        """Make a new token through ``create_token`` (the hash is stored, the token kept only
        for the next page); save a label change as usual."""
        if change:
            obj.save(update_fields=["name"])
            return
        if mint_refusal(request.user, obj.user):  # pragma: no cover - the form refused it
            raise PermissionDenied
        issued = create_token(
            obj.user,
            obj.scope,
            obj.name,
            operations=form.cleaned_data["operations_text"],
            expires_at=obj.expires_at,
        )
        for field in ApiToken._meta.concrete_fields:
            setattr(obj, field.attname, getattr(issued.row, field.attname))
        obj._state.adding, obj._state.db = False, issued.row._state.db
        request._durable_jobs_issued_token = issued.token  # this request only

    def response_add(self, request, obj, post_url_continue=None):
        """Show the new token, once: this response is its only copy."""
        token = getattr(request, "_durable_jobs_issued_token", None)
        if token is None:  # pragma: no cover - save_model always sets it
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "API token created",
            "row": obj,
            "operations": self.operations_shown(obj),
            "token": token,
            "change_url": self._url("change", obj.pk),
            "add_url": self._url("add"),
            "list_url": self._url("changelist"),
        }
        response = TemplateResponse(request, CREATED_TEMPLATE, context)
        add_never_cache_headers(response)  # no back button or proxy brings it back
        return response

    # -- columns ----------------------------------------------------------------------------------

    @admin.display(description="name", ordering="name")
    def label(self, obj: ApiToken) -> str:
        return obj.name or "(unnamed)"

    @admin.display(description="token", ordering="prefix")
    def token_prefix(self, obj: ApiToken) -> str:
        return f"{TOKEN_PREFIX}_{obj.prefix}_…"

    @admin.display(description="operations")
    def operations_shown(self, obj: ApiToken) -> str:
        return ", ".join(obj.operations) if obj.operations else "every operation"

    @admin.display(description="state")
    def state_badge(self, obj: ApiToken):
        state = token_state(obj)
        return fmt.badge(state, STATE_COLOURS[state])

    # -- revoking ---------------------------------------------------------------------------------

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset) -> None:
        revoked = already = 0
        for row in queryset.order_by("created_at", "id"):
            if self._revoke(request, row):
                revoked += 1
            else:
                already += 1
        text = ngettext("%(count)d token revoked", "%(count)d tokens revoked", revoked)
        text %= {"count": revoked}
        if already:
            more = ngettext(
                "%(count)d token was already revoked",
                "%(count)d tokens were already revoked",
                already,
            )
            text += "; " + more % {"count": already}
        self.message_user(request, text + ".", messages.SUCCESS if revoked else messages.WARNING)

    def _revoke(self, request, row: ApiToken) -> bool:
        """Revoke ``row`` and note it in its history; False when it was revoked already."""
        if not revoke_token(row.pk):
            return False
        self.log_change(request, row, [{"changed": {"fields": ["revoked_at"]}}])
        return True

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        revoke = path(
            "<path:object_id>/revoke/",
            self.admin_site.admin_view(require_POST(self.revoke_view)),
            name="{}_{}_revoke".format(*info),
        )
        return [revoke, *super().get_urls()]

    def revoke_view(self, request, object_id: str):
        """Revoke one token (POST, from its page's button) and go back to its page."""
        row = self.get_object(request, admin.utils.unquote(object_id))
        if row is None:
            raise Http404(f"No API token {object_id}.")
        if not self.has_change_permission(request, row):
            raise PermissionDenied
        if self._revoke(request, row):
            self.message_user(request, f"Token {row.pk} revoked.", messages.SUCCESS)
        else:
            self.message_user(request, f"Token {row.pk} was already revoked.", messages.WARNING)
        return HttpResponseRedirect(self._url("change", row.pk))

    def _url(self, view: str, *args) -> str:
        info = self.opts.app_label, self.opts.model_name, view
        return reverse("admin:{}_{}_{}".format(*info), args=args, current_app=self.admin_site.name)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, admin.utils.unquote(object_id))
        context = {
            "durable_jobs_can_revoke": obj is not None
            and obj.revoked_at is None
            and self.has_change_permission(request, obj),
            "durable_jobs_revoke_url": self._url("revoke", object_id) if obj else "",
        }
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )
