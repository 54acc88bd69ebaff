"""Gradescope: find the one submitted notebook, grade it, write results.json in Gradescope's format.

The same code runs in the container, in the uploaded zip and against a temporary root in tests
(`AUTOGRADER_ROOT`, default /autograder). Whatever happens, a valid results.json is written.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from course.assignment import load_assignment
from course.config import load_config
from course.errors import CourseError, SubmissionError
from course.files import atomic_write_json
from course.grading import Graded, SubmissionRef, grade_submission
from course.sandbox import ISOLATION_SUMMARY, choose_isolation
from course.text import markdown_text, safe_text
from course.variants import load_secret

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
        raise SubmissionError(f"found {len(notebooks)} notebooks ({shown(notebooks)}); "
                              f"upload only your {expected_name}")
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


def _number(value: float) -> str:
    return f"{value:g}"


def _md(value: Any) -> str:
    """Any text in a Markdown table or paragraph: every character literal (see course.text)."""
    return markdown_text("—" if value is None else value)


def question_markdown(question: dict[str, Any], reveal: bool) -> str:
    """One question's feedback as Markdown: values, chain table, misconceptions. Every piece of text is
    escaped, the grader's own included, so nothing a student wrote can become Markdown or HTML."""
    lines = []
    if question.get("error"):
        lines += [f"**{_md(question['error'])}**", ""]
    torch_head, torch_rule = (" torch |", "---|") if reveal else ("", "")
    lines += [f"| answer | your value |{torch_head} points | explanation |", f"|---|---|{torch_rule}---|---|"]
    for value in question["values"]:
        yours = value["your_value"] if value["your_value"] is not None else value.get("detail", value["status"])
        mark = "✓" if value["correct"] else "✗"
        note = value.get("detail", "") if value["your_value"] is not None or value["status"] == "function" else ""
        if value.get("hand_work_note"):
            note = f"{note} {value['hand_work_note']}".strip()
        torch = f" {_md(value['torch_value'])} |" if reveal else ""
        explanation = f"{value['explanation']} {note}".strip()
        lines.append(f"| {_md(value['name'])} | {_md(yours)} |{torch} "
                     f"{mark} {_number(value['earned'])}/{_number(value['points'])} | {_md(explanation)} |")
    table = question.get("chain_table")
    if table:
        if reveal:
            lines += ["", "**Chain table** (backward pass, right to left):", "",
                      "| node | your forward | torch forward | local derivative | your gradient | torch gradient |",
                      "|---|---|---|---|---|---|"]
        else:
            lines += ["", "**Chain table** (backward pass, right to left):", "",
                      "| node | your forward | local derivative | your gradient | |", "|---|---|---|---|---|"]
        for index, row in enumerate(table["rows"]):
            node = f"**→ {_md(row['node'])}**" if index == table["first_wrong"] else _md(row["node"])
            if reveal:
                lines.append(f"| {node} | {_md(row['your_forward'])} | {_md(row['torch_forward'])} | "
                             f"{_md(row['local_derivative'])} = {_md(row['torch_local_derivative'])} | "
                             f"{_md(row['your_gradient'])} | {_md(row['torch_gradient'])} |")
            else:
                lines.append(f"| {node} | {_md(row['your_forward'])} | {_md(row['local_derivative'])} | "
                             f"{_md(row['your_gradient'])} | {'✓' if row['correct'] else '✗'} |")
        if table["first_wrong"] is not None:
            lines.append("\nYour chain first breaks at the node marked →.")
    for diagnosis in question["misconceptions"]:
        lines += ["", f"**A common slip:** {_md(diagnosis['diagnosis'])} *The idea: {_md(diagnosis['idea'])}*"]
    return "\n".join(lines)


def to_results(graded: Graded, seconds: float) -> dict[str, Any]:
    feedback = graded.feedback
    reveal = feedback.get("reveals_torch_values", True)
    tests = [
        {
            "name": question["title"],
            "number": str(index + 1),
            "score": question["earned"],
            "max_score": question["points"],
            "status": "passed" if question["earned"] == question["points"] else "failed",
            "output": question_markdown(question, reveal),
            "output_format": "md",
            "visibility": "visible",
        }
        for index, question in enumerate(feedback["questions"])
    ]
    summary = [f"**{_number(feedback['score'])} / {_number(feedback['max_score'])}** points."]
    summary += [_md(message) for message in feedback["messages"]]
    if not reveal:
        summary.append("This feedback says which answers are right, not what torch computes.")
    if feedback["cell_errors"]:
        summary.append("Errors your notebook reported while it ran:")
        summary += [f"- {_md(e['cell'])}: {_md(e['error'])}" + (f" ({_md(e['hint'])})" if e.get("hint") else "")
                    for e in feedback["cell_errors"][:20]]
    return {
        "score": feedback["score"],
        "execution_time": round(seconds, 3),
        "output": "\n\n".join(summary),
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
        "tests": [{
            "name": title.lower(),
            "number": "0",
            "score": 0,
            "max_score": 0,
            "status": "failed",
            "output": message,
            "output_format": "md",
            "visibility": "visible",
        }],
    }


def run_autograder(root: Path) -> dict[str, Any]:
    """Grade <root>/submission against the course in <root>/source; write <root>/results/results.json."""
    started = time.monotonic()
    # The judge needs torch in this process; load it while the sandbox runs the notebook.
    threading.Thread(target=importlib.import_module, args=("torch",), daemon=True).start()
    try:
        config = load_config(root / "source")
        settings = config.assignment()
        assignment = load_assignment(config.source_notebook(settings.name), settings.name)
        # The level is said in the log (and results.json's extra_data); none good enough stops here.
        level, note = choose_isolation(config.sandbox, config.sandbox_uid, config.limits.tmp_mb)
        print(f"sandbox: {level}: {ISOLATION_SUMMARY[level]}{' ' + note if note else ''}", file=sys.stderr)
        if config.variants:
            # Refuses a secret that the sandbox's uid could read, before any student code runs.
            load_secret(config.variant_secret_env, config.variant_secret_file, config.root)
        notebook = find_notebook(root / "submission", settings.notebook)
        graded = grade_submission(SubmissionRef(student_id_from_metadata(root), notebook), assignment, config,
                                  reveal_torch_values=config.reveals_torch_values(gradescope=True))
        if graded.internal_error:
            print(graded.internal_error, file=sys.stderr)  # the grader's log, hidden from students
        results = to_results(graded, time.monotonic() - started)
    except SubmissionError as problem:
        results = error_results(f"{_md(problem)} Your score is 0 until you resubmit.", time.monotonic() - started,
                                ours=False)
    except CourseError as problem:
        print(f"autograder configuration error: {problem}", file=sys.stderr)
        results = error_results("The autograder is misconfigured; your instructor has been notified. "
                                "You do not need to resubmit.", time.monotonic() - started, ours=True)
    except Exception:
        traceback.print_exc()
        results = error_results("The autograder hit an error of its own while grading (not your fault). "
                                "Your instructor can see the details; you do not need to resubmit.",
                                time.monotonic() - started, ours=True)
    try:
        atomic_write_json(root / "results" / "results.json", results)
    except Exception:
        # Whatever made the results unwritable, the student still gets a valid file that says what happened.
        traceback.print_exc()
        results = error_results("The autograder could not write your results (not your fault). Your instructor "
                                "can see the details; you do not need to resubmit.", time.monotonic() - started,
                                ours=True)
        atomic_write_json(root / "results" / "results.json", results)
    return results
