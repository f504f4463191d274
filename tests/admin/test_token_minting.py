"""Who may create an API token for whom, and that the stored hash is no filter.

Proves, for every combination of the token permissions the admin offers (``view_apitoken``,
``add_apitoken``, ``add_apitoken_for_others``, ``change_apitoken``) held by a staff user, and for
a superuser and a user who is not staff, minting for oneself, for a weaker user, for one with the
same permissions, for a stronger one (directly or through a group), for a superuser and for an
inactive user: a token is made only for oneself unless the maker holds
``add_apitoken_for_others``, and then never for a user holding a permission the maker lacks (a
superuser only by a superuser); a refusal is a 403, a login page or a form error that says what
to do, with every token row and history entry as it was; a minted token's user never holds more
than its maker. The add form offers the user field only to those who may mint for others and
names the requesting user otherwise. Every lookup on ``token_hash`` (a prefix oracle), from the
token list or through a relation from the user list, is refused with 400; ordering cannot reach
it either.
"""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.admin.minting import mint_refusal
from django_durable_jobs.models import ApiToken
from tests.admin.test_tokens import ADD, LIST, TOKEN_RE, create, tokens_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.urls")]

User = get_user_model()
TOKEN_PERMS = ("view_apitoken", "add_apitoken", "add_apitoken_for_others", "change_apitoken")
# A permission no minter of the matrix holds: whoever holds it is stronger than they are.
EXTRA = "retry_job"
TARGETS = ("self", "nobody", "equal", "stronger", "stronger-by-group", "superuser", "inactive")
ONLY_YOURSELF = "You may create a token only for yourself"
REFUSALS = {
    "stronger": "holds permissions you do not (durable_jobs.retry_job)",
    "stronger-by-group": "holds permissions you do not (durable_jobs.retry_job)",
    "superuser": "only a superuser may create a token for a superuser",
    "inactive": "is inactive",
}


def person(username: str, codenames=(), *, group: str | None = None, **flags):
    """Return a user holding ``codenames`` of this app (through ``group`` when named), fresh."""
    user = User.objects.create_user(username, password="pw", **flags)
    perms = Permission.objects.filter(
        content_type__app_label="durable_jobs", codename__in=codenames
    )
    assert perms.count() == len(set(codenames)), codenames
    if group is None:
        user.user_permissions.set(perms)
    else:
        holder = Group.objects.create(name=group)
        holder.permissions.set(perms)
        user.groups.add(holder)
    return User.objects.get(pk=user.pk)  # no stale permission cache


def target_for(kind: str, minter, codenames: tuple[str, ...]):
    """Return the user a token is asked for: ``kind`` relative to ``minter``'s ``codenames``."""
    if kind == "self":
        return minter
    if kind == "nobody":
        return person("nobody")
    if kind == "equal":
        return person("twin", codenames, is_staff=True)
    if kind == "stronger":
        return person("boss", (*codenames, EXTRA))
    if kind == "stronger-by-group":
        return person("member", (*codenames, EXTRA), group="retriers")
    if kind == "superuser":
        return User.objects.create_superuser("root2", "root2@example.com", "pw")
    assert kind == "inactive"
    return person("gone", (*codenames, EXTRA), is_active=False)


def within(minter, user) -> bool:
    """Return True when ``user`` holds nothing ``minter`` lacks (read fresh from the database)."""
    minter, user = User.objects.get(pk=minter.pk), User.objects.get(pk=user.pk)
    if minter.is_superuser:
        return True
    return not user.is_superuser and user.get_all_permissions() <= minter.get_all_permissions()


