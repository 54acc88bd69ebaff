"""nbgrader's settings for this course: every `nbgrader` command run in the course root reads this file.

autograd-course passes the same settings to nbgrader itself (course/nbgrader_bridge.py); keep them equal
(tests/test_term.py checks the course id against source/course.yaml).
"""

c = get_config()  # noqa: F821 - nbgrader provides get_config when it loads this file

# The course id of the exchange (release_assignment, collect, release_feedback); course_id in source/course.yaml.
c.CourseDirectory.course_id = "autograd-course"
# Where the exchange lives: nbgrader's default; a JupyterHub deployment usually keeps it.
c.Exchange.root = "/srv/nbgrader/exchange"
# Solution regions become nothing: each answer cell keeps its `name = ...` template lines.
c.ClearSolutions.code_stub = {"python": ""}
