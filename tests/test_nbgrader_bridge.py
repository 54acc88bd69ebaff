"""course.nbgrader_bridge: nbgrader's gradebook, created in this process without its `alembic heads` subprocess and
stamped with the same migration head that subprocess prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbgrader.api
from nbgrader.dbutil import _temp_alembic_ini
from sqlalchemy import create_engine, text

from course.nbgrader_bridge import nbgrader_migration_head, open_gradebook


def test_the_in_process_head_is_the_one_alembic_heads_prints():
    alembic = Path(sys.executable).parent / "alembic"
    with _temp_alembic_ini("sqlite:////nonexistent/gradebook.db") as ini:
        printed = subprocess.run([str(alembic), "-c", ini, "heads"], capture_output=True, text=True, check=True,
                                 timeout=300).stdout
    assert nbgrader_migration_head() == printed.split("\n")[0].split(" ")[0] != ""


def test_a_new_gradebook_is_stamped_with_that_head_without_a_subprocess(tmp_path, monkeypatch):
    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args}")

    monkeypatch.setattr(nbgrader.api.sp, "check_output", no_subprocess)
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with open_gradebook(db_url) as gradebook:
        gradebook.add_student("ana")
    engine = create_engine(db_url)
    with engine.connect() as connection:
        stamped = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    engine.dispose()
    assert stamped == [nbgrader_migration_head()]
