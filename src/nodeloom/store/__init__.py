"""One module per aggregate: plain functions of a SQLAlchemy Core ``Connection``, run by
``Database.read`` / ``Database.write`` (db/engine.py); the caller's transaction commits."""

from typing import Any

# A result row: columns by attribute (``row.id``). SQLAlchemy types rows by their columns'
# tuple, which says nothing useful here.
Record = Any
