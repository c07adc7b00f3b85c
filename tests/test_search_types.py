"""The search method and the grid's scan precision as types (issue 55 item 3):
each owns its formulas, and a name is parsed once (an unknown one refused in
one line naming the argument). Nothing here compiles a model."""

import numpy as np
import pytest

from codesign import optimize
from codesign.optimize._grid import FLOAT32_TOL, GRID_RERANK, scan_precision


def test_methods_parse_once_and_own_their_counts():
    grid, gradient = optimize.search_method("grid"), optimize.search_method("gradient")
    assert (grid, gradient) == (optimize.Grid(), optimize.Gradient())
    assert optimize.search_method(grid) is grid
    assert optimize.METHODS == ("gradient", "grid")
    with pytest.raises(ValueError, match=r"^--method='nope' is not one of gradient, grid$"):
        optimize.search_method("nope", "--method")
    assert (grid.grid_points(1000), gradient.grid_points(1000)) == (1000, 0)  # the cap counts
    assert (grid.top, gradient.top) == (optimize.GRID_TOP, 0)
    assert grid.point_counts(True) == {"grid_size": 1, "feasible_points": 1}
    assert gradient.point_counts(True) == {}


def test_methods_take_their_own_command_line_options():
    given = dict(grid_points=8, starts=4, steps=20, seed=1, top=2, least_top=4096,
                 store=lambda: "the store")
    assert optimize.Grid().options(**given) == {"grid_points": 8, "top": optimize.GRID_TOP}
    assert optimize.Gradient().options(**given) == {"starts": 4, "steps": 20, "seed": 1,
                                                    "top": 4096, "store": "the store"}
    assert optimize.Gradient().options(**{**given, "least_top": 0})["top"] == 2
    designs = [1, 2, 3]
    assert optimize.Grid().reported_top(designs, 2, drawn=False) == [1, 2]
    assert optimize.Grid().reported_top(designs, 0, drawn=True) == designs
    assert optimize.Gradient().reported_top(designs, 0, drawn=False) == designs
    assert optimize.Gradient().reported_top(designs, 0, drawn=True) is None  # a page's own
    assert optimize.Gradient().reported_top(designs, 2, drawn=True) == [1, 2]


def test_scans_own_their_width_candidates_and_reasons_to_scan_again():
    f32, f64 = scan_precision("float32"), scan_precision("float64")
    assert optimize.SCANS == ("float32", "float64")
    assert isinstance(f32, optimize.Float32Scan) and isinstance(f64, optimize.Float64Scan)
    with pytest.raises(ValueError, match=r"^scan='float16' is not one of float32, float64$"):
        scan_precision("float16")
    assert (f32.candidates(16), f32.candidates(100), f64.candidates(16)) == (GRID_RERANK, 100, 16)
    assert (f32.tolerance, f64.tolerance) == (FLOAT32_TOL, 0.0)
    wide = (np.zeros(2), np.zeros(2, dtype=np.int64))
    narrow = f32.narrowed(wide)
    assert (narrow[0].dtype, narrow[1].dtype) == (np.float32, np.int32)
    assert f64.narrowed(wide) is wide
    spread = np.array([1.0, 1.0 + 10 * FLOAT32_TOL])
    tied = np.array([1.0, 1.0 + FLOAT32_TOL / 2])
    assert f32.redo(0, spread, 2) == ""
    assert f32.redo(1, spread, 2) == "a point within float32's tolerance of a memory or limit bound"
    assert f32.redo(0, tied, 2) == "more than 2 points tie within float32's tolerance"
    assert f32.redo(0, np.array([1.0, np.inf]), 2) == ""  # fewer feasible than kept: no tie
    assert f64.redo(1, tied, 2) == ""
