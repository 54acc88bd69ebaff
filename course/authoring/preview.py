"""`autograd-course preview`: what a student will see, written offline before anything is released.

For one assignment, from source/ as it is now: the released notebook (the real release transformation, nbgrader's
generate_assignment, run in a scratch course) as the .ipynb a student opens and as a page, and the feedback page
(the grader's own, course/pipeline/render.py) of three notebooks graded through the real sandbox and judge: the
answer key, the untouched release and the answer key with the wrong answers the author names
(`--wrong gate_df_dx=4`), each in both feedback modes, `torch_values` and `verdicts`.

Nothing of the course changes: release/, personalised/, the course gradebook and nbgrader's exchange are never
written (the scratch course has a gradebook of its own, and grading one notebook records nothing). Only the
preview folder is, replaced whole (staged beside it, then swapped in), and only a folder that is new, empty or an
earlier preview: a preview never deletes anything else.
"""

from __future__ import annotations

import ast
import difflib
import html
import json
import logging
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from course.authoring.release import install_folder, release_in_scratch
from course.core.config import CourseConfig
from course.core.errors import CourseError
from course.core.files import PRIVATE_FOLDER, atomic_write_bytes, atomic_write_text, make_folders
from course.core.output_paths import writable_output
from course.forms import form, gap
from course.pipeline.assignment import Assignment, Question, cell_text, load_course_assignment, nbgrader_meta
from course.pipeline.discovery import SubmissionRef
from course.pipeline.feedback_model import Feedback
from course.pipeline.grading import cold_runner, grade_submission
from course.pipeline.render import CSS, render_html
from course.pipeline.selftest import from_source

log = logging.getLogger(__name__)

MODES = ("torch_values", "verdicts")  # the feedback modes of source/course.yaml's feedback_reveals
MARKER = ".autograd-course-preview"  # in a preview folder: what a later preview may replace whole


class PreviewError(CourseError):
    """A preview that cannot be made as asked: the message names the file, the exercise and what to do."""


@dataclass(frozen=True)
class Wrong:
    """One wrong answer the author names: `name = value` appended to the answer key's cell."""

    name: str
    value: Any
    written: str  # as the author wrote it
    question: Question


@dataclass(frozen=True)
class PreviewedNotebook:
    """One notebook of the preview, graded in both modes: its score (the same in both: a mode changes only what
    the page shows), the answers that lost points, and where its notebook and pages are."""

    key: str  # "solution", "untouched", "wrong"
    label: str
    notebook: Path
    pages: dict[str, Path]
    score: float
    max_score: float
    status: str
    lost: tuple[tuple[str, float], ...]  # (answer, points lost), in the notebook's order
    scores_by_mode: dict[str, float]

    def line(self) -> str:
        lost = ", ".join(f"{name} -{points:g}" for name, points in self.lost)
        return (
            f"{self.label}: {self.score:g}/{self.max_score:g}"
            + ("" if self.status == "graded" else f" ({self.status})")
            + (f"; lost: {lost}" if lost and self.key == "wrong" else "")
        )


@dataclass(frozen=True)
class Preview:
    assignment: str
    folder: Path
    index: Path
    student_notebook: Path
    student_page: Path
    notebooks: tuple[PreviewedNotebook, ...]
    wrong: tuple[Wrong, ...]
    warnings: tuple[str, ...]

    @property
    def sound(self) -> bool:
        """What the release proof asks: the answer key earns full marks, the untouched release 0."""
        return not self.warnings

    def lines(self) -> list[str]:
        lines = [
            f"preview of {self.assignment} in {self.folder} (nothing was released; open {self.index})",
            f"  what a student opens: {self.student_notebook}",
            f"  the same as a page:   {self.student_page}",
        ]
        for notebook in self.notebooks:
            lines.append(notebook.line())
            lines += [f"  feedback, {mode}: {notebook.pages[mode]}" for mode in MODES]
        lines += [f"warning: {warning}" for warning in self.warnings]
        return lines


# ----------------------------------------------------------------------------- the author's wrong answers


