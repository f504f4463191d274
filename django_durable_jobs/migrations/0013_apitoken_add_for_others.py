from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("durable_jobs", "0012_schedules")]

    operations = [
        migrations.AlterModelOptions(
            name="apitoken",
            options={
                "ordering": ["created_at", "id"],
                "permissions": [("add_apitoken_for_others", "Can add API token for another user")],
                "verbose_name": "API token",
            },
        ),
    ]
