"""outbox for Django: an app (``INSTALLED_APPS``) and a ``django.tasks`` backend."""
