"""`codesign report` and `--report FILE.html` / `--plot FILE.png` of optimize,
sensitivity, validate and calibrate: one self-contained page each, every figure
a PNG inside it, no URL of the web in it.

Two pages are opened in a real headless Chromium (the default scenario's and
validate's), whose dump of the DOM after loading shows the page's own script
marking every figure drawn (an image loaded with a non-zero natural size); the
test skips that step only where no Chromium is installed. The others are
checked as HTML: one PNG data URI of a real image per expected figure.
"""

from __future__ import annotations

import base64
import html
import os
import re
import shutil
import signal
import struct
import subprocess
from pathlib import Path

import pytest

from codesign import report
from codesign.cli import main

NCCL = Path(__file__).parent / "fixtures" / "nccl"
CHROMIUM = (shutil.which("chromium") or shutil.which("chromium-browser")
            or shutil.which("google-chrome"))
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync")
BROWSER_TIMEOUT_S = 60
_IMAGE = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]*)"')


def _run(capsys, *argv, code=0):
    assert main(list(argv)) == code
    return capsys.readouterr()


def _png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG from its IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _self_contained(page: str, figures: int) -> None:
    """`figures` PNG data URIs, each a real image; no http(s) URL, nothing loaded
    from elsewhere (a stylesheet, a script, a font, an image)."""
    images = _IMAGE.findall(page)
    assert len(images) == figures == page.count("<figure>")
    for data in images:
        width, height = _png_size(base64.b64decode(data))
        assert width > 100 and height > 100
    assert re.search(r"https?:", page, re.IGNORECASE) is None
    assert re.search(r"<link|@import|url\(|<script src|<iframe", page, re.IGNORECASE) is None
    assert re.findall(r'\ssrc="(?!data:image/png;base64,)', page) == []
    assert re.findall(r'\shref="(?!#)', page) == []
    assert f'data-figures="{figures}"' in page


def _rendered(path: Path, tmp_path: Path) -> str:
    """The DOM of the page at `path` after Chromium loaded it (its scripts run)."""
    if CHROMIUM is None:
        pytest.skip("no Chromium (chromium, chromium-browser or google-chrome) on the PATH")
    command = [CHROMIUM, *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}",
               "--dump-dom", path.resolve().as_uri()]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=BROWSER_TIMEOUT_S)
    finally:
        if proc.poll() is None:  # every process of the browser: its own session
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, command
    return out.decode()


def _drew_every_figure(dom: str, figures: int) -> None:
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert f'data-figures="{figures}"' in body and f'data-drawn="{figures}"' in body, body
    assert len(re.findall(r'<img [^>]*data-drawn="true"', dom)) == figures


def test_default_report_holds_the_estimate_and_draws_every_figure_in_chromium(
        tmp_path, capsys):
    page_path = tmp_path / "default.html"
    out = _run(capsys, "report", "--out", str(page_path)).out
    assert out.endswith(f"wrote {page_path}\n") and "5 figures" in out
    page = page_path.read_text()
    _self_contained(page, 5)
    for title in ("Scenario and plan", "Step time", "Error band", "Estimate", "Memory per GPU",
                  "Timeline", "Roofline", "Sensitivities"):
        assert f"<h2>{title}</h2>" in page
    # the numbers are those the commands print, through the same functions
    estimate = _run(capsys, "estimate").out
    assert html.escape(estimate.rstrip()) in page
    interval = re.search(r"68% interval +([\d.]+)-([\d.]+) s, from (.+)", estimate).groups()
    assert (f"68% interval of the step time {interval[0]}-{interval[1]} s (estimate "
            in page) and html.escape(interval[2]) in page
    sensitivity = _run(capsys, "sensitivity").out
    knobs = [line for line in sensitivity.splitlines() if " +10% " in line]
    assert len(knobs) > 10 and all(html.escape(line) in page for line in knobs)
    roofline = _run(capsys, "roofline").out
    assert all(f"<td>{dim}</td><td>{tier}</td>" in page
               for dim, tier in re.findall(r"^(\w+) +(scale_up|scale_out) ", roofline, re.M))
    _drew_every_figure(_rendered(page_path, tmp_path), 5)


