"""A service.db as an earlier commit's code made it, dumped as SQL (service-<commit>.sql beside this file).

git worktree add --detach /tmp/old b99931e
PYTHONPATH=/tmp/old python tests/service/databases/make_old_database.py b99931e serve > service-b99931e.sql
(with `tokens` instead of `serve`: the tables of `serve tokens` alone, without the shared queue's)
"""

import importlib
import sqlite3
import sys
import tempfile
from pathlib import Path

from course.service.policy import ServicePolicy
from course.service.store import Store

tag, shared = sys.argv[1], sys.argv[2] == "serve"
if shared:  # serve imports it (worker.py): its tables join the store's metadata, and create_all makes them
    importlib.import_module("course.service.shared")

path = Path(tempfile.mkdtemp()) / f"{tag}.db"
path.unlink(missing_ok=True)
store = Store(f"sqlite:///{path}")
store.set_student("alice", f"{tag}-alice-token", {"lms_id": "101"})
store.set_student("bob", f"{tag}-bob-token", {"lms_id": "102"})
store.add_instructor(f"{tag}-instructor-token")
attempt = store.submit(
    "alice", "autograd", b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', ServicePolicy()
)
claimed = store.claim_next()
assert claimed is not None
store.record(
    attempt.id,
    status="graded",
    score=41.5,
    raw_score=41.5,
    late_penalty=0.0,
    max_score=57.0,
    feedback={"score": 41.5},
    integrity=[],
    seconds=1.25,
)
store.submit(
    "alice",
    "autograd",
    b'{"cells": [1], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',
    ServicePolicy(cooldown_minutes=0) if "cooldown_minutes" in ServicePolicy.__dataclass_fields__ else ServicePolicy(),
)
if hasattr(store, "revoke_students"):
    store.revoke_students(["bob"])
store.secret("csrf")
store.close()
db = sqlite3.connect(path)
print("\n".join(db.iterdump()))
