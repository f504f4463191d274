from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durable_jobs", "0008_job_proposal_checked")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="operations",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