def parse_wrong(assignment: Assignment, specs: Sequence[str]) -> tuple[Wrong, ...]:
    """`--wrong ANSWER=VALUE` items read against the assignment: each ANSWER one of its answers, each VALUE a
    Python literal of that answer's form (a number, a list of numbers, ...). Raises PreviewError naming the notebook,
    the exercise and what to do."""
    where = assignment.notebook_path
    by_name = {name: question for question in assignment.questions for name in question.answer_names}
    functions = {name: question for question in assignment.questions for name in question.function_names}
    wrong: list[Wrong] = []
    for spec in specs:
        name, equals, written = (part.strip() for part in spec.partition("="))
        if not equals or not name or not written:
            raise PreviewError(
                f"--wrong {spec!r}: write ANSWER=VALUE, an answer of {where} and the wrong value it should hold "
                f"(--wrong {next(iter(by_name), 'answer')}=4)"
            )
        if name in functions:
            raise PreviewError(
                f"--wrong {spec!r}: {name} is a function answer of exercise {functions[name].title!r} in {where}; "
                "--wrong sets values only: name one of its value answers, or preview a wrong function by "
                "grading a notebook of your own"
            )
        question = by_name.get(name)
        if question is None:
            close = difflib.get_close_matches(name, list(by_name), n=1)
            raise PreviewError(
                f"--wrong {spec!r}: {where} has no answer {name!r}"
                + (f" (did you mean {close[0]}?)" if close else "")
                + "; its answers, by exercise: "
                + "; ".join(f"{q.id}: {', '.join(q.answer_names)}" for q in assignment.questions if q.answer_names)
            )
        if any(one.name == name for one in wrong):
            raise PreviewError(f"--wrong {spec!r}: {name} is named twice; name each answer once")
        wrong.append(Wrong(name, _value(spec, name, written, question, where), written, question))
    return tuple(wrong)


def _value(spec: str, name: str, written: str, question: Question, where: Path) -> Any:
    """The literal `written`, held to the form the answer's public check declares."""
    declared = dict(question.forms).get(name, "number")
    shape = form(declared)
    words = shape.words if shape is not None else declared
    at = f"--wrong {spec!r}: answer {name} of exercise {question.title!r} in {where} is {words}"
    try:
        value = ast.literal_eval(written)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        value = _NOT_A_LITERAL
    missing = value is _NOT_A_LITERAL or (shape is not None and gap(value, shape) is not None)
    if missing:
        length = shape.length if shape is not None else None
        example = f"[{', '.join(['0.5'] * length)}]" if length else "-4"
        raise PreviewError(f"{at}, and {written!r} is not {words}; write it as Python writes one: {name}={example}")
    return value


_NOT_A_LITERAL = object()


def wrong_notebook(solution: dict[str, Any], wrong: Sequence[Wrong]) -> dict[str, Any]:
    """The answer key's notebook with `name = value` appended to the answer cell of each wrong answer: every other
    answer keeps the key's value, so the notebook loses exactly what the named answers are worth."""
    notebook: dict[str, Any] = json.loads(json.dumps(solution))
    lines: dict[str, list[str]] = {}
    for one in wrong:
        lines.setdefault(one.question.answer_cell_id, []).append(f"{one.name} = {one.value!r}  # preview: wrong")
    for cell in notebook["cells"]:
        added = lines.get(str(nbgrader_meta(cell).get("grade_id", "")))
        if added:
            cell["source"] = cell_text(cell).rstrip("\n") + "\n" + "\n".join(added)
    return notebook


# ----------------------------------------------------------------------------- the preview


