"""Gradescope: find the one submitted notebook, grade it, write results.json in Gradescope's format.

The same code runs in the container, in the uploaded zip and against a temporary root in tests
(`AUTOGRADER_ROOT`, default /autograder). Whatever happens, a valid results.json is written.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from course.core.config import CourseConfig, load_config
from course.core.errors import CourseError, NoIsolationError, SelfTestError, SubmissionError
from course.core.files import atomic_write_json, os_reason, unwritable_folder
from course.core.status import Status
from course.core.text import markdown_text, safe_text
from course.pipeline.discovery import SubmissionRef
from course.pipeline.grading import Graded, grade_submission
from course.pipeline.render import question_markdown, summary_markdown
from course.pipeline.run_context import RunContext, open_run
from course.pipeline.selftest import prove_setup
from course.sandbox import ISOLATION_SUMMARY, WarmPool, choose_isolation

IGNORED_NAMES = {".DS_Store", "__MACOSX", ".ipynb_checkpoints", "Thumbs.db"}
ARCHIVE_SUFFIXES = {".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".rar"}
MAX_LISTED_FILES = 200


def _submitted_files(folder: Path) -> list[Path]:
    """Regular files under the submission folder (no symlinks followed, hidden clutter skipped)."""
    found: list[Path] = []
    pending = [folder]
    while pending and len(found) < MAX_LISTED_FILES:
        current = pending.pop()
        try:
            entries = sorted(current.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name in IGNORED_NAMES or entry.name.startswith("._") or entry.is_symlink():
                continue
            if entry.is_dir():
                pending.append(entry)
            elif entry.is_file():
                found.append(entry)
    return found


def find_notebook(folder: Path, expected_name: str) -> Path:
    """The one .ipynb in the submission, or a SubmissionError telling the student what to upload."""
    if not folder.is_dir():
        raise SubmissionError(f"no submission folder ({folder}); upload {expected_name}")
    files = _submitted_files(folder)
    notebooks = [f for f in files if f.suffix == ".ipynb"]

    def shown(paths: list[Path]) -> str:  # file names are the student's text (and need not be UTF-8)
        return ", ".join(safe_text(str(p.relative_to(folder)), 120, one_line=True) for p in paths[:10])

    names = shown(files) or "nothing"
    if len(notebooks) == 1:
        return notebooks[0]
    if len(notebooks) > 1:
        raise SubmissionError(
            f"found {len(notebooks)} notebooks ({shown(notebooks)}); upload only your {expected_name}"
        )
    archives = [f for f in files if f.suffix.lower() in ARCHIVE_SUFFIXES]
    if archives:
        raise SubmissionError(
            f"you uploaded an archive ({shown(archives[:1])}); archives are not opened. Upload {expected_name} itself"
        )
    raise SubmissionError(
        f"no Jupyter notebook (.ipynb) in your submission (found: {names}). Download {expected_name} from "
        "JupyterLab (File > Download) and upload that file, without renaming its extension"
    )


def student_id_from_metadata(root: Path) -> str:
    """The student's id from Gradescope's submission_metadata.json, or 'student' when absent."""
    path = root / "submission_metadata.json"
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
        users = metadata.get("users") or []
        user = users[0] if users and isinstance(users[0], dict) else {}
        for key in ("sid", "email", "name", "id"):
            value = user.get(key)
            if isinstance(value, str | int) and str(value).strip():
                return str(value).strip()
        submission_id = metadata.get("id")
        return f"submission-{submission_id}" if submission_id is not None else "student"
    except (OSError, ValueError, AttributeError):
        return "student"


def to_results(graded: Graded, seconds: float) -> dict[str, Any]:
    feedback = graded.feedback
    tests = [
        {
            "name": question.title,
            "number": str(index + 1),
            "score": question.earned,
            "max_score": question.points,
            "status": "passed" if question.earned == question.points else "failed",
            "output": question_markdown(question, feedback.reveals_torch_values),
            "output_format": "md",
            "visibility": "visible",
        }
        for index, question in enumerate(feedback.questions)
    ]
    return {
        "score": feedback.score,
        "execution_time": round(seconds, 3),
        "output": summary_markdown(feedback),
        "output_format": "md",
        "stdout_visibility": "hidden",
        "extra_data": {"sandbox": graded.sandbox, "status": graded.status},
        "tests": tests,
    }


def error_results(message: str, seconds: float, *, ours: bool) -> dict[str, Any]:
    """A valid results.json for a submission that could not be graded: score 0 and what to do."""
    title = "Autograder error" if ours else "Submission could not be graded"
    return {
        "score": 0,
        "execution_time": round(seconds, 3),
        "output": f"**{title}.** {message}",
        "output_format": "md",
        "stdout_visibility": "hidden",
        "tests": [
            {
                "name": title.lower(),
                "number": "0",
                "score": 0,
                "max_score": 0,
                "status": "failed",
                "output": message,
                "output_format": "md",
                "visibility": "visible",
            }
        ],
    }


AUTOGRADER_ERROR_TEXT = (
    "The autograder hit an error of its own while grading (not your fault). Your instructor can "
    "see the details; you do not need to resubmit."
)


def _warm_torch() -> None:
    """The judge's torch, imported and its autograd run once while the sandbox runs the notebook."""
    import torch

    x = torch.tensor(2.0, requires_grad=True)
    (x**3).backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is not annotated


