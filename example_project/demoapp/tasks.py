"""Sample Django tasks (``@task``) of the example project; needs Django 6 (``django.tasks``).

With ``TASKS`` naming ``DurableJobsBackend`` (settings.py does so on Django 6), each call of
``.enqueue()`` stores a durable job whose operation is the task's path,
``demoapp.tasks.send_welcome_email``, and ``manage.py runjobs`` finds this module by itself.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.tasks import task


@task(max_attempts=3, idempotency_key=lambda user_id: f"welcome-{user_id}")
def send_welcome_email(user_id: int) -> dict:
    """Send a user the welcome e-mail; the key makes a second enqueue for them the same job.

    The demo's ``EMAIL_BACKEND`` prints the message on the worker's console.
    """
    user = get_user_model().objects.get(pk=user_id)
    send_mail(
        subject="Welcome to the durable jobs demo",
        message=f"Hello {user.get_username()}, your jobs are waiting in the admin.",
        from_email="demo@example.com",
        recipient_list=[user.email],
    )
    return {"user_id": user_id, "sent_to": user.email}
