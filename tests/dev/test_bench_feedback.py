"""The bench's feedback-loop rows (sim2real.dev.bench_feedback): what they say measured, and what they say recorded."""

from __future__ import annotations

from sim2real.dev import bench_feedback


def _result(seconds: float, load: float = 1.5, **extra) -> dict:
    return {"seconds": seconds, "returncode": 0, "load_before": load, "tail": "", **extra}


def test_rows_give_the_measured_times_with_the_load_and_label_a_recorded_suite_as_recorded():
    rows = dict(bench_feedback.rows({
        "lint_fresh": _result(21.4), "lint_warm": _result(3.2), "test_unit": _result(95.0, passed=1201),
        "suite": {**bench_feedback.RECORDED_SUITE, "seconds": 540.0, "when": "2026-12-03, 2 CPU", "recorded": True},
    }))
    assert rows["make lint, from an empty .venv-lint (venv build + ruff + lint-imports + reference check)"] == (
        "21 s (load average 1.5 before)")
    assert rows["make test-unit (1201 unit tests passed)"] == "95 s (load average 1.5 before)"
    assert rows[bench_feedback.RECORDED_SUITE["what"]] == "540 s (recorded, not measured: 2026-12-03, 2 CPU)"


def test_a_measured_suite_is_a_measured_row():
    rows = bench_feedback.rows({"lint_fresh": _result(20), "lint_warm": _result(3), "test_unit": _result(90, passed=1),
                                "suite": _result(580.0, 6.0, passed=1390)})
    assert rows[-1] == ("make test, whole suite (1390 passed)", "580 s (load average 6.0 before)")


def test_passed_reads_pytests_summary_line():
    assert bench_feedback._passed("== 1201 passed, 3 skipped, 2 deselected in 95.1s ==") == 1201
    assert bench_feedback._passed("no tests ran") is None
