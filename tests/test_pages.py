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


HF = __import__("pathlib").Path(__file__).parent / "fixtures" / "import" / "hf"


def test_import_out_never_overwrites_its_own_input_nor_follows_a_link(tmp_path, capsys):
    import os
    import shutil

    from codesign.cli import main

    config = tmp_path / "config.json"
    shutil.copy(sorted(HF.glob("*.json"))[0], config)
    before = config.read_bytes()
    assert main(["import", "hf", str(config), "--out", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and config.read_bytes() == before
    target = tmp_path / "elsewhere.toml"
    target.write_text("kept\n")
    os.symlink(target, tmp_path / "link.toml")
    assert main(["import", "hf", str(config), "--out", str(tmp_path / "link.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "link" in err and target.read_text() == "kept\n"
    out = tmp_path / "scenario.toml"
    assert main(["import", "hf", str(config), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n" and "[model]" in out.read_text()


def test_a_worker_log_is_created_0600_and_a_planted_link_is_refused(tmp_path):
    import os
    import stat

    from codesign.execute import distributed

    log = tmp_path / "worker0.log"
    with distributed.open_log(log) as f:
        f.write(b"x")
        f.seek(0)
        assert f.read() == b"x"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    victim = tmp_path / "victim"
    victim.write_text("kept")
    os.symlink(victim, tmp_path / "worker1.log")
    with pytest.raises(ValueError, match="worker1.log' is a symbolic link"):
        distributed.open_log(tmp_path / "worker1.log")
    assert victim.read_text() == "kept"
