"""Every clause of the actions' messages agrees with its count: one job, or two.

Pure functions of the store's answers (no database): each clause is asked for with one row and
with two, and must read as English in both.
"""

from __future__ import annotations

import uuid

import pytest

from django_durable_jobs.admin.actions import cancellation_messages, retry_messages
from django_durable_jobs.rules.errors import NotReclaimable
from django_durable_jobs.rules.values import RequestResult
from django_durable_jobs.rules.vocabulary import RequestAnswer

IDS = [uuid.UUID(int=n) for n in range(1, 5)]


def _summary(word, *answers) -> str:
    answered = [
        (IDS[n], RequestResult(a, None) if isinstance(a, RequestAnswer) else a)
        for n, a in enumerate(answers)
    ]
    return word(answered)[0][1]


@pytest.mark.parametrize(
    ("word", "answer", "one", "two"),
    [
        (
            cancellation_messages,
            RequestAnswer.CANCELLED_NOW,
            "1 cancellation request recorded; 1 pending job was cancelled at once",
            "2 cancellation requests recorded; 2 pending jobs were cancelled at once",
        ),
        (
            cancellation_messages,
            RequestAnswer.REQUESTED,
            "1 cancellation request recorded; 1 running job will stop when the owner sees the "
            "request",
            "2 cancellation requests recorded; 2 running jobs will stop when the owner sees the "
            "request",
        ),
        (
            cancellation_messages,
            RequestAnswer.ALREADY_ENDED,
            "0 cancellation requests recorded; 1 job was already finished and kept its result",
            "0 cancellation requests recorded; 2 jobs were already finished and kept their results",
        ),
        (
            retry_messages,
            RequestAnswer.REQUESTED,
            "1 retry request recorded",
            "2 retry requests recorded",
        ),
        (
            retry_messages,
            RequestAnswer.NOT_ENDED,
            "0 retry requests recorded; 1 job has not ended yet and needs no retry",
            "0 retry requests recorded; 2 jobs have not ended yet and need no retry",
        ),
        (
            retry_messages,
            NotReclaimable("it is complete"),
            "0 retry requests recorded; 1 retry was refused.",
            "0 retry requests recorded; 2 retries were refused.",
        ),
    ],
)
def test_each_clause_is_singular_for_one_job_and_plural_for_two(word, answer, one, two):
    assert _summary(word, answer).startswith(one)
    assert _summary(word, answer, answer).startswith(two)


def test_no_message_says_their_of_a_single_job():
    answers = [
        RequestAnswer.CANCELLED_NOW,
        RequestAnswer.REQUESTED,
        RequestAnswer.ALREADY_ENDED,
        RequestAnswer.NOT_ENDED,
    ]
    for answer in answers:
        for word in (cancellation_messages, retry_messages):
            text = _summary(word, answer)
            assert "their" not in text and "need no" not in text, text
