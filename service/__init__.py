"""The ntklab HTTP service: FastAPI routes over a SQL store, enqueueing Celery jobs."""
