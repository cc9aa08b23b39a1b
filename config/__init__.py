"""The one `Settings` object that the API, the worker and Alembic read (environment prefix NTKLAB_)."""