def preview(
    config: CourseConfig,
    assignment_name: str | None = None,
    *,
    wrong: Sequence[str] = (),
    out: Path | None = None,
) -> Preview:
    """Write the preview of one assignment (the course's only one when None) into `out` (default
    preview/<assignment>/ in the course root) and say what was written. Without `wrong`, the wrong notebook
    flips the sign of the first number answer whose key is not 0."""
    _refuse_several(config, assignment_name)
    settings = config.assignment(assignment_name)
    assignment = load_course_assignment(config, settings.name)
    # Every notebook of a preview is the answer key, or made from it: hand work is only noted, as the self-test
    # and the release proof do (a key that computes with torch is the instructor's right, not a student's slip).
    config = replace(config, hand_work="note")
    named = parse_wrong(assignment, wrong)  # before anything runs: a typo costs nothing
    folder = _check_out(config, out or config.root / "preview" / settings.name)
    with tempfile.TemporaryDirectory(prefix="autograd-course-preview-") as scratch:
        staging = Path(scratch)
        log.info("preview %s: the release, made with nbgrader in a scratch course", settings.name)
        release_path = release_in_scratch(config, assignment, staging / "course")
        built = staging / "preview"
        built.mkdir(mode=PRIVATE_FOLDER)  # the answer key's notebook and pages: the grader's user's alone
        student, student_page = _student_release(release_path, built, settings.name)
        released = json.loads(release_path.read_text(encoding="utf-8"))
        solution = from_source(assignment, solved=True)
        graded, named = _grade_three(config, assignment, built, solution, released, named)
        warnings = _warnings(assignment, graded, named)
        atomic_write_text(built / MARKER, "written by autograd-course preview; the next preview replaces it\n")
        index = built / "index.html"
        atomic_write_text(index, index_page(settings.name, student_page.name, graded, warnings))
        make_folders(folder.parent)  # preview/ itself, when new: the grader's user's alone
        install_folder(built, folder)
    return _installed(settings.name, folder, built, (index, student, student_page), graded, named, warnings)


def _refuse_several(config: CourseConfig, assignment_name: str | None) -> None:
    """Refuse a preview that names no assignment of a course that has several."""
    if assignment_name is None and len(config.assignments) > 1:
        raise PreviewError(
            "the course has several assignments; name one with --assignment ("
            + ", ".join(a.name for a in config.assignments)
            + ")"
        )


def _student_release(release_path: Path, built: Path, assignment_name: str) -> tuple[Path, Path]:
    """The released notebook copied into the preview's student/ folder, and its page beside it."""
    student = built / "student" / release_path.name
    atomic_write_bytes(student, release_path.read_bytes())  # 0600 in 0700, as every file of a preview
    student_page = student.with_suffix(".html")
    atomic_write_text(student_page, notebook_page(student, assignment_name))
    return student, student_page


def _grade_three(
    config: CourseConfig,
    assignment: Assignment,
    built: Path,
    solution: dict[str, Any],
    released: dict[str, Any],
    named: tuple[Wrong, ...],
) -> tuple[list[_Graded], tuple[Wrong, ...]]:
    """The answer key, the untouched release and the wrong notebook graded, and the wrong answers it holds."""
    # The three notebooks side by side (each in a sandbox of its own, as the self-test grades its two); the
    # default wrong answer is read from the answer key's grading, so it waits for that one.
    with ThreadPoolExecutor(3) as pool:
        key = pool.submit(_grade, config, assignment, built, "solution", "the answer key", solution)
        untouched = pool.submit(_grade, config, assignment, built, "untouched", "the untouched release", released)
        named = named or _default_wrong(assignment, key.result())
        shown = ", ".join(f"{one.name} = {one.written}" for one in named)
        wrong_one = pool.submit(
            _grade,
            config,
            assignment,
            built,
            "wrong",
            f"a wrong answer ({shown})",
            wrong_notebook(solution, named),
        )
        graded = [key.result(), untouched.result(), wrong_one.result()]
    return graded, named


def _installed(
    assignment_name: str,
    folder: Path,
    built: Path,
    pages: tuple[Path, Path, Path],
    graded: Sequence[_Graded],
    named: tuple[Wrong, ...],
    warnings: Sequence[str],
) -> Preview:
    """What was written, at its place in the installed `folder` (the paths were made in `built`)."""
    index, student, student_page = pages

    def moved(path: Path) -> Path:
        return folder / path.relative_to(built)

    return Preview(
        assignment_name,
        folder,
        moved(index),
        moved(student),
        moved(student_page),
        tuple(
            PreviewedNotebook(
                one.key,
                one.label,
                moved(one.notebook),
                {mode: moved(page) for mode, page in one.pages.items()},
                one.score,
                one.max_score,
                one.status,
                one.lost,
                one.scores_by_mode,
            )
            for one in graded
        ),
        named,
        tuple(warnings),
    )


