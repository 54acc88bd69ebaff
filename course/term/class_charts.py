"""The class's pictures (issue 43), drawn with `course.term.charts` for the class summary and the service's
dashboard: each answer's share right (from the summary's plain data), per answer difficulty (share right) against
discrimination and the top slips (from an `ItemAnalysis`), and how the class did on its first attempt against
the attempt that counts (from two sets of feedback). Each function returns one HTML section or figure; nothing
here names a student (the charts show counts; the summary's own sections say who)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from course.core.text import plural
from course.pipeline.feedback_model import Feedback
from course.term.charts import CHART_CSS, MAX_BARS, Bar, Pair, Point, bar_chart, paired_chart, scatter_chart, shown
from course.term.item_analysis import AnswerItem, ItemAnalysis, WrongValue

__all__ = [
    "CHART_CSS",
    "answers_chart",
    "class_charts_html",
    "difficulty_discrimination_chart",
    "first_and_counted",
    "improvement_chart",
    "item_analysis_charts",
    "item_analysis_html",
    "top_slips_chart",
]

WEAK = 0.2  # a discrimination below this separates the class weakly (a common rule of thumb for item analysis)
SHARED = 2  # a wrong value counts as a slip of the class when at least this many students gave it
VALUE_CHARS = 40  # a student's wrong value as a chart's label shows it


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _answer_label(title: str, answer: str) -> str:
    return f"{title} · {answer}"


def answers_chart(answers: Sequence[dict[str, Any]], chart_id: str = "chart-answers", most: int = MAX_BARS) -> str:
    """Each answer's share right (the summary's `answers`), the hardest first (at most `most` drawn); a tie keeps
    the assignment's order."""
    ranked = sorted(enumerate(answers), key=lambda pair: (_share(pair[1]["right"], pair[1]["students"]), pair[0]))
    bars = [
        Bar(
            _answer_label(str(item["answer"]), str(item["title"])),  # the answer first: a long title is cut
            _share(item["right"], item["students"]),
            f"{100 * _share(item['right'], item['students']):.0f}% ({item['right']}/{item['students']})",
            (str(item["blank"]),),
        )
        for _, item in ranked
    ]
    blanks = sum(1 for item in answers if item["blank"])
    caption = (
        "Each answer's share of the counted students who gave it right, the hardest first "
        f"({plural(len(bars), 'answer')})."
        + (f" {plural(blanks, 'answer')} left blank by someone: the table says by how many." if blanks else "")
    )
    return bar_chart(
        chart_id, "Each answer's share right", bars, caption=caption, head=("answer", "right", "left blank"), most=most
    )


def class_charts_html(summary: dict[str, Any]) -> str:
    """The summary's charts section (a card), from the plain data of `summary.class_summary`."""
    if not summary.get("answers"):
        return ""
    return f"<section class=card id=charts><h2>Answers at a glance</h2>{answers_chart(summary['answers'])}</section>"


def _reading(item: AnswerItem) -> str:
    if item.discrimination is None:
        return "undefined"
    if item.discrimination < 0:
        return "the wrong way: stronger students missed it more"
    return "weakly" if item.discrimination < WEAK else "well"


def difficulty_discrimination_chart(analysis: ItemAnalysis, chart_id: str = "chart-discrimination") -> str:
    """Each answer's share right (across) against its discrimination (up): an answer low and to the left is hard
    and says little about who understood; one under the dashed line deserves a look. Answers whose discrimination
    is undefined (everyone, or nobody, right) are named in the caption, not drawn."""
    drawn = [item for item in analysis.answers if item.discrimination is not None]
    undefined = [item for item in analysis.answers if item.discrimination is None]
    points = [
        Point(
            _answer_label(item.question, item.answer),
            item.share_right,
            float(item.discrimination if item.discrimination is not None else 0.0),
            f"separates {_reading(item)}" if _reading(item) in ("well", "weakly") else _reading(item),
        )
        for item in drawn
    ]
    weak = sum(1 for point in points if point.y < WEAK)
    caption = (
        f"{plural(len(points), 'answer')} of {analysis.students} students: share right across, discrimination up "
        f"(how much more often the stronger students got it right). {weak} below {WEAK:g}, drawn as triangles."
    )
    if undefined:
        names = ", ".join(shown(_answer_label(i.question, i.answer), 60) for i in undefined[:10])
        more = f" and {len(undefined) - 10} more" if len(undefined) > 10 else ""
        caption += f" Not drawn (everyone or nobody right, so no discrimination): {names}{more}."
    return scatter_chart(
        chart_id,
        "Difficulty against discrimination, per answer",
        points,
        x_name="share right",
        y_name="discrimination",
        caption=caption,
        weak_below=WEAK,
    )


