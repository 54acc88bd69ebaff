"""The dashboard's pictures (issue 43): the class's counted attempts at a glance (the score distribution, each
answer's share right, the item analysis when one is given) and how the class did on its first attempt against
the attempt that counts.

GET /i/<token>/charts answers a small page of its own whose <section id=class-charts> the dashboard's script
(pages.DASHBOARD_JS) puts in place of its own placeholder each time the dashboard loads, and the dashboard
reloads itself as attempts arrive: the charts follow the class with no script of their own and no inline script
(the CSP allows none). Made apart from the dashboard because they read the counted attempts' feedback, which
the dashboard's table never does (tests/service/test_page_cost.py). Without the script, the placeholder links to
the same page. Instructor only: it shows counts and shares; the histogram's hover titles name students, as the
class summary's do.
"""

from __future__ import annotations

import html

from course.core.status import RAN, Status
from course.core.text import plural
from course.pipeline.feedback_model import Feedback
from course.pipeline.render import CSS
from course.platforms.service.results import StudentRecord
from course.term.class_charts import (
    CHART_CSS,
    answers_chart,
    first_and_counted,
    improvement_chart,
    item_analysis_charts,
)
from course.term.item_analysis import ItemAnalysis
from course.term.summary import class_summary
from course.term.summary_page import HISTOGRAM_CSS, histogram_svg

CHARTS_ID = "class-charts"
DASHBOARD_BARS = 10  # the dashboard draws the hardest answers only (the summary and each chart's table have all)
CHARTS_CSS = CHART_CSS + HISTOGRAM_CSS  # the dashboard's head holds it too, for the section its script puts in


def first_attempts(records: list[StudentRecord]) -> dict[str, int]:
    """Per student with a counted attempt, the id of their first attempt that was graded (done, and not an
    autograder error: that one was no attempt of theirs)."""
    first: dict[str, int] = {}
    for record in records:
        if record.counted is None:
            continue
        graded = [a for a in record.attempts if a.done and a.status != Status.AUTOGRADER_ERROR]
        if graded:
            first[record.student_id] = graded[0].id
    return first


def placeholder() -> str:
    """The dashboard's section before its script fills it in (and where there is no script: a link)."""
    return (
        f'<section class=card id={CHARTS_ID}><h2>The class at a glance</h2><p><a href="charts">open the '
        "charts</a> (the score distribution, each answer's share right, first against counted attempt)</p></section>"
    )


def charts_section(
    records: list[StudentRecord], first: dict[int, Feedback], analysis: ItemAnalysis | None = None
) -> str:
    """The section: `records` with their counted attempts' feedback (`Service.records()`), `first` the feedback
    of each student's first graded attempt by its id (`first_attempts`; a counted attempt that is the first needs
    no second read: it is taken from `records`), `analysis` the class's item analysis of the counted attempts."""
    counted = [
        r.counted.feedback
        for r in records
        if r.counted is not None and r.counted.feedback is not None and r.counted.feedback.status in RAN
    ]
    known = {r.counted.id: r.counted.feedback for r in records if r.counted is not None and r.counted.feedback}
    firsts = [
        feedback
        for attempt_id in first_attempts(records).values()
        if (feedback := known.get(attempt_id) or first.get(attempt_id)) is not None
    ]
    summary = class_summary(counted)
    students = summary["students"]
    parts = [
        f"<section class=card id={CHARTS_ID} data-students={students} aria-live=polite>"
        f"<h2>The class at a glance</h2><p>Over the counted attempts of {plural(students, 'student')}; "
        "updates as attempts are graded. Each chart's numbers are in its table.</p>"
    ]
    if not students:
        parts.append("<p>No graded attempts yet.</p></section>")
        return "".join(parts)
    pairs = first_and_counted(firsts, counted)
    both = len({f.student_id for f in firsts} & {f.student_id for f in counted})
    parts.append(
        f"<h3>Score distribution</h3>{histogram_svg(summary['histogram'], summary['max_score'])}"
        f"<h3>Each answer's share right</h3>{answers_chart(summary['answers'], most=DASHBOARD_BARS)}"
        f"<h3>First attempt against counted attempt</h3>{improvement_chart(pairs, both)}"
    )
    if analysis is not None:
        parts.append(f"<h3>Item analysis</h3>{item_analysis_charts(analysis)}")
    parts.append("</section>")
    return "".join(parts)


def charts_page(assignment_name: str, section: str) -> str:
    """The section as a page of its own (what the placeholder's link opens; what the script reads)."""
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>The class at a glance: {html.escape(assignment_name)}</title><style>{CSS}{CHARTS_CSS}</style></head>"
        f'<body><main>{section}<p><a href="./">back to the dashboard</a></p></main></body></html>'
    )