def _check_out(config: CourseConfig, out: Path) -> Path:
    """The preview folder, resolved (links followed, `..` taken), if a preview may replace it whole: new, empty,
    or an earlier preview (MARKER), neither the course root nor a folder that holds it, and nowhere a command may
    not write (course.core.output_paths: source/, release/, nbgrader's folders, the exchange)."""
    folder = writable_output("--out", out, config.root)
    root = config.root.resolve()
    if root.is_relative_to(folder):
        raise PreviewError(
            f"--out {out}: a preview is replaced whole at every run, and this folder is (or holds) the course "
            f"root; name a folder of its own, e.g. {root / 'preview'}"
        )
    if folder.exists() and not folder.is_dir():
        raise PreviewError(f"--out {folder}: is a file; name a folder (new, empty, or an earlier preview)")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MARKER).exists():
        raise PreviewError(
            f"--out {folder}: holds files that no preview wrote (no {MARKER} in it), and a preview replaces its folder "
            "whole; name a new or empty folder"
        )
    return folder


@dataclass(frozen=True)
class _Graded:
    key: str
    label: str
    notebook: Path
    pages: dict[str, Path]
    score: float
    max_score: float
    status: str
    lost: tuple[tuple[str, float], ...]
    scores_by_mode: dict[str, float]
    feedback: Feedback


def _grade(
    config: CourseConfig, assignment: Assignment, built: Path, key: str, label: str, notebook: dict[str, Any]
) -> _Graded:
    """Grade `notebook` as the grader does (the sandbox, the judge, the course's default numbers), once per mode,
    and write its pages: the very page `grade` writes for a student."""
    path = built / "notebooks" / f"{key}.ipynb"
    atomic_write_text(path, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    pages: dict[str, Path] = {}
    scores: dict[str, float] = {}
    feedback: Feedback | None = None
    for mode in MODES:
        log.info("preview %s: grading %s (%s)", assignment.name, label, mode)
        graded = grade_submission(
            SubmissionRef(f"preview-{key}", path),
            assignment,
            config,
            run=cold_runner(config),
            reveal_torch_values=mode == "torch_values",
            params=assignment.default_params,
        )
        page = built / "feedback" / f"{key}-{mode}.html"
        atomic_write_text(page, render_html(graded.feedback))
        pages[mode], scores[mode] = page, graded.feedback.score
        feedback = feedback or graded.feedback
    assert feedback is not None  # noqa: S101 - MODES is not empty
    lost = tuple(
        (value.name, value.points - value.earned)
        for question in feedback.questions
        for value in question.values
        if value.earned < value.points
    )
    return _Graded(
        key, label, path, pages, feedback.score, feedback.max_score, str(feedback.status), lost, scores, feedback
    )


def _default_wrong(assignment: Assignment, solution: _Graded) -> tuple[Wrong, ...]:
    """No --wrong: the first number answer whose key is not 0, its sign flipped (a common slip)."""
    by_name = {name: question for question in assignment.questions for name in question.answer_names}
    for question in solution.feedback.questions:
        for value in question.values:
            forms = dict(by_name[value.name].forms) if value.name in by_name else {}
            if forms.get(value.name, "number") != "number" or value.your_value is None:
                continue
            try:
                key = float(value.your_value)
            except ValueError:
                continue
            if key != 0:
                flipped = -key if key != int(key) else -int(key)
                return (Wrong(value.name, flipped, repr(flipped), by_name[value.name]),)
    if solution.status != "graded":
        raise PreviewError(
            f"{assignment.notebook_path}: the answer key could not be graded ({solution.status}: "
            + " ".join(solution.feedback.messages)
            + "), so no wrong answer can be read from it; name one with --wrong ANSWER=VALUE, and the "
            "preview's page of the answer key says more"
        )
    raise PreviewError(
        f"{assignment.notebook_path}: no number answer with a key other than 0 to make wrong by itself; name one "
        "with --wrong ANSWER=VALUE"
    )


def _warnings(assignment: Assignment, graded: Sequence[_Graded], named: Sequence[Wrong]) -> list[str]:
    """What the author must fix before a release: what the release proof would refuse, and a named wrong answer
    that the grader counts as right."""
    solution, untouched, wrong = graded
    warnings = []
    if solution.score != assignment.max_score or solution.status != "graded":
        warnings.append(
            f"the answer key earns {solution.score:g} of {assignment.max_score:g}"
            + ("" if solution.status == "graded" else f" ({solution.status})")
            + ", so release would refuse it (lost: "
            + ", ".join(f"{name} -{points:g}" for name, points in solution.lost)
            + f"); its page says why: feedback/{solution.pages['torch_values'].name}"
        )
    if untouched.score != 0:
        warnings.append(
            f"the untouched release earns {untouched.score:g}: a hidden test awards points without an answer, and "
            "release would refuse it"
        )
    right = [one.name for one in named if one.name not in dict(wrong.lost)]
    if right:
        warnings.append(
            f"{', '.join(right)}: the value named with --wrong earns full points (it matches torch's within "
            "the course's tolerance); name a value that is wrong"
        )
    for mode_scores in (one.scores_by_mode for one in graded):
        if len(set(mode_scores.values())) > 1:
            warnings.append(f"the two modes scored one notebook differently: {mode_scores}")
    return warnings


# ----------------------------------------------------------------------------- the pages


def notebook_page(notebook: Path, assignment_name: str) -> str:
    """The released notebook as one self-contained page (no scripts, no network): nbconvert's cells, the feedback
    page's style, and syntax colours of pygments."""
    import nbformat
    from nbconvert import HTMLExporter
    from pygments.formatters import HtmlFormatter

    exporter = HTMLExporter(template_name="basic")  # type: ignore[no-untyped-call]
    body, _ = exporter.from_notebook_node(nbformat.read(notebook, as_version=4))  # type: ignore[no-untyped-call]
    colours = HtmlFormatter().get_style_defs(".highlight")
    e = html.escape
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>Preview: {e(notebook.name)}, as students receive it</title>"
        f"<style>{CSS}\n{colours}\n{NOTEBOOK_CSS}</style></head><body><main>"
        f"<header class=summary><div>Preview of <strong>{e(notebook.name)}</strong> (assignment "
        f"<strong>{e(assignment_name)}</strong>) as students receive it: the release made from source/ now, not "
        "released</div></header>"
        f"{body}</main></body></html>\n"
    )


