"""The revisions of the service's database, one file each (alembic reads them by path: see ../__init__.py)."""