def _grade_on_one_worker(root: Path, config: CourseConfig, context: RunContext | None = None) -> Graded:
    """The self-test's two notebooks and the student's, on one warm worker: one torch import in the sandbox, three
    forked runs. The worker starts first and imports torch and IPython while this process reads the notebook and
    imports its own torch for the judge (on the other core, where there is one). Nothing is returned unless the
    course's solution and untouched release score full marks and 0 (selftest.py). `context`: the run's, once read
    (a second try, at the level the probe chose, reads nothing again)."""
    with (
        WarmPool(1, config.limits, isolation=config.sandbox, base_uid=config.sandbox_uid, prove_by_start=True) as pool,
        ThreadPoolExecutor(1) as executor,
    ):
        threading.Thread(target=_warm_torch, daemon=True).start()
        # The run's context, once: the course's first assignment, its notebook read, and the course secret checked
        # (a secret that the sandbox's uid could read is refused before any student code runs).
        context = context or open_run(config)
        proving = executor.submit(prove_setup, context, partial(pool.run, cold_fallback=False), level=pool.level)
        notebook = find_notebook(root / "submission", context.settings.notebook)
        graded = grade_submission(
            SubmissionRef(student_id_from_metadata(root), notebook),
            context.assignment,
            config,
            run=pool.run,
            reveal_torch_values=config.reveals_torch_values(gradescope=True),
            secret=context.secret,
        )
        try:
            proof = proving.result()
        except SelfTestError:
            if not pool.unproven:  # a level already chosen (after the probe, too): the failure stands
                raise
            proof = None  # no worker started at the probe's first choice, unprobed: the probe chooses below
    if proof is None:
        choose_isolation(config.sandbox, config.sandbox_uid, config.limits.tmp_mb)  # NoIsolationError: none works
        return _grade_on_one_worker(root, config, context)
    print(proof.line(), file=sys.stderr)
    return graded


def _say_isolation(config: CourseConfig) -> None:
    """The grader's log (and results.json's extra_data) says which isolation student code gets: the level a run
    proved or the probe chose. When nothing ran the probe chooses now, and when no level works its SandboxError is
    the result, as if it had been probed before anything else."""
    level, note = choose_isolation(config.sandbox, config.sandbox_uid, config.limits.tmp_mb)
    print(f"sandbox: {level}: {ISOLATION_SUMMARY[level]}{' ' + note if note else ''}", file=sys.stderr)


def run_autograder(root: Path) -> dict[str, Any]:
    """Grade <root>/submission against the course in <root>/source; write <root>/results/results.json."""
    started = time.monotonic()
    problem = unwritable_folder(root / "results")
    if problem:  # not even an error result could reach the student: said once, before anyone is graded
        raise CourseError(
            f"cannot write {root / 'results' / 'results.json'} ({problem}), so nothing was graded: "
            "run as a user who may write there (Gradescope runs the autograder as root)"
        )
    results = _results(root, started)
    return _write_results(root, results, started)


def _results(root: Path, started: float) -> dict[str, Any]:
    """results.json's content: the student's grade, or a result that says whose the failure was."""
    try:
        config = load_config(root / "source")
        try:
            graded = _grade_on_one_worker(root, config)
        except NoIsolationError:
            raise
        except BaseException:
            _say_isolation(config)
            raise
        _say_isolation(config)
        if graded.internal_error:
            print(graded.internal_error, file=sys.stderr)  # the grader's log, hidden from students
        if graded.status == Status.AUTOGRADER_ERROR:  # our failure, never a graded 0: a visible autograder error
            return error_results(AUTOGRADER_ERROR_TEXT, time.monotonic() - started, ours=True)
        return to_results(graded, time.monotonic() - started)
    except SubmissionError as problem:
        return error_results(
            f"{markdown_text(problem)} Your score is 0 until you resubmit.", time.monotonic() - started, ours=False
        )
    except CourseError as problem:
        print(f"autograder configuration error: {problem}", file=sys.stderr)
        return error_results(
            "The autograder is misconfigured; your instructor has been notified. You do not need to resubmit.",
            time.monotonic() - started,
            ours=True,
        )
    except Exception:
        traceback.print_exc()
        return error_results(AUTOGRADER_ERROR_TEXT, time.monotonic() - started, ours=True)


def _write_results(root: Path, results: dict[str, Any], started: float) -> dict[str, Any]:
    """Write results.json, and the results written: whatever made them unwritable, the student still gets a valid
    file that says what happened."""
    try:
        atomic_write_json(root / "results" / "results.json", results)
    except Exception:
        traceback.print_exc()
        results = error_results(
            "The autograder could not write your results (not your fault). Your instructor "
            "can see the details; you do not need to resubmit.",
            time.monotonic() - started,
            ours=True,
        )
        try:
            atomic_write_json(root / "results" / "results.json", results)
        except OSError as error:
            raise CourseError(f"cannot write {root / 'results' / 'results.json'} ({os_reason(error)})") from None
    return results