NOTEBOOK_CSS = """
.jp-Cell { margin: .75rem 0; }
.jp-CodeCell .jp-InputArea { background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px;
                             padding: .25rem .75rem; }
.jp-InputPrompt, .jp-OutputPrompt { display: none; }
pre { white-space: pre-wrap; margin: .25rem 0; font-family: ui-monospace, monospace; font-size: .9rem; }
"""


def index_page(assignment_name: str, student_page: str, graded: Sequence[_Graded], warnings: Sequence[str]) -> str:
    """The preview's first page: the student's notebook, then each notebook's score and its two feedback pages."""
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(one.label)}</td><td class=num>{one.score:g} / {one.max_score:g}</td>"
        + "".join(f'<td><a href="feedback/{e(one.pages[mode].name)}">{e(mode)}</a></td>' for mode in MODES)
        + f'<td><a href="notebooks/{e(one.notebook.name)}">{e(one.notebook.name)}</a></td></tr>'
        for one in graded
    )
    notes = "".join(f'<div class="note">{e(warning)}</div>' for warning in warnings)
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>Preview: {e(assignment_name)}</title><style>{CSS}</style></head><body><main>"
        f"<header class=summary><div>Preview of assignment <strong>{e(assignment_name)}</strong>: nothing was "
        "released</div></header>"
        f'{notes}<section class=card><h2>What a student receives</h2><p><a href="student/{e(student_page)}">'
        "the released notebook as a page</a> · the notebook itself is in student/</p></section>"
        "<section class=card><h2>Feedback</h2><div class=table-wrap><table><thead><tr><th>notebook</th><th>score</th>"
        f"<th colspan={len(MODES)}>feedback page</th><th>graded notebook</th></tr></thead><tbody>{rows}</tbody>"
        "</table></div></section></main></body></html>\n"
    )
