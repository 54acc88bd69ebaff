"""source/ -> release/ with nbgrader, then proof that the release is sound.

Sound means: no solution line and no hidden test line reaches the student notebook, and under
`nbgrader autograde` (real kernel, real torch) the source's own solutions earn full marks while the
untouched release earns zero; and every number its Markdown shows, in the release and in each personalised copy,
is the number graded (course/authoring/shown.py).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from course.authoring.shown import refuse_shown
from course.core.config import AssignmentSettings, CourseConfig
from course.core.errors import ReleaseError
from course.core.files import PUBLIC, atomic_write_text
from course.core.text import MAX_ERROR_TEXT, safe_text
from course.pipeline.assignment import (
    HIDDEN_BEGIN,
    HIDDEN_END,
    NUMBERS_CELL,
    SOLUTION_BEGIN,
    SOLUTION_END,
    Assignment,
    cell_text,
    is_text,
    load_course_assignment,
    nbgrader_meta,
    region_lines,
)
from course.pipeline.content import NO_CONTENT, Content
from course.pipeline.hidden_tests import scored_without_idea
from course.pipeline.submission import student_id_problem
from course.pipeline.variants import course_secret, fill_text, numbers_for, numbers_source
from course.term import nbgrader_bridge, roster

SOLUTIONS_STUDENT = "__source_solutions__"
UNTOUCHED_STUDENT = "__untouched_release__"
PROOF_RUNS = {SOLUTIONS_STUDENT: "the source's solutions", UNTOUCHED_STUDENT: "the untouched release"}

log = logging.getLogger(__name__)  # progress lines on stderr (course/core/logs.py): a release takes tens of seconds


@dataclass(frozen=True)
class ReleaseReport:
    release_notebook: Path
    questions: int
    max_score: float
    solution_score: float | None
    untouched_score: float | None
    personalised: int = 0
    without_idea: tuple[str, ...] = ()  # answers whose hidden test gives no idea for verdicts-only feedback
    personalised_folder: Path | None = None  # where the personalised copies are (None: none were written)
    removed_stale: Path | None = None  # release/<assignment>/students/ an earlier version left, now removed
    refreshed: bool = False  # the copies were made again for the ids already in personalised/<assignment>/
    removed_personalised: Path | None = None  # personalised/<assignment>/ with variants off (or no id in it)
    warnings: tuple[str, ...] = ()  # what the author should change, which does not block a release (review.py)


def find_leaks(source_path: Path, release_path: Path) -> list[str]:
    """Every solution or hidden-test line of the source that appears in the release, by cell."""
    source = nbformat.read(source_path, as_version=4)  # type: ignore[no-untyped-call]  # nbformat is untyped
    release = nbformat.read(release_path, as_version=4)  # type: ignore[no-untyped-call]
    release_text = {nbgrader_meta(c).get("grade_id"): c.source for c in release.cells}
    all_release_text = "\n".join(c.source for c in release.cells)
    leaks = []
    for index, cell in enumerate(source.cells):
        grade_id = nbgrader_meta(cell).get("grade_id", f"cell {index}")
        secret = region_lines(cell.source, SOLUTION_BEGIN, SOLUTION_END)
        secret += region_lines(cell.source, HIDDEN_BEGIN, HIDDEN_END)
        released_lines = set(release_text.get(grade_id, "").splitlines())
        for line in secret:
            # A line that the visible part of the cell also has (e.g. `answer = ...`) is no leak.
            visible = line in cell.source.replace(line, "", 1)
            if line.strip() and not visible and line in released_lines:
                leaks.append(f"{grade_id}: the release still contains {line.strip()!r}")
    for marker in (SOLUTION_BEGIN, HIDDEN_BEGIN):
        if marker in all_release_text:
            leaks.append(f"the release still contains the marker {marker!r}")
    return leaks


@dataclass(frozen=True)
class ProofRun:
    """One notebook of the proof under nbgrader autograde: each grade cell's score, and what each grade cell that
    raised or printed showed (read back from nbgrader's autograded notebook)."""

    scores: dict[str, float]
    shown: dict[str, str]
    traces: dict[str, str]  # the traceback of each cell that raised, colours removed: for --log-level debug


def _autograde_scores(config: CourseConfig, assignment: Assignment, release_path: Path) -> dict[str, ProofRun]:
    """nbgrader autograde's score per grade cell of the source solutions and of the untouched release."""
    notebook_name = assignment.notebook_path.name
    with tempfile.TemporaryDirectory(prefix="autograd-course-release-") as scratch:
        root = Path(scratch)
        db_url = f"sqlite:///{root / 'gradebook.db'}"
        shutil.copytree(config.root / "source" / assignment.name, root / "source" / assignment.name)
        log.info("release %s: proof: nbgrader generate_assignment in a scratch course", assignment.name)
        nbgrader_bridge.generate_assignment(root, db_url, assignment.name)
        runs = {}
        for student, notebook in ((SOLUTIONS_STUDENT, assignment.notebook_path), (UNTOUCHED_STUDENT, release_path)):
            log.info("release %s: proof: nbgrader autograde of %s", assignment.name, PROOF_RUNS[student])
            target = root / "submitted" / student / assignment.name / notebook_name
            target.parent.mkdir(parents=True)
            shutil.copy(notebook, target)
            nbgrader_bridge.autograde(root, db_url, assignment.name, student)
            runs[student] = ProofRun(
                nbgrader_bridge.grade_cell_scores(db_url, assignment.name, student),
                *_shown(root / "autograded" / student / assignment.name / notebook_name),
            )
        return runs


MAX_AUTOGRADED_BYTES = 64 * 1024 * 1024  # the proof's own notebook: the source's, with our cells' outputs
MAX_SHOWN_LINES = 5  # of what a hidden test printed (Marks' notes: one per value off)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL_LINE = re.compile(r"Cell In\[\d+\], line (\d+)")  # IPython's frame header of a cell's own code


def _shown(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """{grade cell id: what it showed} of nbgrader's autograded notebook: the exception a grade cell raised (its
    type, message and the line of the cell it came from), else what it printed. Only the proof's own notebooks
    are read here (the source's solutions, the untouched release), yet the text is read back like any input:
    checked field by field, bounded and made visible (course/core/text.py); a notebook that cannot be read shows
    nothing, and the scores alone speak. (shown, tracebacks)"""
    try:
        if path.stat().st_size > MAX_AUTOGRADED_BYTES:
            return {}, {}
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}, {}
    shown: dict[str, str] = {}
    traces: dict[str, str] = {}
    for cell in cells if type(cells) is list else []:
        meta = nbgrader_meta(cell) if type(cell) is dict else {}
        grade_id, outputs = meta.get("grade_id"), cell.get("outputs") if meta.get("grade") else None
        if type(grade_id) is not str or type(outputs) is not list or not is_text(cell.get("source", "")):
            continue
        said, trace = _raised(cell_text(cell), outputs)
        said = said or _printed(outputs)
        if said:
            shown[grade_id] = said
        if trace:
            traces[grade_id] = trace
    return shown, traces


def _raised(source: str, outputs: list[dict[str, Any]]) -> tuple[str, str]:
    """('line N of the cell (`code`) raised Error: message', its traceback) of a cell's error output ("" without
    one)."""
    error = next((o for o in outputs if type(o) is dict and o.get("output_type") == "error"), None)
    if error is None:
        return "", ""
    name = safe_text(error.get("ename"), 100, one_line=True) or "an exception"
    message = safe_text(error.get("evalue"), MAX_ERROR_TEXT, one_line=True)
    frames = error.get("traceback")
    trace = _ANSI.sub("", "\n".join(line for line in frames if type(line) is str)) if type(frames) is list else ""
    numbers = _CELL_LINE.findall(trace)  # the last frame in the cell's code: where the test itself was
    lines = source.splitlines()
    where = ""
    if numbers and 1 <= int(numbers[-1]) <= len(lines):
        number = int(numbers[-1])
        where = f"line {number} of the cell (`{safe_text(lines[number - 1].strip(), MAX_ERROR_TEXT, one_line=True)}`) "
    return f"{where}raised {name}" + (f": {message}" if message else ""), safe_text(trace, 20 * MAX_ERROR_TEXT)


def _printed(outputs: list[dict[str, Any]]) -> str:
    """What a cell printed on stdout (Marks' notes on the values that did not match), a few lines of it."""
    text = "".join(
        o["text"] if type(o.get("text")) is str else "".join(t for t in o["text"] if type(t) is str)
        for o in outputs
        if type(o) is dict
        and o.get("output_type") == "stream"
        and o.get("name") == "stdout"
        and type(o.get("text")) in (str, list)
    )
    lines = [safe_text(line, MAX_ERROR_TEXT, one_line=True) for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    more = f" (and {len(lines) - MAX_SHOWN_LINES} more lines)" if len(lines) > MAX_SHOWN_LINES else ""
    return "its hidden tests printed: " + " | ".join(lines[:MAX_SHOWN_LINES]) + more


def _cells_off(assignment: Assignment, run: ProofRun, *, full: bool) -> list[str]:
    """One line per question whose grade cell did not earn full marks (full=True) or earned points (False), with
    the exception the cell raised or what it printed."""
    lines = []
    for question in assignment.questions:
        earned = run.scores.get(question.test_cell_id, 0.0)
        if (earned != question.points) if full else (earned != 0):
            shown = run.shown.get(question.test_cell_id)
            if question.test_cell_id in run.traces:
                log.debug("%s raised:\n%s", question.test_cell_id, run.traces[question.test_cell_id])
            lines.append(
                f"{question.test_cell_id} (question {question.title!r}): {earned:g} of {question.points:g}"
                + (f"; {shown}" if shown else "")
            )
    return lines


def _verify(config: CourseConfig, assignment: Assignment, source_path: Path, release_path: Path) -> tuple[float, float]:
    """The release proof under nbgrader autograde; a failure names each cell and question that is off, and the
    exception its hidden tests raised."""
    runs = _autograde_scores(config, assignment, release_path)
    solutions, untouched = runs[SOLUTIONS_STUDENT], runs[UNTOUCHED_STUDENT]
    solution_score, untouched_score = sum(solutions.scores.values()), sum(untouched.scores.values())
    if solution_score != assignment.max_score:
        raise ReleaseError(
            f"{source_path}: the source notebook's own solutions earn {solution_score:g} of "
            f"{assignment.max_score:g} points under nbgrader autograde:\n  "
            + "\n  ".join(_cells_off(assignment, solutions, full=True))
            + "\nFix the answer key (between ### BEGIN SOLUTION / ### END SOLUTION) or the hidden tests of "
            "those cells; release/ was left as it was."
        )
    if untouched_score != 0:
        raise ReleaseError(
            f"{source_path}: the untouched student notebook earns {untouched_score:g} points under "
            "nbgrader autograde (a hidden test passes without any answer):\n  "
            + "\n  ".join(_cells_off(assignment, untouched, full=False))
            + "\nMake those hidden tests award points only for answers; release/ was left as it was."
        )
    return solution_score, untouched_score


def personalise(
    notebook: dict[str, Any], params: dict[str, Any], student_id: str | None = None, content: Content = NO_CONTENT
) -> dict[str, Any]:
    """A copy of a released notebook showing `params`: {{placeholders}} in the text filled in, and (for a
    student's own copy) the numbers cell rewritten and marked with the student's id."""
    from nbgrader.utils import compute_checksum

    personal = copy.deepcopy(notebook)
    for cell in personal["cells"]:
        if cell.get("cell_type") == "markdown" and "{{" in cell_text(cell):
            cell["source"] = fill_text(cell_text(cell), params)
        if student_id is not None and nbgrader_meta(cell).get("grade_id") == NUMBERS_CELL:
            cell["source"] = numbers_source(params, content)
            cell["metadata"]["autograd_course"] = {"student_id": student_id}
            cell["metadata"]["nbgrader"]["checksum"] = compute_checksum(nbformat.from_dict(cell))  # type: ignore[no-untyped-call]
    return personal


def read_roster(path: Path) -> list[str]:
    """Student ids from a roster CSV with a `student_id` column (or one id per line without a header)."""
    return [student.student_id for student in roster.read_roster(path)]


def personalised_ids(folder: Path) -> list[str]:
    """The student ids an earlier `release --students` wrote copies for: the names of personalised/<assignment>/'s
    folders that are usable ids (anything else there, a file or a folder no id could have made, is not carried
    over: the folder is written again whole)."""
    try:
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError as failed:
        raise ReleaseError(
            f"{folder}: could not read the personalised copies' folder ({failed.strerror}); fix its "
            "permissions, or remove it and release with --students ROSTER"
        ) from None
    ids = [
        entry.name
        for entry in entries
        if entry.is_dir() and not entry.is_symlink() and not student_id_problem(entry.name)
    ]
    left = [entry.name for entry in entries if entry.name not in ids]
    if left:
        log.warning("%s: not carried over (no student's copy): %s", folder, ", ".join(left))
    return ids


def _write_notebook(path: Path, notebook: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", mode=PUBLIC)  # students


# Where earlier versions wrote the personalised copies: inside the folder nbgrader's exchange hands to everyone.
OLD_STUDENTS_FOLDER = "students"


def _release_for_students(
    config: CourseConfig, assignment: Assignment, folder: Path, template: dict[str, Any], ids: list[str]
) -> None:
    """<folder>/<id>/<notebook> for each student, with their own numbers (staged, then installed as
    personalised/<assignment>/, never inside release/<assignment>/, which nbgrader sends to every student)."""
    for student_id in ids:
        problem = student_id_problem(student_id)
        if problem:  # an id becomes a folder name: never `..` or a path
            raise ReleaseError(f"release --students: {problem}")
        params = numbers_for(config, assignment.content, student_id, assignment.default_params)
        notebook = personalise(template, params, student_id, assignment.content)
        _write_notebook(folder / student_id / assignment.notebook_path.name, notebook)


def release(
    config: CourseConfig, assignment_name: str | None = None, *, verify: bool = True, students: list[str] | None = None
) -> ReleaseReport:
    """Regenerate release/<assignment>/ from source/ and prove the release sound.

    Atomic: everything is generated and proven in a scratch course; release/<assignment>/ (and the
    course gradebook's record of the cells) change only once every check has passed.
    """
    settings = config.assignment(assignment_name)
    source_path = config.source_notebook(settings.name)
    assignment = load_course_assignment(config, settings.name)
    if students and not config.variants:
        raise ReleaseError("release --students needs variants: true in source/course.yaml (and a course secret)")
    personal_folder, ids, remove_personal = _personalised_plan(config, settings.name, students)
    warnings = _review(config, assignment)
    final_path = config.release_notebook(settings.name)
    with tempfile.TemporaryDirectory(prefix="autograd-course-staging-") as scratch:
        staging = Path(scratch)
        release_path, template_text, template = _generate(config, settings, assignment, staging, final_path)
        _refuse_leaks(assignment, source_path, release_path, final_path)
        copies = {
            student: numbers_for(config, assignment.content, student, assignment.default_params) for student in ids
        }
        refuse_shown(template, assignment, config.tolerance, copies, final_path)  # what students read is what is graded
        solution_score = untouched_score = None
        if verify:
            solution_score, untouched_score = _verify(config, assignment, source_path, release_path)
        if ids:
            log.info("release %s: %d personalised copies", settings.name, len(ids))
            _release_for_students(config, assignment, staging / "personalised", template, ids)
        # release/<assignment>/ is replaced whole, so a students/ folder an earlier version wrote inside it (where
        # nbgrader's release_assignment sent every classmate's copy to everyone) goes with the old release.
        stale = _stale_copies(final_path, release_path)
        # Every check passed: record the cells in the course gradebook, then put the release in place.
        log.info("release %s: recording its cells in the course gradebook, then %s", settings.name, final_path.parent)
        nbgrader_bridge.record_assignment(config.root, config.gradebook_url, settings.name)
        _put_in_place(
            config,
            settings.name,
            staging,
            release_path,
            final_path,
            template_text,
            ids,
            remove_personal=remove_personal,
        )
    return _report(
        assignment,
        final_path,
        (solution_score, untouched_score),
        ids,
        students,
        personal_folder,
        stale,
        remove_personal,
        warnings,
    )


def _personalised_plan(
    config: CourseConfig, assignment_name: str, students: list[str] | None
) -> tuple[Path, list[str], bool]:
    """personalised/<assignment>/, the ids to write copies for, and whether the folder is removed instead."""
    # personalised/<assignment>/ always matches the release it comes from (the term's autograded/ copies and what
    # each student was given are read from it): without --students the copies already there are made again from
    # this release, for the same ids, or, with variants off (or no student's folder in it), removed.
    personal_folder = config.personalised_folder(assignment_name)
    refresh = not students and config.variants
    ids = list(students or []) or (personalised_ids(personal_folder) if refresh else [])
    remove_personal = not ids and (personal_folder.exists() or personal_folder.is_symlink())
    if ids:
        course_secret(config)  # a missing secret stops here, before anything is written
    return personal_folder, ids, remove_personal


def _stale_copies(final_path: Path, release_path: Path) -> Path | None:
    """The students/ folder an earlier version wrote inside release/<assignment>/, which the new release drops."""
    old_copies = final_path.parent / OLD_STUDENTS_FOLDER
    return old_copies if old_copies.is_dir() and not (release_path.parent / OLD_STUDENTS_FOLDER).exists() else None


def _report(
    assignment: Assignment,
    final_path: Path,
    scores: tuple[float | None, float | None],
    ids: list[str],
    students: list[str] | None,
    personal_folder: Path,
    stale: Path | None,
    remove_personal: bool,
    warnings: tuple[str, ...],
) -> ReleaseReport:
    """What the release wrote, proved and removed."""
    without_idea = tuple(
        name for question in assignment.questions for name in scored_without_idea(question.test_source)
    )
    solution_score, untouched_score = scores
    return ReleaseReport(
        final_path,
        len(assignment.questions),
        assignment.max_score,
        solution_score,
        untouched_score,
        len(ids),
        without_idea,
        personal_folder if ids else None,
        stale,
        refreshed=bool(ids) and not students,
        removed_personalised=personal_folder if remove_personal else None,
        warnings=warnings,
    )


def _review(config: CourseConfig, assignment: Assignment) -> tuple[str, ...]:
    """Before anything is generated: the kit's definitions checked again (their declared ranges searched: a
    definition whose ranges cannot keep its requirements stops the release, course/authoring/draws.py), then the
    warnings of review.py (a value not exact in float32, a slip that would pass), which do not."""
    from course.authoring.kit import check_exercises, load_exercises
    from course.authoring.review import float64_exercises, review

    module = assignment.content.path
    if module is not None and module.is_file() and "EXERCISES" in module.read_text(encoding="utf-8"):
        check_exercises(load_exercises(module), module)
    return review(assignment, config.tolerance, float64=float64_exercises(assignment)).warnings


def _generate(
    config: CourseConfig, settings: AssignmentSettings, assignment: Assignment, staging: Path, final_path: Path
) -> tuple[Path, str, dict[str, Any]]:
    """nbgrader's release of source/<assignment>/ in the staging course: the notebook students get (with the default
    numbers), and nbgrader's own output, as text and read: it keeps the {{placeholders}} of every personalised copy."""
    # The exercises module is the instructor's (it says how numbers vary and how wrong answers are read):
    # nbgrader would copy it into the release with every other file of the folder.
    shutil.copytree(
        config.root / "source" / settings.name,
        staging / "source" / settings.name,
        ignore=shutil.ignore_patterns(settings.exercises, "__pycache__", "*.pyc"),
    )
    log.info("release %s: nbgrader generate_assignment", settings.name)
    nbgrader_bridge.generate_assignment(staging, f"sqlite:///{staging / 'gradebook.db'}", settings.name)
    release_path = staging / "release" / settings.name / settings.notebook
    if not release_path.exists():
        raise ReleaseError(f"nbgrader wrote no {final_path.name} for {settings.name!r}; check source/{settings.name}/")
    # nbgrader's output keeps the {{placeholders}}: it is the template of every personalised copy.
    template_text = release_path.read_text(encoding="utf-8")
    template = json.loads(template_text)
    _write_notebook(release_path, personalise(template, assignment.default_params))
    return release_path, template_text, template


def _refuse_leaks(assignment: Assignment, source_path: Path, release_path: Path, final_path: Path) -> None:
    leaks = [_with_question(assignment, leak) for leak in find_leaks(source_path, release_path)]
    if leaks:
        raise ReleaseError(
            f"{final_path} would not be safe to give to students (release/ was left as it was):\n  "
            + "\n  ".join(leaks)
            + "\nPut answers between ### BEGIN SOLUTION / ### END SOLUTION and tests between "
            "### BEGIN HIDDEN TESTS / ### END HIDDEN TESTS in the source notebook."
        )


def _put_in_place(
    config: CourseConfig,
    name: str,
    staging: Path,
    release_path: Path,
    final_path: Path,
    template_text: str,
    ids: list[str],
    *,
    remove_personal: bool,
) -> None:
    """What is made from the release goes in first and release/<assignment>/ last: a failure on the way leaves
    the old release with copies and a template already made from source/ as it is now (which grading reads),
    never the new release beside the old cells."""
    personal_folder = config.personalised_folder(name)
    step = config.release_template(name)
    try:
        atomic_write_text(step, template_text, mode=PUBLIC)
        step = personal_folder
        if ids:
            _install(staging / "personalised", personal_folder)
        elif remove_personal and personal_folder.is_symlink():
            personal_folder.unlink()
        elif remove_personal:
            shutil.rmtree(personal_folder)
        step = final_path.parent
        _install(release_path.parent, final_path.parent)
    except OSError as failed:
        raise ReleaseError(
            f"{step}: could not be replaced ({failed.strerror or failed}); {final_path.parent} "
            "was left as it was. Fix the folder's permissions or free some space, then run "
            "release again"
        ) from None


def _with_question(assignment: Assignment, leak: str) -> str:
    """A leak line `<cell id>: ...` with the question its cell belongs to."""
    cell_id = leak.split(":", 1)[0]
    for question in assignment.questions:
        if cell_id in (question.answer_cell_id, question.form_cell_id, question.test_cell_id):
            return f"{cell_id} (question {question.title!r}):{leak.split(':', 1)[1]}"
    return leak


def _install(staged: Path, target: Path) -> None:
    """Swap the staged release folder in for release/<assignment>/: copied beside it first, then two renames
    on one filesystem, so release/ never holds half a release."""
    target.parent.mkdir(parents=True, exist_ok=True)
    incoming = target.parent / f".{target.name}.new-{os.getpid()}"
    outgoing = target.parent / f".{target.name}.old-{os.getpid()}"
    for leftover in (incoming, outgoing):
        shutil.rmtree(leftover, ignore_errors=True)
    shutil.copytree(staged, incoming)
    if target.exists():
        target.rename(outgoing)
    try:
        incoming.rename(target)
    except OSError:
        if outgoing.exists() and not target.exists():
            outgoing.rename(target)  # the old one back: a failed release leaves the old release, never none
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    shutil.rmtree(outgoing, ignore_errors=True)


# ----------------------------------------------------------------------------- for `autograd-course preview`


def release_in_scratch(config: CourseConfig, assignment: Assignment, scratch: Path) -> Path:
    """The release transformation alone, into the scratch course `scratch`: nbgrader's generate_assignment and the
    default numbers filled in, as `release` makes it, and refused as `release` refuses it when a solution or hidden
    line would reach students. The student notebook it wrote; nothing of the course changes
    (course/authoring/preview.py)."""
    settings = config.assignment(assignment.name)
    final_path = config.release_notebook(settings.name)
    release_path, _, _ = _generate(config, settings, assignment, scratch, final_path)
    _refuse_leaks(assignment, assignment.notebook_path, release_path, final_path)
    return release_path


def install_folder(staged: Path, target: Path) -> None:
    """`staged` copied in place of the folder `target` whole, by two renames: never half of either."""
    _install(staged, target)
