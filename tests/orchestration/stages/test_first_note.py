"""The run's first note: written by ``prepare_run`` so that the run has a note row from its start.

Airflow 3.3.1 answers the UI's "Mark Dag Run as failed" on a run without a note row with 409 and applies half of it
(tests/orchestration/test_live_run_control.py shows it against a real scheduler); a run that has a note row from its
first task is marked failed in full.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sim2real.orchestration import run_note
from sim2real.orchestration.stages import run as run_stage
from sim2real.orchestration.params import RETRAIN_FIELD


@pytest.fixture
def notes(monkeypatch):
    written: list[dict] = []

    def fake_set_run_note(**kwargs):
        written.append(kwargs)
        return {"set": True, "via": "test", "error": None}

    monkeypatch.setattr(run_note, "set_run_note", fake_set_run_note)
    monkeypatch.setattr("sim2real.orchestration.config.load_environment", lambda: {"region": "us-east-1"})
    return written


def test_a_fresh_run_gets_its_note_in_its_first_task(notes):
    dag_run = SimpleNamespace(run_id="manual__1", conf={})
    run_stage._first_note("sim_to_real", dag_run, {"run_key": "sim-to-real-manual-1-abcd"})
    assert len(notes) == 1
    assert notes[0]["dag_id"] == "sim_to_real" and notes[0]["run_id"] == "manual__1"
    assert "sim-to-real-manual-1-abcd" in notes[0]["note"] and notes[0]["note"].strip()  # never empty: "" deletes


def test_a_retraining_round_keeps_the_note_it_was_created_with(notes):
    dag_run = SimpleNamespace(run_id="manual__2", conf={RETRAIN_FIELD: {"round": 2}})
    run_stage._first_note("sim_to_real", dag_run, {"run_key": "k"})
    assert notes == []

