"""Claims take turns across scopes: the claim index gains the scope after the status.

The new index is built before the old one is dropped, so claims always have one to read.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durable_jobs", "0009_apitoken_limits")]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                fields=["status", "scope", "-priority", "run_after", "created_at", "id"],
                name="durable_jobs_scope_claim_idx",
            ),
        ),
        migrations.RemoveIndex(model_name="job", name="durable_jobs_claim_idx"),
    ]
