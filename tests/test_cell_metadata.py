"""A cell's nbgrader metadata, checked field by field (course/core/cell_metadata.py): a field of the wrong JSON type is
absent, never an exception, and what the release holds comes back unchanged."""

from __future__ import annotations

import pytest

from course.core.cell_metadata import NONE, nbgrader_cell
from tests.support.helpers import RELEASE_NOTEBOOK, load

ODD = [
    None,
    True,
    False,
    0,
    -1,
    2.5,
    float("nan"),
    float("inf"),
    10**400,
    "",
    "x" * 200_000,
    "a b",
    "\ud800",
    [],
    ["grade"],
    {},
    {"grade_id": "setup"},
]


VALID = {  # (field, value) of ODD that nbgrader's schema allows
    **{(flag, value): value for flag in ("grade", "solution", "locked", "task") for value in (True, False)},
    ("points", 0): 0,
    ("points", 2.5): 2.5,
}


@pytest.mark.parametrize("value", ODD, ids=repr)
@pytest.mark.parametrize(
    "field", ["grade_id", "grade", "solution", "locked", "task", "points", "checksum", "cell_type", "schema_version"]
)
def test_a_field_of_another_type_is_absent(field, value):
    meta = nbgrader_cell({"metadata": {"nbgrader": {field: value}}})
    valid = next(
        (kept for (name, odd), kept in VALID.items() if name == field and type(odd) is type(value) and odd == value),
        None,
    )
    assert getattr(meta, field) == (valid if valid is not None else getattr(NONE, field))
    if field == "grade_id" and value != "":  # (an empty id is how a tool may leave a cell: nothing to say)
        assert meta.damaged_id  # said, in words
        assert "x" * 10 not in meta.damaged_id  # never the student's text


@pytest.mark.parametrize(
    "cell",
    [None, 5, [], "cell", {"metadata": 5}, {"metadata": {"nbgrader": [1]}}, {"metadata": {"nbgrader": None}}, {}],
    ids=repr,
)
def test_no_usable_metadata_is_none(cell):
    assert nbgrader_cell(cell) == NONE


def test_the_release_comes_back_as_it_is():
    for cell in load(RELEASE_NOTEBOOK)["cells"]:
        written = cell.get("metadata", {}).get("nbgrader")
        if written is not None:
            expected = {key: value for key, value in written.items() if not (key == "task" and value is False)}
            assert nbgrader_cell(cell).as_json() == expected
            assert not nbgrader_cell(cell).damaged_id