def _slip_label(item: AnswerItem, wrong: WrongValue) -> tuple[str, str]:
    """The wrong value where it was given, and what explains it (the author's rule first, then the slip found)."""
    where = f"{item.question} · {item.answer} = {shown(str(wrong.value), VALUE_CHARS)}"
    if wrong.rule:
        return where, f"rule {wrong.rule}"
    return where, wrong.slip.sentence if wrong.slip is not None else "unexplained"


def top_slips_chart(analysis: ItemAnalysis, chart_id: str = "chart-slips", most: int = MAX_BARS) -> str:
    """The wrong values several students share (at least SHARED), most common first, each with what explains it
    (the author's rule, the slip found, or "unexplained"); bars are the share of the class that gave it."""
    shared = sorted(
        ((item, wrong) for item in analysis.answers for wrong in item.wrong_values if wrong.count >= SHARED),
        key=lambda pair: -pair[1].count,
    )
    bars = [
        Bar(label, _share(wrong.count, analysis.students), plural(wrong.count, "student"), note=why)
        for item, wrong in shared
        for label, why in [_slip_label(item, wrong)]
    ]
    explained = sum(1 for _, wrong in shared if wrong.rule or wrong.slip is not None)
    caption = (
        f"Wrong values that {SHARED} or more of the {analysis.students} students gave, most common first: "
        f"{explained} of {len(shared)} explained by a rule or a slip found."
        if shared
        else f"No wrong value was given by {SHARED} or more students."
    )
    return bar_chart(
        chart_id,
        "The class's most common slips",
        bars,
        caption=caption,
        head=("wrong value", "explained by", "students"),
        most=most,
    )


def item_analysis_charts(analysis: ItemAnalysis) -> str:
    """Difficulty against discrimination, then the top slips (two figures)."""
    return difficulty_discrimination_chart(analysis) + top_slips_chart(analysis)


def item_analysis_html(analysis: ItemAnalysis) -> str:
    """The item analysis's section (a card) of the class summary. The page places it with
    `summary_page.render_summary_html(..., analysis=...)`."""
    # its own id: the item analysis's table (summary_page.py) is the section `#item-analysis`
    charts = item_analysis_charts(analysis)
    return f"<section class=card id=item-charts><h2>Item analysis at a glance</h2>{charts}</section>"


def first_and_counted(first: Sequence[Feedback], counted: Sequence[Feedback]) -> list[Pair]:
    """Per question (in the assignment's order, from the counted feedback), the share of students with full
    marks on their first attempt and on the attempt that counts. Each student is in both or in neither: a
    student is counted by `counted`, with their first attempt's feedback from `first` (the same one when the
    counted attempt is their first)."""
    firsts = {f.student_id: f for f in first}
    both = [(firsts[f.student_id], f) for f in counted if f.student_id in firsts]
    if not both:
        return []
    pairs = []
    for index, question in enumerate(both[0][1].questions):
        before = sum(
            1
            for one, _ in both
            if len(one.questions) > index
            and one.questions[index].id == question.id
            and one.questions[index].earned >= question.points
        )
        after = sum(
            1 for _, last in both if len(last.questions) > index and last.questions[index].earned >= question.points
        )
        pairs.append(
            Pair(
                question.title,
                _share(before, len(both)),
                _share(after, len(both)),
                f"{100 * _share(before, len(both)):.0f}% ({before})",
                f"{100 * _share(after, len(both)):.0f}% ({after})",
            )
        )
    return pairs


def improvement_chart(pairs: Sequence[Pair], students: int, chart_id: str = "chart-improvement") -> str:
    """First attempt against counted attempt, per question: the share of students with full marks."""
    caption = (
        f"Full marks per question over the {plural(students, 'student')} with a counted attempt: on their first "
        "attempt (striped, labelled “first”) and on the attempt that counts (solid, labelled “counted”)."
    )
    return paired_chart(
        chart_id,
        "Full marks per question: first attempt against counted attempt",
        pairs,
        names=("first", "counted"),
        caption=caption,
    )