def test_validate_page_and_plot_drawn_in_chromium(tmp_path, capsys, monkeypatch,
                                                  validate_rows):
    from codesign import validate

    monkeypatch.setattr(validate, "run", lambda: validate_rows)  # computed once per run
    page_path, png = tmp_path / "validate.html", tmp_path / "validate.png"
    out = _run(capsys, "validate", "--report", str(page_path), "--plot", str(png)).out
    assert out.endswith(f"wrote {png}\nwrote {page_path}\n")
    assert _png_size(png.read_bytes())[0] > 1000
    page = page_path.read_text()
    _self_contained(page, 1)
    for r in validate_rows:
        assert f"<td>{html.escape(r['name'])}</td>" in page
    summary = validate.summary(validate_rows)
    for family, s in summary["by_family"].items():
        assert (f"<td>{family}</td><td class=\"number\">{s['predictions']}</td>"
                f"<td>{s['median_abs_error']:.1%}</td>") in page
    _drew_every_figure(_rendered(page_path, tmp_path), 1)


def test_optimize_grid_page_holds_its_heatmap_of_every_feasible_point(tmp_path, capsys):
    page_path, png = tmp_path / "optimize.html", tmp_path / "optimize.png"
    argv = ["optimize", "--vary", "parallel.tp,parallel.pp", "--method", "grid",
            "--no-progress", "--top", "4"]
    out = _run(capsys, *argv, "--report", str(page_path), "--plot", str(png)).out
    text = out[: out.index("wrote ")]
    timeless = re.compile(r", [\d.]+ s$", re.M)  # the wall time
    assert timeless.sub("", text) == timeless.sub("", _run(capsys, *argv).out)  # as without
    assert _png_size(png.read_bytes())[0] > 500
    page = page_path.read_text()
    _self_contained(page, 2)  # the heatmap and the Pareto front
    assert html.escape(text.rstrip()) in page
    feasible = re.search(r"of a (\d+)-point grid \((\d+) feasible\)", text).group(2)
    assert f"each of the grid&#x27;s {feasible} feasible points" in page
    on_front = int(re.search(r"the (\d+) designs on the line are beaten", page).group(1))
    assert 1 <= on_front <= int(feasible)
    # the designs the grid holds, ranked: every feasible one here (fewer than GRID_TOP)
    assert page.count("<tr><td class=\"number\">") == int(feasible)
    # the best four side by side, each as codesign estimate gives it: #2 is tp 8 pp 8,
    # the default scenario itself
    side = page[page.index("side by side</h2>"):page.index("<h2>Designs</h2>")]
    assert side.count("<th>#") == 4
    estimate = _run(capsys, "estimate").out
    step = float(re.search(r"^step time +([\d.]+) s", estimate, re.M).group(1))
    cells = re.search(r"<td>step time \(s\)</td>((?:<td[^>]*>[^<]*</td>)+)", side).group(1)
    times = [float(v) for v in re.findall(r">([\d.]+)<", cells)]
    assert times == sorted(times) and step == pytest.approx(times[1], abs=5e-3)
    for part in ("compute", "tp", "dp", "pp_bubble"):
        assert f"<td>  {part} (s)</td>" in side
    memory = re.search(r"^memory +(\S+) of (\S+) per GPU", estimate, re.M).groups()
    assert f"{memory[0]} of {memory[1]} (fits)" in side
    assert " GB<" not in page  # memory in GiB, as the tables


def test_sensitivity_and_calibrate_pages_and_plots(tmp_path, capsys):
    knobs = ["--knob", "parallel.tp", "--knob", "system.scale_out_bandwidth_Bps"]
    page_path, png = tmp_path / "sensitivity.html", tmp_path / "sensitivity.png"
    out = _run(capsys, "sensitivity", *knobs, "--report", str(page_path), "--plot",
               str(png)).out
    page = page_path.read_text()
    _self_contained(page, 1)
    assert _png_size(png.read_bytes())[0] > 500
    for line in out.splitlines()[2:4]:  # the two elasticities, as the command prints them
        assert line.startswith("  ") and html.escape(line.strip()) in page

    page_path, png = tmp_path / "calibrate.html", tmp_path / "calibrate.png"
    logs = [str(NCCL / "all_reduce_perf_8xH100.txt"), str(NCCL / "all_gather_perf_8xH100.txt")]
    out = _run(capsys, "calibrate", *logs, "--points", "--report", str(page_path), "--plot",
               str(png)).out
    page = page_path.read_text()
    _self_contained(page, 1)
    assert _png_size(png.read_bytes())[0] > 500
    fit, points = out[: out.index("holdout:")], out[out.index("\n", out.index("holdout:")):]
    points = points[: points.index("wrote ")]
    assert fit.startswith("tier ") and html.escape(fit.rstrip()) in page
    assert points.count("\n") > 40 and html.escape(points.strip()) in page  # every size
    # --json's stdout stays JSON: the files are named on stderr
    captured = _run(capsys, "calibrate", *logs, "--json", "--plot", str(png))
    assert captured.out.startswith("{") and captured.err == f"wrote {png}\n"


