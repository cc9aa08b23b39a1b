"""The Alembic environment, its versions and its alembic.ini, shipped as package data (see store/migrate.py)."""
