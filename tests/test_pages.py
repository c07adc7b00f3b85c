"""The newcomer frictions of the pages and the CLI's text (issue 56 item 7):
integers as integers, durations in their largest sensible unit, parameter counts
with their convention, integer knobs' sensitivities at their neighbours, what
would make a plan fit, and the outputs written safely."""

from __future__ import annotations

import pytest

from codesign.cli import _text


@pytest.mark.parametrize("n,text", [(1536.0, "1,536"), (16, "16"), (2.5e6, "2,500,000"),
                                    (2.5, "2.5"), (0.0, "0")])
def test_a_count_is_an_integer_with_thousands_separators(n, text):
    assert _text.format_count(n) == text


@pytest.mark.parametrize("seconds,text", [
    (0.412, "0.412 s"), (42.0, "42.0 s"), (59.9, "59.9 s"), (60.0, "1.0 min"),
    (700.0, "11.7 min"), (3600.0, "1.0 h"), (9360.0, "2.6 h"), (86400.0, "1.0 days"),
    (24.5 * 86400, "24.5 days")])
def test_a_duration_is_in_its_largest_sensible_unit_never_zero_days(seconds, text):
    assert _text.format_duration(seconds) == text


def test_a_duration_range_takes_its_upper_ends_unit():
    assert _text.format_duration_range(3000.0, 7200.0) == "0.8-2.0 h"
    assert _text.format_duration_range(20.0 * 86400, 24.2 * 86400) == "20.0-24.2 days"
