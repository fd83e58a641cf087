"""The runs database: one ``runs`` table, SQLite by default, any SQLAlchemy URL (PostgreSQL for a team).

URL, in order: the ``--db`` option, the ``VRAMFIT_DB`` environment variable, then
``sqlite:///<platformdirs.user_data_dir("vramfit")>/runs.sqlite``. A bare file path means SQLite;
``postgresql://`` uses psycopg 3 when psycopg2 is not installed. The schema is created on first use.

Every write is one transaction: a run is stored whole or not at all, an import of many runs adds all
of them or none, and an interrupted write (exception, Ctrl-C, killed process) rolls back without
touching the runs stored before.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vramfit.errors import VramfitError
from vramfit.measure.record_schema import MAX_ID_CHARS, MAX_MODEL_CHARS
from vramfit.measure.records import RECORD_FIELDS, RecordError, RunRecord, validate

ENV_VAR = "VRAMFIT_DB"
_DENORMALISED = ("model", "method", "gpu_family")  # copies of record fields, for filtering in SQL
_JSON_COLUMNS = ("scenario", "environment", "estimate", "simulation", "details")
#: Runs written per INSERT during an import (all in one transaction): bounds the memory an import
#: holds, whatever the file's size.
IMPORT_BATCH = 500
#: Tries at creating the schema: processes that open a fresh database at the same moment race to
#: create the table; the losers see "already exists" (or a lock) and try again, finding it there.
CREATE_TRIES = 5


class DatabaseError(VramfitError):
    """The runs database cannot be opened or written."""


def default_url() -> str:
    from platformdirs import user_data_dir

    return f"sqlite:///{Path(user_data_dir('vramfit')) / 'runs.sqlite'}"


def resolve_url(url: str | None = None) -> str:
    """The database URL to use: ``url``, else ``$VRAMFIT_DB``, else the per-user SQLite file."""
    url = (url or os.environ.get(ENV_VAR) or "").strip() or default_url()
    if "://" not in url:  # a file path
        try:
            return f"sqlite:///{Path(url).expanduser().resolve()}"
        except (RuntimeError, OSError) as exc:  # ~nosuchuser/..., a path the OS refuses
            shown = url if len(url) <= 200 else url[:200] + "…"
            raise DatabaseError(f"cannot use the database path {shown}: {exc}") from None
    scheme, rest = url.split("://", 1)
    if scheme in ("postgresql", "postgres") and importlib.util.find_spec("psycopg2") is None:
        return f"postgresql+psycopg://{rest}"
    return url


def _table(metadata: Any) -> Any:
    from sqlalchemy import (
        JSON,
        BigInteger,
        Boolean,
        CheckConstraint,
        Column,
        Float,
        Integer,
        String,
        Table,
        Text,
    )

    return Table(
        "runs", metadata,
        Column("id", String(200), primary_key=True),
        Column("created_at", String(40), nullable=False, index=True),
        Column("source_id", String(200), nullable=False),
        Column("source", Text, nullable=False),
        Column("scenario", JSON, nullable=False),
        Column("environment", JSON, nullable=False),
        Column("status", String(16), nullable=False),
        Column("steps_done", Integer),
        Column("allocated_bytes", BigInteger),
        Column("reserved_bytes", BigInteger),
        Column("device_bytes", BigInteger),
        Column("unknown_bytes", BigInteger),
        Column("step_time_s", Float),
        Column("tokens_per_s", Float),
        Column("estimate", JSON),
        Column("simulation", JSON),
        Column("seq_exact", Boolean, nullable=False),
        Column("confidence", String(16), nullable=False),
        Column("notes", Text, nullable=False),
        Column("details", JSON, nullable=False),
        Column("model", String(500), index=True),
        Column("method", String(16)),
        Column("gpu_family", String(100)),
        CheckConstraint("status IN ('ok', 'oom', 'error')", name="runs_status"),
    )


class RunStore:
    """Runs in a database; every method opens its own transaction."""

    def __init__(self, url: str | None = None) -> None:
        self.url = resolve_url(url)
        self._engine: Any = None
        self._runs: Any = None
        self._has_table = False
        #: (run id, reason) of the stored rows the last read left out because they break the schema.
        self.bad_rows: list[tuple[str, str]] = []

    # ---------------------------------------------------------------------------------- plumbing
    def _sqlite_file(self) -> Path | None:
        """The SQLite file of the URL (None: another database, or in memory)."""
        scheme, _, rest = self.url.partition(":///")
        if not (scheme == "sqlite" or scheme.startswith("sqlite+")) or rest.split("?", 1)[0] in ("", ":memory:"):
            return None
        return Path(rest.split("?", 1)[0])

    def _ensure(self, create: bool = False) -> Any:
        """The engine; with ``create``, the file, its directory and the table are made if missing.
        Reading never creates anything: a SQLite file that does not exist is an error."""
        from sqlalchemy import MetaData, create_engine, inspect
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

        if self._engine is not None and (self._has_table or not create):
            try:  # a table another process created since the last look
                self._has_table = self._has_table or inspect(self._engine).has_table("runs")
            except SQLAlchemyError as exc:
                raise DatabaseError(f"cannot open the runs database {self.redacted_url}: {_short(exc)}") from None
            return self._engine
        path = self._sqlite_file()
        try:
            if path is not None and create:
                path.parent.mkdir(parents=True, exist_ok=True)
            elif path is not None and not path.is_file():
                raise DatabaseError(f"no runs database at {path}: nothing is stored there (`vramfit measure` "
                                    "or `vramfit runs import FILE` creates it)")
        except OSError as exc:
            raise DatabaseError(f"cannot open the runs database {self.redacted_url}: {exc.strerror or exc}") from None
        try:
            engine = self._engine or create_engine(self.url, future=True)
            metadata = MetaData()
            self._runs = _table(metadata)
            if create:
                _create_schema(metadata, engine)
            self._has_table = create or inspect(engine).has_table("runs")
        except (ArgumentError, NoSuchModuleError, ImportError, ValueError) as exc:
            raise DatabaseError(f"invalid database URL {self.redacted_url}: {_short(exc)}") from None
        except SQLAlchemyError as exc:
            raise DatabaseError(f"cannot open the runs database {self.redacted_url}: {_short(exc)}") from None
        self._engine = engine
        return engine

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file of the URL (None: another database, or in memory)."""
        return self._sqlite_file()

    @property
    def redacted_url(self) -> str:
        """The URL without its password."""
        try:
            from sqlalchemy.engine import make_url

            return make_url(self.url).render_as_string(hide_password=True)
        except Exception:
            return self.url.split("@")[-1]

    def _row(self, rec: RunRecord) -> dict[str, Any]:
        row = {k: getattr(rec, k) for k in RECORD_FIELDS}
        row["model"] = rec.model_name
        row["method"] = str(rec.scenario.get("method", ""))
        row["gpu_family"] = rec.gpu_family
        return row

    def _select(self) -> Any:
        """SELECT of every column, the JSON ones as their text (decoded by :meth:`_record`, so a row
        no reader can decode is reported, not raised by the driver)."""
        from sqlalchemy import Text, cast, select

        return select(*[cast(c, Text).label(c.name) if c.name in _JSON_COLUMNS else c for c in self._runs.c])

    @staticmethod
    def _record(row: Any) -> RunRecord | str:
        """The stored run, checked against the record schema; or why the row is unreadable."""
        data = dict(row._mapping)
        for key in _DENORMALISED:
            data.pop(key, None)
        try:
            for key in _JSON_COLUMNS:
                if data.get(key) is not None:
                    data[key] = json.loads(data[key])
            return validate(RunRecord(**data))
        except (RecordError, ValueError, TypeError, RecursionError) as exc:
            return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__

    def _good(self, rows: Iterable[Any]) -> list[RunRecord]:
        """The valid runs among ``rows``; the others go to :attr:`bad_rows`."""
        out = []
        for row in rows:
            rec = self._record(row)
            if isinstance(rec, str):
                self.bad_rows.append((str(row.id), rec))
            else:
                out.append(rec)
        return out

    def _write(self, func: Any) -> Any:
        from sqlalchemy.exc import SQLAlchemyError

        engine = self._ensure(create=True)
        try:
            with engine.begin() as conn:  # commit on success, roll back on any exception
                return func(conn)
        except SQLAlchemyError as exc:
            raise DatabaseError(f"writing to {self.redacted_url} failed (nothing was written): {_short(exc)}") from None

    # ---------------------------------------------------------------------------------- writes
    def add(self, rec: RunRecord) -> RunRecord:
        """Store one run (all of it, or nothing)."""
        validate(rec)
        self._write(lambda conn: conn.execute(self._runs.insert(), [self._row(rec)]))
        return rec

    def add_many(self, records: Iterable[RunRecord], checked: bool = False) -> tuple[int, int]:
        """Store runs in one transaction; runs already present with the same content are skipped.

        ``records`` may be a stream (:func:`vramfit.measure.records.iter_runs` over a file): it is
        consumed :data:`IMPORT_BATCH` runs at a time, so memory stays bounded. Returns (added,
        skipped). A run whose id exists with different content, or a bad record anywhere in the
        stream, is an error and nothing is written. ``checked``: the records were just validated
        (``iter_runs`` does), so they are not validated twice.
        """

        def write(conn: Any) -> tuple[int, int]:
            added = skipped = 0
            it = iter(records)
            while batch := [r if checked else validate(r) for r in itertools.islice(it, IMPORT_BATCH)]:
                known = self._stored(conn, [r.id for r in batch])
                new = []
                for rec in batch:
                    old = known.get(rec.id)
                    if old is None:
                        new.append(rec)
                        known[rec.id] = rec
                    elif isinstance(old, str):
                        raise RecordError(f"run {rec.id!r} is stored but unreadable ({old}); nothing was imported")
                    elif old.to_dict() != rec.to_dict():
                        raise RecordError(f"run {rec.id!r} is already stored (or given earlier in this import) with "
                                          "different content; nothing was imported")
                    else:
                        skipped += 1
                if new:
                    conn.execute(self._runs.insert(), [self._row(r) for r in new])
                    added += len(new)
            return added, skipped

        return self._write(write)

    def _stored(self, conn: Any, ids: list[str]) -> dict[str, RunRecord | str]:
        rows = conn.execute(self._select().where(self._runs.c.id.in_(ids)))
        return {row.id: self._record(row) for row in rows}

    def delete(self, run_id: str) -> bool:
        rec = self.get(run_id)
        return bool(self._write(lambda conn: conn.execute(
            self._runs.delete().where(self._runs.c.id == rec.id)).rowcount))

    # ---------------------------------------------------------------------------------- reads
    def _read(self, func: Any) -> Any:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self._ensure().connect() as conn:
                return func(conn)
        except SQLAlchemyError as exc:
            raise DatabaseError(f"reading {self.redacted_url} failed: {_short(exc)}") from None

    def get(self, run_id: str) -> RunRecord:
        """The run with this id, or the one run whose id starts with it."""
        self._ensure()
        shown = repr(run_id) if len(run_id) <= 60 else repr(run_id[:60]) + "…"
        if len(run_id) > MAX_ID_CHARS or not self._has_table:
            raise RecordError(f"no run with id {shown} in {self.redacted_url}")
        like = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

        def find(conn: Any) -> list[Any]:
            rows = conn.execute(self._select().where(self._runs.c.id == run_id)).all()
            return rows or conn.execute(self._select().where(self._runs.c.id.like(like, escape="\\")).limit(11)).all()

        rows = self._read(find)
        if not rows:
            raise RecordError(f"no run with id {shown} in {self.redacted_url}")
        if len(rows) > 1:
            listed = ", ".join(r.id for r in rows[:10])
            raise RecordError(f"{len(rows)}{'+' if len(rows) > 10 else ''} runs start with {shown}: {listed}")
        rec = self._record(rows[0])
        if isinstance(rec, str):
            raise RecordError(f"run {rows[0].id!r} is stored but invalid: {rec}")
        return rec

    def list(self, *, model: str | None = None, status: str | None = None, method: str | None = None,
             gpu: str | None = None, source_id: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Runs, newest first, filtered by model (substring), status, method, GPU family, source."""
        self.bad_rows = []
        t = self._ensure() and self._runs
        if not self._has_table or len(model or "") > MAX_MODEL_CHARS:  # no stored name is longer
            return []
        q = self._select()
        if model:
            q = q.where(t.c.model.contains(model, autoescape=True))
        if status:
            q = q.where(t.c.status == status)
        if method:
            q = q.where(t.c.method == method)
        if gpu:
            from vramfit.measure.env import gpu_family

            q = q.where(t.c.gpu_family == gpu_family(gpu))
        if source_id:
            q = q.where(t.c.source_id == source_id)
        q = q.order_by(t.c.created_at.desc(), t.c.id)
        if limit:
            q = q.limit(limit)
        return self._read(lambda conn: self._good(conn.execute(q)))

    def count(self) -> int:
        from sqlalchemy import func, select

        self._ensure()
        if not self._has_table:
            return 0
        return int(self._read(lambda conn: conn.execute(select(func.count()).select_from(self._runs)).scalar_one()))

    def prepare(self) -> None:
        """Open the database for writing now (create the file and table if missing)."""
        self._ensure(create=True)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
            self._has_table = False


def _create_schema(metadata: Any, engine: Any) -> None:
    """CREATE the table and indexes if missing, retrying a lost race (see :data:`CREATE_TRIES`)."""
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in range(CREATE_TRIES):
        try:
            metadata.create_all(engine)
            return
        except (OperationalError, ProgrammingError, IntegrityError):
            if attempt == CREATE_TRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
