"""course.term.nbgrader_bridge: nbgrader's gradebook, created in this process without its `alembic heads` subprocess and
stamped with the same migration head that subprocess prints."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbgrader.api
import pytest
from nbgrader.dbutil import _temp_alembic_ini
from sqlalchemy import create_engine, text

from course.term.nbgrader_bridge import nbgrader_migration_head, open_gradebook


def test_the_in_process_head_is_the_one_alembic_heads_prints():
    alembic = Path(sys.executable).parent / "alembic"
    with _temp_alembic_ini("sqlite:////nonexistent/gradebook.db") as ini:
        printed = subprocess.run(
            [str(alembic), "-c", ini, "heads"], capture_output=True, text=True, check=True, timeout=300
        ).stdout
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


def _deep_runtime_dir(tmp_path: Path) -> Path:
    deep = tmp_path.joinpath(*["a-folder-of-a-deep-home"] * 6)
    assert len(str(deep)) > 120  # deeper than a unix socket's path can be
    return deep


def test_the_kernels_sockets_fit_a_unix_socket_under_a_deep_runtime_folder(tmp_path, monkeypatch):
    import stat

    from course.term.nbgrader_bridge import MAX_SOCKET_PREFIX, kernel_socket_prefix

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(_deep_runtime_dir(tmp_path)))
    prefix = Path(kernel_socket_prefix())
    assert len(str(prefix)) <= MAX_SOCKET_PREFIX
    assert stat.S_IMODE(prefix.parent.stat().st_mode) == 0o700  # a private folder, as the runtime folder is
    short = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    try:
        monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(short))
        assert Path(kernel_socket_prefix()).parent == short  # a short one is used as it is
    finally:
        shutil.rmtree(short)


@pytest.mark.slow
def test_a_kernel_starts_and_answers_under_a_deep_runtime_folder(tmp_path, monkeypatch):
    """Seen: `autograd-course release` with a long HOME failed with a traceback, "File name too long"."""
    from jupyter_client.manager import KernelManager

    from course.term.nbgrader_bridge import nbgrader_config

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(_deep_runtime_dir(tmp_path)))
    settings = nbgrader_config(tmp_path, f"sqlite:///{tmp_path / 'gradebook.db'}").KernelManager
    manager = KernelManager(transport=settings.transport, ip=settings.ip)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        reply = client.execute_interactive("6 * 7", timeout=120)
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
