"""benchmarks/hostile.py's classifier and runner: a clean refusal passes, and a NaN at
exit 0, a second stderr line, a traceback, another internal error, a crash and a
timeout are hard failures (so the harness cannot pass everything silently)."""

import importlib.util
import sys
from pathlib import Path

from codesign.cli import REPORT

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hostile", ROOT / "benchmarks" / "hostile.py")
hostile = sys.modules.setdefault("hostile", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(hostile)  # registered first: its dataclasses look their module up
Outcome = hostile.Outcome


def test_the_classifier_tells_clean_outcomes_from_hard_failures():
    clean = [Outcome(rc=0, stdout='{"step_time_s": 1.5e+01, "x": 2e-300}\n'),
             Outcome(rc=0, stdout="infeasible: InfiniBand 1e5 fits\n",
                     written=[("fit.toml", "bandwidth_Bps = 3.0e+09\n")]),
             Outcome(rc=2, stderr="codesign estimate: error: model.layers=nan must be ...\n"),
             Outcome(rc=3, stderr="\ncodesign optimize: nothing feasible\n"),
             Outcome(rc=1, stderr="codesign estimate: internal error: OutputOutOfRange: the "
                                  f"estimate's mfu=1.2 exceeds 1; {REPORT}\n")]
    for o in clean:
        assert hostile.classify(o) is None, o
    failures = {
        "non-finite number in stdout": Outcome(rc=0, stdout="time_s NaN\n"),
        "non-finite number in out.json": Outcome(rc=0, written=[("out.json", '{"t": -Infinity}')]),
        "non-finite number in stdout ": Outcome(rc=0, stdout="busbw 1e999 GB/s\n"),
        "2 non-empty stderr lines at exit 2": Outcome(rc=2, stderr="error: a\nerror: b\n"),
        "0 non-empty stderr lines at exit 3": Outcome(rc=3, stderr=""),
        "traceback": Outcome(rc=2, stderr="Traceback (most recent call last):\n"),
        "internal error (TypeError)": Outcome(rc=1, stderr="codesign calibrate: internal error: "
                                                           f"TypeError: int; {REPORT}\n"),
        "exit code 130": Outcome(rc=130, stderr="codesign sweep: interrupted\n"),
        "killed by SIGSEGV": Outcome(rc=-11),
        "timeout": Outcome(rc=-9, timed_out=True),
        "results.csv changed": Outcome(rc=2, stderr="one line\n",
                                       problems=["results.csv changed"]),
    }
    for want, o in failures.items():
        why = hostile.classify(o)
        assert why is not None and want.strip() in why, (want, why)
    # hex digests are not numbers that overflow
    assert hostile.non_finite('"sha256": "2518e1287db7", "id": "523e4873f3"') is None


def test_the_runner_reports_a_fake_command_that_prints_nan_at_exit_0(tmp_path):
    py = sys.executable
    cases = [hostile.Case("cli/fake nan", command=(py, "-c", "print(float('nan'))")),
             hostile.Case("cli/fake refusal", command=(py, "-c", "import sys; sys.stderr.write("
                                                             "'codesign x: error: bad\\n'); "
                                                             "sys.exit(2)")),
             hostile.Case("cli/fake hang", command=(py, "-c", "import time; time.sleep(60)"),
                          timeout_s=1),
             hostile.Case("data/fake writer", command=(py, "-c", "open('o.csv', 'w').write("
                                                           "'a,b\\n1,inf\\n')")),
             hostile.Case("sweep/fake message", command=(py, "-c", "import sys; sys.stderr."
                                                               "write('x=1\\n'); sys.exit(2)"),
                          expect=hostile.stderr_has("1.0000001"))]
    results = hostile.run_cases(cases, workers=2, folder=tmp_path / "cases")
    why = {case.name: w for case, _, w in results}
    assert "non-finite number in stdout" in why["cli/fake nan"]
    assert why["cli/fake refusal"] is None
    assert why["cli/fake hang"].startswith("timeout")
    assert "non-finite number in o.csv" in why["data/fake writer"]
    assert why["sweep/fake message"] == "the message does not say '1.0000001'"
    summary = hostile.report(results, 1.0)
    assert summary["total"] == {"tried": 5, "clean": 1, "failed": 4}
    assert summary["categories"]["cli"] == {"tried": 3, "clean": 1, "failed": 2}


def test_the_import_and_program_census_is_clean():
    """The census's `import` category (18 hostile files: nesting, alias bombs,
    a doubled shell variable, a --moe-layer-freq past the stack, long numbers,
    values of the wrong kind, a byte-order mark, an empty override file, an
    unknown registry entry; in every importer) and `program` category (10: the
    user's code failing, a 1e12 x 1e12 array, a mesh axis twice, a spec nested
    too deep, a huge scale), run as the benchmark runs (each case in a forked
    child under a memory limit): every one clean."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hostile.py"),
                           "--category", "import", "--category", "program"],
                          capture_output=True, text=True, timeout=300, check=True)
    summary = json.loads(done.stdout)
    assert summary["total"]["tried"] >= 28
    assert summary["total"]["failed"] == 0, summary["failed"]
