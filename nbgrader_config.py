"""nbgrader's settings for this course: every `nbgrader` command run in the course root reads this file.

autograd-course passes the same settings to nbgrader itself (course/term/nbgrader_bridge.py); keep them equal
(tests/test_term.py checks the course id against source/course.yaml).
"""

import os
import sys

c = get_config()  # noqa: F821 - nbgrader provides get_config when it loads this file

# nbgrader's first opening of a course's gradebook runs `alembic` from PATH: put the bin folder of the Python that runs
# nbgrader (the venv's) first, so that `.venv/bin/nbgrader collect ...` works without an activated venv, as the
# README's commands run it (else: "FileNotFoundError: ... 'alembic'", and a gradebook.db without its version table).
_bin, _path = os.path.dirname(sys.executable), os.environ.get("PATH", "")
if _bin not in _path.split(os.pathsep):  # (this file may be read more than once in a process)
    os.environ["PATH"] = os.pathsep.join(filter(None, (_bin, _path)))

# The course id of the exchange (release_assignment, collect, release_feedback); course_id in source/course.yaml.
c.CourseDirectory.course_id = "autograd-course"
# Where the exchange lives: nbgrader's default; a JupyterHub deployment usually keeps it.
c.Exchange.root = "/srv/nbgrader/exchange"
# Solution regions become nothing: each answer cell keeps its `name = ...` template lines.
c.ClearSolutions.code_stub = {"python": ""}
