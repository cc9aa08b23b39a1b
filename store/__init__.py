"""The SQL store: tables, engines and sessions, the API's queries and the worker's row writes.

Imported by `service` (the API) and `workers` (the Celery task); imports neither. Its
schema is migrated by the Alembic environment in `migrations/` (shipped with the package).
"""
