"""Who may make an API token acting as whom: the rule of the token admin's add form.

A token acts as its user, so nobody may make one that reaches further than they do: oneself
always; another user only with ``add_apitoken_for_others``, and then only an active user whose
every permission the maker holds too (staff only by staff, a superuser only by a superuser).
"""

from __future__ import annotations

from django import forms
from django.utils.html import format_html

MINT_FOR_OTHERS = "durable_jobs.add_apitoken_for_others"
MINT_FOR_OTHERS_NAME = "Can add API token for another user"


def mint_refusal(minter, user) -> str | None:
    """Return why ``minter`` may not make a token acting as ``user``, or None when they may.

    Oneself, always; another user only with ``add_apitoken_for_others``, and then only an active
    one (an inactive user's permissions read as none, yet come back with them) whose permissions
    are all the minter's too, staff only by staff, a superuser only by a superuser.
    """
    if user.pk == minter.pk:
        return None
    you = minter.get_username()
    if not minter.has_perm(MINT_FOR_OTHERS):
        return (
            f"You may create a token only for yourself ({you}). A token for another user needs "
            f"the permission \u201c{MINT_FOR_OTHERS_NAME}\u201d ({MINT_FOR_OTHERS}); ask an "
            "administrator to grant it, or to create the token."
        )
    them = user.get_username()
    if not user.is_active:
        return (
            f"{them} is inactive: a token of theirs would come to life with all their permissions "
            "the day they are reactivated. Reactivate them first, or create it for someone else."
        )
    if minter.is_superuser:
        return None
    if user.is_superuser:
        return (
            f"{them} is a superuser: only a superuser may create a token for a superuser. "
            "Ask one to create it."
        )
    if user.is_staff and not minter.is_staff:
        return f"{them} is staff and you are not: ask a staff member to create the token."
    missing = sorted(user.get_all_permissions() - minter.get_all_permissions())
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        shown = ", ".join(missing[:5]) + more
        return (
            f"{them} holds permissions you do not ({shown}): their token would let its holder do "
            "what you cannot. Create it for a user whose permissions are all yours, or ask "
            "someone who holds theirs."
        )
    return None


class OneselfWidget(forms.HiddenInput):
    """The requesting user, shown as text: the only user they may make a token for."""

    is_hidden = False  # a labelled row that says who the token will act as

    def __init__(self, user, attrs=None) -> None:
        super().__init__(attrs)
        self.user = user

    def render(self, name, value, attrs=None, renderer=None):
        sent = super().render(name, self.user.pk, attrs, renderer)
        return format_html('{}<div class="readonly">{}</div>', sent, self.user.get_username())