def expected(codenames, superuser: bool, staff: bool, kind: str):
    """Return ``("made", None)``, or how the attempt is refused and with which words."""
    if not staff:
        return "login", None
    if not superuser and "add_apitoken" not in codenames:
        return "forbidden", None
    if kind == "self":
        return "made", None
    if not superuser and "add_apitoken_for_others" not in codenames:
        return "form", ONLY_YOURSELF
    if kind == "inactive":  # a superuser neither: the token would wake with the account
        return "form", REFUSALS[kind]
    if superuser:
        return "made", None
    if kind in REFUSALS:
        return "form", REFUSALS[kind]
    return "made", None


def subsets(names):
    return [c for n in range(len(names) + 1) for c in itertools.combinations(names, n)]


MATRIX = [
    pytest.param(codenames, False, True, kind, id=f"staff[{'+'.join(codenames) or '-'}]-{kind}")
    for codenames, kind in itertools.product(subsets(TOKEN_PERMS), TARGETS)
]
MATRIX += [pytest.param((), True, True, kind, id=f"superuser-{kind}") for kind in TARGETS]
MATRIX += [
    pytest.param(TOKEN_PERMS, False, False, kind, id=f"not-staff[all]-{kind}")
    for kind in ("self", "nobody")
]


@pytest.mark.parametrize(("codenames", "superuser", "staff", "kind"), MATRIX)
def test_every_permission_combination_mints_only_within_the_minters_reach(
    client, codenames, superuser, staff, kind
):
    minter = person("minter", codenames, is_staff=staff, is_superuser=superuser)
    target = target_for(kind, minter, codenames)
    client.force_login(minter)
    outcome, words = expected(codenames, superuser, staff, kind)
    before = tokens_state()
    response = create(client, target, scope="red")
    html = response.content.decode()
    if outcome == "made":
        assert response.status_code == 200, html
        assert "cannot be shown again" in html
        (row,) = ApiToken.objects.all()
        assert (row.user_id, row.scope) == (target.pk, "red")
        assert within(minter, row.user)
        return
    assert TOKEN_RE.search(html) is None
    assert tokens_state() == before  # a refusal writes nothing, not even history
    if outcome == "login":
        assert response.status_code == 302 and "/login/" in response["Location"]
    elif outcome == "forbidden":
        assert response.status_code == 403
    else:
        assert response.status_code == 200
        assert "errornote" in html
        assert words in html.replace("&#x27;", "'"), html


def test_no_minted_token_reaches_further_than_its_minter(client):
    """Every user a delegated minter can make a token for holds nothing the minter lacks."""
    minter = person(
        "lead",
        ("view_apitoken", "add_apitoken", "add_apitoken_for_others", "view_job"),
        is_staff=True,
    )
    client.force_login(minter)
    candidates = [
        person("clerk", ("view_job",)),
        person("peer", ("view_job", "add_apitoken"), is_staff=True),
        person("writer", ("view_job", "add_job")),
        person("grouped", ("cancel_job",), group="cancellers"),
        User.objects.create_superuser("boss", "boss@example.com", "pw"),
        person("idle", (), is_active=False),
    ]
    for user in candidates:
        create(client, user, name=user.username)
    made = {row.user.username for row in ApiToken.objects.select_related("user")}
    assert made == {"clerk", "peer"}
    for row in ApiToken.objects.all():
        assert within(minter, row.user)


@pytest.mark.parametrize("codenames", [(), ("view_job",), TOKEN_PERMS])
def test_the_rule_itself_is_a_subset_of_the_minters_permissions(codenames):
    minter = person("minter", (*codenames, "add_apitoken_for_others"), is_staff=True)
    assert mint_refusal(minter, minter) is None
    assert mint_refusal(minter, person("same", (*codenames, "add_apitoken_for_others"))) is None
    stronger = person("more", (*codenames, EXTRA))
    assert "durable_jobs.retry_job" in mint_refusal(minter, stronger)
    staff = person("staffer", codenames, is_staff=True)
    plain = person("plain", ("add_apitoken_for_others",))
    assert (
        mint_refusal(plain, staff)
        == "staffer is staff and you are not: ask a staff member to create the token."
    )


