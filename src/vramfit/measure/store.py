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
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vramfit.errors import VramfitError
from vramfit.measure.records import RECORD_FIELDS, RecordError, RunRecord, validate

ENV_VAR = "VRAMFIT_DB"
_DENORMALISED = ("model", "method", "gpu_family")  # copies of record fields, for filtering in SQL


class DatabaseError(VramfitError):
    """The runs database cannot be opened or written."""


def default_url() -> str:
    from platformdirs import user_data_dir

    return f"sqlite:///{Path(user_data_dir('vramfit')) / 'runs.sqlite'}"


def resolve_url(url: str | None = None) -> str:
    """The database URL to use: ``url``, else ``$VRAMFIT_DB``, else the per-user SQLite file."""
    url = (url or os.environ.get(ENV_VAR) or "").strip() or default_url()
    if "://" not in url:  # a file path
        return f"sqlite:///{Path(url).expanduser().resolve()}"
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

    # ---------------------------------------------------------------------------------- plumbing
    def _ensure(self) -> Any:
        if self._engine is not None:
            return self._engine
        from sqlalchemy import MetaData, create_engine
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

        if self.url.startswith("sqlite:///") and self.url != "sqlite:///:memory:":
            try:
                Path(self.url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DatabaseError(f"cannot open the runs database {self.redacted_url}: {exc}") from None
        try:
            engine = create_engine(self.url, future=True)
            metadata = MetaData()
            self._runs = _table(metadata)
            metadata.create_all(engine)
        except (ArgumentError, NoSuchModuleError, ImportError) as exc:
            raise DatabaseError(f"invalid database URL {self.redacted_url}: {exc}") from None
        except SQLAlchemyError as exc:
            raise DatabaseError(f"cannot open the runs database {self.redacted_url}: {_short(exc)}") from None
        self._engine = engine
        return engine

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

    @staticmethod
    def _record(row: Any) -> RunRecord:
        data = dict(row._mapping)
        for key in _DENORMALISED:
            data.pop(key, None)
        return RunRecord(**data)

    def _write(self, func: Any) -> Any:
        from sqlalchemy.exc import SQLAlchemyError

        engine = self._ensure()
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

    def add_many(self, records: Iterable[RunRecord]) -> tuple[int, int]:
        """Store runs in one transaction; runs already present with the same content are skipped.

        Returns (added, skipped). A run whose id exists with different content is an error and
        nothing is written.
        """
        recs = [validate(r) for r in records]

        def write(conn: Any) -> tuple[int, int]:
            from sqlalchemy import select

            existing: dict[str, RunRecord] = {}
            ids = [r.id for r in recs]
            for i in range(0, len(ids), 500):
                rows = conn.execute(select(self._runs).where(self._runs.c.id.in_(ids[i:i + 500])))
                existing.update({row.id: self._record(row) for row in rows})
            new = []
            for rec in recs:
                old = existing.get(rec.id)
                if old is None:
                    new.append(rec)
                elif old.to_dict() != rec.to_dict():
                    raise RecordError(f"run {rec.id!r} is already stored with different content; nothing was imported")
            if new:
                conn.execute(self._runs.insert(), [self._row(r) for r in new])
            return len(new), len(recs) - len(new)

        return self._write(write)

    def delete(self, run_id: str) -> bool:
        rec = self.get(run_id)
        return bool(self._write(lambda conn: conn.execute(
            self._runs.delete().where(self._runs.c.id == rec.id)).rowcount))

    # ---------------------------------------------------------------------------------- reads
    def get(self, run_id: str) -> RunRecord:
        """The run with this id, or the one run whose id starts with it."""
        from sqlalchemy import select

        engine = self._ensure()
        with engine.connect() as conn:
            row = conn.execute(select(self._runs).where(self._runs.c.id == run_id)).first()
            if row is not None:
                return self._record(row)
            like = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = conn.execute(select(self._runs).where(self._runs.c.id.like(like, escape="\\")).limit(11)).all()
        if not rows:
            raise RecordError(f"no run with id {run_id!r} in {self.redacted_url}")
        if len(rows) > 1:
            listed = ", ".join(r.id for r in rows[:10])
            raise RecordError(f"{len(rows)}{'+' if len(rows) > 10 else ''} runs start with {run_id!r}: {listed}")
        return self._record(rows[0])

    def list(self, *, model: str | None = None, status: str | None = None, method: str | None = None,
             gpu: str | None = None, source_id: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Runs, newest first, filtered by model (substring), status, method, GPU family, source."""
        from sqlalchemy import select

        t = self._ensure() and self._runs
        q = select(t)
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
        with self._engine.connect() as conn:
            return [self._record(r) for r in conn.execute(q)]

    def count(self) -> int:
        from sqlalchemy import func, select

        self._ensure()
        with self._engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(self._runs)).scalar_one())

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
