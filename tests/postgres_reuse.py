"""Migrated PostgreSQL databases handed from test to test, emptied in between instead of re-created.

A `CREATE DATABASE … TEMPLATE` copies the whole template (its system catalogs too) through the
WAL: ~0.3 s of server CPU and ~0.5 s of a test's set-up each, and the DROP after it another
0.1–0.6 s (a checkpoint). tests/service has ~400 PostgreSQL tests, so a pytest process keeps
the databases its finished tests leave and empties one for the next test instead:

- the database must still have the template's schema: `schema(connection)` (every relation,
  column, constraint, index, sequence, type, function and trigger outside the system schemas,
  the database's own settings, and the rows of alembic_version) must equal the template's, else
  it is dropped (a test that migrated it up or down, or altered it, leaves no reusable database);
- every connection still open on it is ended (pg_terminate_backend, as DROP … WITH (FORCE) does);
- every table a test wrote (but alembic_version) is truncated, every sequence it drew from set back
  to its start, not yet called, as in the template; the planner statistics of the tables are
  deleted (a fresh copy has none).

Any error on the way drops the database: the next test then gets a fresh template copy. The
template itself has no rows but alembic_version's (checked once, when the pool is made). The
emptying runs on a thread while the next test runs on the other database of two, so a test waits
for neither a copy nor an emptying (only the first two tests of a process make their copies).
"""

from __future__ import annotations

from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy import Connection, create_engine, text

SCHEMA_QUERIES = (
    "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'",
    "SELECT table_schema, table_name, column_name, data_type, column_default, is_nullable"
    " FROM information_schema.columns WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
    " WHERE connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)",
    "SELECT indexdef FROM pg_indexes WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
    "SELECT t.typname, e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid",
    "SELECT p.proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc p"
    " WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)",
    "SELECT tgrelid::regclass::text, tgname FROM pg_trigger WHERE NOT tgisinternal",
    "SELECT setconfig FROM pg_db_role_setting WHERE setdatabase = (SELECT oid FROM pg_database"
    " WHERE datname = current_database())",
    "SELECT version_num FROM alembic_version",
)
USER_TABLES = (
    "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
    " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') AND tablename <> 'alembic_version'"
)
WRITTEN_TABLES = f"SELECT name FROM ({USER_TABLES}) AS tables (name) WHERE pg_relation_size(name) > 0"
"""The user tables whose heap is not empty: written since made or last truncated (a TRUNCATE
costs ~25 ms a table, so the ones a test never wrote keep their empty files)."""
RESTART_USED_SEQUENCES = (
    "SELECT setval(format('%I.%I', schemaname, sequencename), start_value, false) FROM pg_sequences"
    " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') AND last_value IS NOT NULL"
)
"""Every sequence a test drew from back at its start, not yet called, as in the template (setval rewrites no
file, where ALTER SEQUENCE … RESTART makes a new one)."""


def schema(connection: Connection) -> list[list[tuple]]:
    """The database's schema (and alembic revision) as sorted rows: equal for two databases of one schema."""
    return [sorted(tuple(map(str, row)) for row in connection.execute(text(query))) for query in SCHEMA_QUERIES]


def empty(connection: Connection) -> None:
    """Truncate every written user table but alembic_version, restart every used sequence, drop the statistics."""
    tables = connection.execute(text(WRITTEN_TABLES)).scalars().all()
    if tables:
        connection.execute(text(f"TRUNCATE {', '.join(tables)} CASCADE"))
    connection.execute(text(RESTART_USED_SEQUENCES))
    connection.execute(
        text(
            "DELETE FROM pg_statistic WHERE starelid IN (SELECT c.oid FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema'))"
        )
    )


def rows_outside_alembic(connection: Connection) -> int:
    """How many rows the user tables but alembic_version hold (the template must hold none)."""
    tables = connection.execute(text(USER_TABLES)).scalars().all()
    return sum(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in tables)


class ReusedDatabases:
    """Databases of one template that one pytest process reuses: `take()` → name, `give_back(name)`.

    `databases` is the caller's PostgresDatabases (tests/service/conftest.py): its `create(template)`,
    `drop(name)`, `url(name)` and AUTOCOMMIT `admin` engine. A given-back database is emptied (or dropped)
    on a thread of its own while the next test runs on another one, so `size` (2) databases take turns:
    `take()` makes a new copy only while fewer than `size` exist, and otherwise waits for one to be emptied.
    """

    def __init__(self, databases, template: str, size: int = 2) -> None:
        self.databases, self.template, self.size = databases, template, size
        self.ready: list[str] = []
        self.pending: list[Future[str | None]] = []
        self.alive = 0
        self.recycler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="postgres-reuse")
        engine = create_engine(databases.url(template))
        try:
            with engine.connect() as connection:
                self.template_schema = schema(connection)
                assert rows_outside_alembic(connection) == 0, "the template holds rows: emptying would not copy it"
        finally:
            engine.dispose()

    def take(self) -> str:
        while not self.ready:
            self._collect(wait=self.alive >= self.size and bool(self.pending))
            if not self.ready and (self.alive < self.size or not self.pending):
                self.alive += 1
                return self.databases.create(template=self.template)
        return self.ready.pop()

    def give_back(self, name: str) -> None:
        self.pending.append(self.recycler.submit(self._recycle, name))

    def close(self) -> None:
        self.recycler.shutdown(wait=True)
        self._collect(wait=False)
        while self.ready:
            self.databases.drop(self.ready.pop())

    def _collect(self, wait: bool) -> None:
        """Move the finished recyclings' databases to `ready` (after waiting for one when `wait`)."""
        if wait:
            futures.wait(self.pending, return_when=futures.FIRST_COMPLETED)
        for future in [future for future in self.pending if future.done()]:
            self.pending.remove(future)
            name = future.result()
            if name is None:
                self.alive -= 1
            else:
                self.ready.append(name)

    def _recycle(self, name: str) -> str | None:
        """`name` emptied, or None once it is dropped (its schema is no longer the template's, or emptying failed)."""
        if self._emptied(name):
            return name
        self.databases.drop(name)
        return None

    def _emptied(self, name: str) -> bool:
        """End the database's other connections; empty it if its schema is still the template's."""
        with self.databases.admin.connect() as admin:
            admin.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"), {"name": name}
            )
        engine = create_engine(self.databases.url(name))
        try:
            with engine.begin() as connection:
                connection.execute(text("SET LOCAL lock_timeout = '5s'"))
                if schema(connection) != self.template_schema:
                    return False
                empty(connection)
            return True
        except Exception:  # noqa: BLE001 - whatever failed, the database is dropped and the next test gets a copy
            return False
        finally:
            engine.dispose()