def test_the_form_names_the_requesting_user_when_they_may_mint_only_for_themselves(client):
    minter = person("ops", ("view_apitoken", "add_apitoken"), is_staff=True)
    other = person("other")
    client.force_login(minter)
    for url in (ADD, f"{ADD}?user={other.pk}"):
        html = client.get(url).content.decode()
        assert f'type="hidden" name="user" value="{minter.pk}"' in html, url
        assert '<div class="readonly">ops</div>' in html
        assert "you may create tokens only for yourself" in html
        assert "related-lookup" not in html  # no picker: there is nobody else to pick
    response = create(client, minter, scope="red")
    assert ApiToken.objects.get().user == minter and response.status_code == 200


@pytest.mark.parametrize("sent", ["abc", "999999", "", "1 OR 1=1"])
def test_a_malformed_user_is_a_form_error(client, sent):
    client.force_login(person("ops", ("view_apitoken", "add_apitoken"), is_staff=True))
    before = tokens_state()
    response = client.post(
        ADD, {"user": sent, "scope": "red", "expires_at_0": "", "expires_at_1": ""}
    )
    assert response.status_code == 200
    assert "errornote" in response.content.decode()
    assert tokens_state() == before


def test_a_delegated_minter_is_offered_any_user_and_starts_from_themselves(client):
    minter = person(
        "lead", ("view_apitoken", "add_apitoken", "add_apitoken_for_others"), is_staff=True
    )
    client.force_login(minter)
    html = client.get(ADD).content.decode()
    assert f'name="user" value="{minter.pk}"' in html
    assert 'class="vForeignKeyRawIdAdminField"' in html
    assert "an active user whose every permission you hold too" in html


# -- the hash is no filter ------------------------------------------------------------------------


@pytest.fixture
def issued(root):
    owner = User.objects.get(username="root")
    create(root, owner, name="one")
    create(root, owner, name="two")
    return list(ApiToken.objects.order_by("id"))


@pytest.mark.parametrize(
    "lookup",
    [
        "token_hash__startswith",
        "token_hash__istartswith",
        "token_hash",
        "token_hash__exact",
        "token_hash__gte",
        "token_hash__regex",
        "token_hash__contains",
        "token_hash__in",
        "token_hash__isnull",
        "user__durable_jobs_api_tokens__token_hash__startswith",
    ],
)
def test_every_lookup_on_the_hash_is_refused(root, issued, lookup):
    value = "False" if lookup.endswith("isnull") else issued[0].token_hash[:1]
    before = tokens_state()
    response = root.get(LIST, {lookup: value})
    assert response.status_code == 400, lookup
    assert issued[0].token_hash not in response.content.decode()
    assert tokens_state() == before


def test_the_user_list_cannot_reach_the_hash_either(root, issued):
    prefix = issued[0].token_hash[:1]
    url = "/admin/auth/user/"
    assert (
        root.get(url, {"durable_jobs_api_tokens__token_hash__startswith": prefix}).status_code
        == 400
    )
    assert root.get(LIST, {"_to_field": "token_hash"}).status_code == 400


@pytest.mark.parametrize("order", ["token_hash", "-token_hash", "0.token_hash", "99", "-1"])
def test_the_list_cannot_be_ordered_by_the_hash(root, issued, order):
    with CaptureQueriesContext(connection) as queries:
        response = root.get(LIST, {"o": order})
    assert response.status_code == 200
    orderings = [q["sql"].rpartition("ORDER BY")[2] for q in queries if "ORDER BY" in q["sql"]]
    assert orderings and not any("token_hash" in clause for clause in orderings), orderings
    for row in issued:
        assert row.token_hash not in response.content.decode()


def test_the_other_filters_still_work(root, issued):
    response = root.get(LIST, {"scope__exact": "red", "state": "active"})
    assert response.status_code == 200
    assert response.context["cl"].result_count == 2
