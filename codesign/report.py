"""One self-contained HTML page of a command's results (`codesign report`, and
`--report FILE.html` of optimize, sensitivity, validate and calibrate).

Pure functions from tables, text and matplotlib figures to HTML strings;
nothing here computes a number of the model (the commands compute them, and
pass what they print). The page opens offline: every figure is a PNG inside
it (a base64 `data:` URI; no file beside it), its style and script are
inline, it names no font, stylesheet, script or image elsewhere. A small
inline script marks each figure drawn once its image has loaded with a
non-zero natural size (`data-drawn` on the image; on `<body>` the count, beside
`data-figures`, how many there are), which a headless browser's dump of the
DOM shows (tests/test_report.py).
"""

from __future__ import annotations

import base64
import html
import io
import math

FIGURE_DPI = 110  # sharp on a laptop screen, ~50-150 KB per figure

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto;
       max-width: 1180px; padding: 0 24px 48px; color: #1d2330; background: #fff; }
header { border-bottom: 2px solid #2f5d9b; padding: 18px 0 10px; margin-bottom: 8px; }
h1 { font-size: 1.5em; margin: 0 0 4px; }
h2 { font-size: 1.15em; margin: 28px 0 8px; color: #2f5d9b; }
header p { margin: 2px 0; color: #555; }
nav { font-size: 0.9em; margin: 8px 0 0; }
nav a { margin-right: 12px; color: #2f5d9b; text-decoration: none; }
table { border-collapse: collapse; font-size: 0.85em; margin: 8px 0; }
th, td { border-bottom: 1px solid #dde2ea; padding: 3px 10px; text-align: left; }
th { background: #f1f4f8; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-size: 0.95em; color: #555; padding: 2px 0; }
pre { background: #f6f8fa; padding: 10px 12px; overflow-x: auto; font-size: 0.8em; }
figure { margin: 12px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; margin-top: 4px; }
.columns { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
"""

# marks each figure drawn once its image has loaded with a non-zero natural size
_SCRIPT = """
(function () {
  var images = document.querySelectorAll("figure img");
  function mark() {
    var drawn = 0;
    images.forEach(function (img) {
      if (img.complete && img.naturalWidth > 0 && img.naturalHeight > 0) {
        img.setAttribute("data-drawn", "true");
        drawn += 1;
      }
    });
    document.body.setAttribute("data-drawn", String(drawn));
  }
  images.forEach(function (img) { img.addEventListener("load", mark); });
  window.addEventListener("load", mark);
  mark();
})();
"""


def escape(text) -> str:
    """`text` as HTML text (quotes too: it may stand in an attribute)."""
    return html.escape(str(text), quote=True)


def figure(fig, caption: str, *, dpi: int = FIGURE_DPI) -> str:
    """`fig` as a captioned <figure> whose image is a PNG data URI; the figure
    is closed (pyplot's figures are kept until closed). The PNG carries no
    metadata (matplotlib names itself with a URL there)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{escape(caption)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def cell(value) -> str:
    """One table cell's text: a whole number below 10^12 as an integer with
    thousands separators (16,384, never 1.638e+04), another float to 4
    significant digits (n/a where it is not finite), a bool as yes/no, anything
    else as its text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        return f"{value:,.0f}" if value == round(value) and abs(value) < 1e12 else f"{value:.4g}"
    if value is None:
        return ""
    return escape(value)


def table(rows: list[dict], columns: dict | None = None, *, caption: str = "") -> str:
    """`rows` as a <table>: `columns` maps a row key to its header (default:
    every key any row has, in first-seen order, as its own header); numbers
    are right-aligned, a key a row lacks is an empty cell."""
    if columns is None:
        columns = {}
        for r in rows:
            columns.update({k: k for k in r if k not in columns})
    head = "".join(f"<th>{escape(h)}</th>" for h in columns.values())
    body = []
    for r in rows:
        cells = []
        for k in columns:
            v = r.get(k)
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            cells.append(f'<td class="number">{cell(v)}</td>' if number else f"<td>{cell(v)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    title = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f"<table>{title}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def text(block: str) -> str:
    """Preformatted text: what a command prints, as it prints it."""
    return f"<pre>{escape(block.rstrip())}</pre>"


def paragraph(line: str) -> str:
    return f"<p>{escape(line)}</p>"


def columns(*parts: str) -> str:
    """Parts side by side where the window is wide enough (a table beside its figure)."""
    return f'<div class="columns">{"".join(f"<div>{p}</div>" for p in parts)}</div>'


def section(title: str, *parts: str) -> tuple[str, str]:
    """(title, body) of one section of `page`."""
    return title, "".join(parts)


def _anchor(title: str, i: int) -> str:
    return f"s{i}-" + "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def figures_in(body: str) -> int:
    """How many figures an HTML fragment holds (what the page's script counts)."""
    return body.count("<figure>")


def page(title: str, sections: list[tuple[str, str]], *, lines: tuple[str, ...] = ()) -> str:
    """The whole page: a header (`title`, then `lines` under it and a table of
    contents), the `sections` in order, the style and the drawing check inline."""
    bodies = "".join(f'<section id="{_anchor(t, i)}"><h2>{escape(t)}</h2>{b}</section>'
                     for i, (t, b) in enumerate(sections))
    toc = "".join(f'<a href="#{_anchor(t, i)}">{escape(t)}</a>'
                  for i, (t, _) in enumerate(sections))
    head = "".join(f"<p>{escape(line)}</p>" for line in lines)
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head>\n"
            f'<body data-figures="{figures_in(bodies)}" data-drawn="0">'
            f"<header><h1>{escape(title)}</h1>{head}<nav>{toc}</nav></header>\n"
            f"{bodies}\n<script>{_SCRIPT}</script></body></html>\n")
