"""What became of one student's submission: the one set of status words every writer and reader shares.

The values are written as they are to grades CSVs, feedback.json, nbgrader's gradebook, the service's database and
Gradescope's results, so they never change. This module sits at the bottom of the package: it imports nothing of
`course`, so any module can use it. A status read back (a CSV row, a shard record, a database row) is input:
`Status.read(value)` raises ValueError for anything else, and the reader says where and what to do.
"""

from __future__ import annotations

from enum import StrEnum, unique

__all__ = ["GRADING_GIVES", "RAN", "SCORED", "Status"]


@unique
class Status(StrEnum):
    """What became of one student's submission of one assignment."""

    GRADED = "graded"
    """The notebook was read and run to its end: its score is the student's."""
    TIMED_OUT = "timed_out"
    """The notebook was read and run, and hit a time limit: the answers computed before it are scored, and the
    feedback says which limit. A notebook's content can cause this, so it is the student's, a score with a sentence."""
    FAILED = "failed"
    """The notebook could not be read (not a notebook, damaged, another assignment's): score 0, with the sentence
    saying why. Its content caused it, so it is the student's."""
    AUTOGRADER_ERROR = "autograder_error"
    """Our machinery failed (a sandbox that never reached `ready`, a file the grader may not read, a database, a
    disk): no grade at all, never a 0; the student need not resubmit, it uses up no attempt and the LMS keeps what
    it had. Only our machinery makes one: nothing a notebook contains can."""
    MISSING = "missing"
    """On the roster with nothing submitted: a grades row the LMS export gives 0 at the end of a term (or leaves
    the LMS's cell as it is while work may still come). Never something grading gives a submission."""

    @classmethod
    def read(cls, value: object) -> Status:
        """The status a value read back (a CSV cell, a JSON field, a database column) names, or ValueError: any
        other word, a number or nothing is not a status, and the reader says where it found it."""
        if isinstance(value, str):
            return cls(value)
        raise ValueError(f"{value!r} is not a status")


# What grading one submission can give (a shard's record holds one of these, never `missing`).
GRADING_GIVES = (Status.GRADED, Status.TIMED_OUT, Status.FAILED, Status.AUTOGRADER_ERROR)
# Statuses that carry a score for the LMS: the student's work was judged, even if to 0.
SCORED = (Status.GRADED, Status.TIMED_OUT, Status.FAILED)
# Notebooks that were read and run: their scores are the class's statistics.
RAN = (Status.GRADED, Status.TIMED_OUT)
