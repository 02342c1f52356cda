from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("email", models.EmailField(max_length=254)),
                ("total_cents", models.PositiveIntegerField()),
                ("receipt_sent", models.BooleanField(default=False)),
            ],
        ),
    ]
