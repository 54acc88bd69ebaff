"""Finding the submissions of a batch: nbgrader's submitted/<student>/<assignment>/<notebook> layout, a
folder of <student>.ipynb files, or single notebooks; one canonical student-id check."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from course.core.errors import CourseError
from course.pipeline.submission import student_id_problem


@dataclass(frozen=True)
class SubmissionRef:
    student_id: str
    path: Path
    problem: str = ""
    # The notebook's bytes when they are already in memory (the submission service's upload): read instead of the
    # file, which then only names the notebook in messages.
    content: bytes | None = field(default=None, repr=False)


def check_paths_exist(paths: list[Path]) -> None:
    """A PATH that does not exist is a typo, not a student: stop before anything is graded or written."""
    missing = [path for path in paths if not path.exists() and not path.is_symlink()]
    if missing:
        raise CourseError(
            f"{missing[0]}: no such file or folder; nothing was graded or written. Check the path "
            "(with no PATH, grade reads submitted/<student>/<assignment>/ at the course root)."
        )


def _ref(student_id: str, path: Path, problem: str = "") -> SubmissionRef:
    return SubmissionRef(student_id, path, problem or student_id_problem(student_id))


def discover(paths: list[Path], assignment_name: str, notebook: str) -> list[SubmissionRef]:
    """Submissions named by PATHs: nbgrader's submitted/<student>/<assignment>/<notebook> layout, a folder
    of <student>.ipynb files, or single notebooks. One canonical id check here: a ref whose id cannot be
    used, or that repeats an id already found, carries a `problem` and is refused, never renamed."""
    refs: list[SubmissionRef] = []
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.is_dir() and (child / assignment_name).is_dir():
                    refs.append(_ref(child.name, child / assignment_name / notebook))
                elif child.is_dir() and child.name == assignment_name and (child / notebook).exists():
                    refs.append(_ref(path.name, child / notebook))
                elif child.is_file() and child.suffix == ".ipynb":
                    refs.append(_ref(child.stem, child))
        elif path.exists():
            parts = path.resolve().parts
            if len(parts) >= 3 and parts[-2] == assignment_name:
                refs.append(_ref(parts[-3], path))
            else:
                refs.append(_ref(path.stem, path))
        else:
            refs.append(SubmissionRef(path.stem or str(path), path, f"{path}: no such file or folder"))
    seen: dict[str, Path] = {}
    unique = []
    for ref in refs:
        if ref.problem:
            unique.append(ref)
        elif ref.student_id in seen:
            unique.append(
                SubmissionRef(
                    ref.student_id,
                    ref.path,
                    f"student id {ref.student_id!r} was already graded from "
                    f"{seen[ref.student_id]}; this copy was not graded",
                )
            )
        else:
            seen[ref.student_id] = ref.path
            unique.append(ref)
    return unique
