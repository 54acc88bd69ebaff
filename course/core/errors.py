"""The one family of errors the core raises; the CLI shows str(error) and never a traceback."""

from __future__ import annotations


class CourseError(Exception):
    """Something the user can fix: the message says what, where, and what to do."""


class ConfigError(CourseError):
    """The course YAML is missing, unreadable, or has a missing or mistyped key."""


class SourceNotebookError(CourseError):
    """The instructor's source notebook breaks the course's cell conventions."""


class ReleaseError(CourseError):
    """nbgrader could not generate the release, or the release is not sound."""


class SubmissionError(CourseError):
    """A submitted notebook cannot be read (not JSON, not nbformat 4, too large, ...)."""


class NotThisAssignment(SubmissionError):
    """The notebook holds none of the assignment's answer cells; `answer_ids`: the answer cells it does hold (those
    of another assignment of the course, when it is one: `submission.other_assignment`)."""

    def __init__(self, message: str, answer_ids: frozenset[str]) -> None:
        super().__init__(message)
        self.answer_ids = answer_ids


class UnreadableSubmission(SubmissionError):
    """The submitted file is where it should be, but the grader cannot read it as a regular file: its permissions,
    a symbolic link, a special file or an I/O error. The layout is the grader's (nbgrader's collect copies regular
    files), so the batch grader books it as its own error, never as the student's 0."""


class NumbersLabelError(CourseError):
    """The label beside a recorded submission, naming the attempt whose numbers it was issued, is not one the
    term's recording wrote for this student, assignment and notebook under the course secret: the student is not
    graded (an autograder error), never graded with other numbers."""


class SandboxError(CourseError):
    """Student code cannot be run in the configured sandbox on this machine."""


class SecretFileError(CourseError):
    """A secret would be written where git would commit it (in a git work tree, not ignored)."""


class RosterError(CourseError):
    """The roster CSV cannot be read or names a student id that cannot be used."""


class NoIsolationError(SandboxError):
    """No isolation level the course accepts works on this machine: no student code can be run here."""


class SandboxStartError(SandboxError):
    """The sandbox ended before any student code ran, on every try: an autograder error, never the student's."""


class SelfTestError(CourseError):
    """The course's own solution or untouched release did not grade as it must: nothing was graded."""


class MissingExtraError(CourseError):
    """A grader's or the service's command in an install without its extra (a student's)."""


class TokenRetired(CourseError):
    """An upload's token was revoked or replaced while its body arrived (the service's store): nothing was stored."""
