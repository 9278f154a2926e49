"""nbhelpers.compile_report: the report is plain frozen data, shared by the recorder and the view."""
import dataclasses

import pytest

from nbhelpers import compile_report
from tests.source_imports import imported_modules
from tests import REPO



@pytest.mark.parametrize("name", compile_report.__all__)
def test_every_type_is_frozen_data(name):
    cls = getattr(compile_report, name)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen


def test_a_report_compares_by_value_and_cannot_be_changed():
    node = compile_report.FxNode("x", "placeholder", "x", "[8]", "")
    a = compile_report.CompileReport((compile_report.FxGraph((node,)),), (), ())
    b = compile_report.CompileReport((compile_report.FxGraph((node,)),), (), ())
    assert a == b and hash(a) == hash(b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.breaks = ()


def test_the_view_depends_on_the_report_not_on_the_recorder():
    """compile_view draws a report; it must not need compile_lens (and torch._dynamo) to do so."""
    imported = imported_modules(REPO / "nbhelpers" / "compile_view.py")
    assert "nbhelpers.compile_report" in imported and "nbhelpers.compile_lens" not in imported