@pytest.mark.parametrize("argv,message", [
    (["validate", "--report", "{tmp}/no/page.html"],
     "--report '{tmp}/no/page.html': its folder '{tmp}/no' does not exist"),
    (["validate", "--report", "{tmp}"], "--report '{tmp}' is a directory; name a file"),
    (["sensitivity", "--plot", "{tmp}/bars.xyz"], "--plot '{tmp}/bars.xyz': matplotlib cannot"),
    (["optimize", "--vary", "parallel.tp", "--report", "{tmp}/a.png", "--plot", "{tmp}/a.png"],
     "--report '{tmp}/a.png' is --plot's file too; name two files"),
    (["calibrate", "compute", "--plot", "{tmp}/c.png"],
     "--plot '{tmp}/c.png': calibrate compute draws nothing"),
    (["report", "--out", "{tmp}/no/page.html"], "--out '{tmp}/no/page.html': its folder"),
])
def test_a_bad_output_path_is_one_line_naming_its_flag_before_any_work(
        argv, message, tmp_path, capsys, monkeypatch):
    from codesign import validate

    def never():
        raise AssertionError("computed before the output path was checked")

    monkeypatch.setattr(validate, "run", never)
    err = _run(capsys, *(a.format(tmp=tmp_path) for a in argv), code=2).err
    assert err.count("\n") == 1 and message.format(tmp=tmp_path) in err, err
    assert list(tmp_path.iterdir()) == []


def test_page_pieces_escape_text_and_close_their_figures():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    part = report.figure(fig, 'a <b> & "c"')
    assert not plt.fignum_exists(fig.number)
    assert 'alt="a &lt;b&gt; &amp; &quot;c&quot;"' in part
    rows = [{"name": "<x>", "value": 1.23456789, "ok": True}, {"name": "y", "value": float("nan")}]
    cells = report.table(rows)
    assert "<td>&lt;x&gt;</td>" in cells and '<td class="number">1.235</td>' in cells
    assert "<td>yes</td>" in cells and '<td class="number">n/a</td>' in cells
    page = report.page("t", [report.section("s <1>", part, cells)], lines=("made",))
    assert page.startswith("<!DOCTYPE html>") and 'data-figures="1"' in page
    assert "<h2>s &lt;1&gt;</h2>" in page


def test_a_tpu_report_draws_an_interval_below_its_estimate_as_it_is(tmp_path, capsys):
    """validate's TPU rows ran faster than predicted: the interval lies wholly
    below the estimate; the page draws it as a bracket from lo to hi and says so."""
    page_path = tmp_path / "tpu.html"
    argv = ["--set", "system.preset=tpu-v5p"]
    out = _run(capsys, "report", *argv, "--out", str(page_path)).out
    assert "5 figures" in out
    page = page_path.read_text()
    _self_contained(page, 5)
    estimate = _run(capsys, "estimate", *argv).out
    step = float(re.search(r"^step time +([\d.]+) s", estimate, re.M).group(1))
    lo, hi = (float(v) for v in re.search(r"68% interval +([\d.]+)-([\d.]+) s", estimate).groups())
    assert lo < hi < step
    said = f"{lo / step:.2f}-{hi / step:.2f} x the estimate: validate&#x27;s tpu rows ran faster"
    assert said in page and html.unescape(said) in estimate
    assert html.escape(estimate.rstrip()) in page


def test_a_report_of_a_plan_that_does_not_fit_says_what_would(tmp_path, capsys):
    page_path = tmp_path / "tp4.html"
    _run(capsys, "report", "--set", "parallel.tp=4", "--out", str(page_path))
    page = page_path.read_text()
    assert "<h2>What would make it fit</h2>" in page
    estimate = _run(capsys, "estimate", "--set", "parallel.tp=4").out
    said = estimate[estimate.index("what would make it fit"):estimate.index("\n\ndim ")]
    assert html.escape(said) in page and "the cheapest that fits" in said
