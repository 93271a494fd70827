"""The emulated robots' field work: the domain gap changes the real MuJoCo model, the policy is served over the real
ZMQ protocol, every episode is recorded as a valid field episode (unit: no sandbox, real MuJoCo and sockets)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from sim2real.contract import field as contract
from sim2real.contract.modality import ModalityLayout
from sim2real.dev.sandbox.field_robot import NAMED_GAPS, DomainGap, run_field_episodes
from sim2real.edge.field_recorder import FieldRecorder

from tests.edge.edge_helpers import export_onnx, make_mlp

TASK = "Reacher-v5"  # observation 10, action 2; an episode is truncated at 50 steps


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> Path:
    """A toy Reacher policy exported as the trainer's exporter does: one ``observation`` → one ``action`` chunk."""
    return export_onnx(make_mlp(seed=1, state_dim=10, action_dim=2), tmp_path_factory.mktemp("p") / "policy.onnx",
                       state_dim=10, layout=ModalityLayout.flat(10, 2, action_horizon=4))


def _recorder(folder: Path) -> FieldRecorder:
    return FieldRecorder(folder, thing_name="robot-1", model_version="a" * 64, deployment_id="d-1",
                         component_versions={"com.sim2real.FieldUploader": "1.0.0"})


@pytest.mark.parametrize(("doc", "message"), [
    ({"mass": 2.0}, "unknown field(s) ['mass']"),
    ({"mass_scale": 0.0}, "mass_scale = 0.0 is outside [0.1, 10.0]"),
    ({"action_delay_steps": 1.5}, "action_delay_steps must be an integer, got 1.5"),
    ({"observation_noise_std": True}, "observation_noise_std must be a number, got True"),
    ({"action_delay_steps": 21}, "action_delay_steps = 21 is outside [0, 20]"),
])
def test_a_wrong_gap_is_refused_with_the_field_named(doc, message) -> None:
    with pytest.raises(ValueError) as err:
        DomainGap.from_dict(doc)
    assert message in str(err.value)


def test_the_gap_scales_the_mujoco_model() -> None:
    env, base = gymnasium.make(TASK), gymnasium.make(TASK)
    try:
        DomainGap(mass_scale=2.0, friction_scale=0.5, actuator_gain_scale=0.25).apply(env)
        got, want = env.unwrapped.model, base.unwrapped.model
        np.testing.assert_allclose(got.body_mass, want.body_mass * 2.0)
        np.testing.assert_allclose(got.geom_friction[:, 0], want.geom_friction[:, 0] * 0.5)
        np.testing.assert_allclose(got.geom_friction[:, 1:], want.geom_friction[:, 1:])  # torsional, rolling: as is
        np.testing.assert_allclose(got.actuator_gear[:, 0], want.actuator_gear[:, 0] * 0.25)
    finally:
        env.close()
        base.close()
    assert DomainGap.from_dict(NAMED_GAPS["severe"].to_dict()) == NAMED_GAPS["severe"]


def test_each_episode_is_served_over_the_protocol_and_spooled_as_a_valid_field_episode(policy, tmp_path) -> None:
    outcomes = run_field_episodes(model_path=policy, task_id=TASK, episodes=3, seed=7, gap=DomainGap(),
                                  recorder=_recorder(tmp_path))
    spooled = sorted(tmp_path.glob("*.json"))
    assert len(outcomes) == len(spooled) == 3
    for path, success in zip(spooled, outcomes, strict=True):
        doc = json.loads(path.read_text())
        assert contract.errors(doc) == []
        assert doc["steps"] == 50 and doc["outcome"] == {"success": success, "source": "task_success_fn"}
        assert 0 < doc["action_latency_ms"]["p50"] <= doc["action_latency_ms"]["max"]
    # the same seed, the same world: the same outcomes
    again = run_field_episodes(model_path=policy, task_id=TASK, episodes=3, seed=7, gap=DomainGap(),
                               recorder=_recorder(tmp_path / "again"))
    assert again == outcomes


def test_actions_reach_the_robot_late_by_the_gaps_delay(policy, tmp_path, monkeypatch) -> None:
    applied: list[np.ndarray] = []
    make = gymnasium.make

    def recording_make(task_id):
        env = make(task_id)
        step = env.step

        def recorded(action):
            applied.append(np.array(action))
            return step(action)
        env.step = recorded
        return env

    monkeypatch.setattr(gymnasium, "make", recording_make)
    run_field_episodes(model_path=policy, task_id=TASK, episodes=1, seed=7, gap=DomainGap(),
                       recorder=_recorder(tmp_path / "0"))
    undelayed, applied[:] = list(applied), []
    run_field_episodes(model_path=policy, task_id=TASK, episodes=1, seed=7, gap=DomainGap(action_delay_steps=2),
                       recorder=_recorder(tmp_path / "2"))
    assert not applied[0].any() and not applied[1].any()  # nothing to apply yet: zeros
    np.testing.assert_allclose(applied[2], undelayed[0], rtol=1e-6)  # the first observation's answer, 2 steps late


def test_a_recording_robot_keeps_what_the_policy_saw_and_the_action_applied(policy, tmp_path) -> None:
    """With record_data the episode's data file has one row per control step: the observation the policy got and
    the action applied (zeros first, the gap's delay), at the task's control rate."""
    import pyarrow.parquet as pq

    from sim2real.dev.sandbox.field_robot import recording_settings

    task, fps = recording_settings(TASK)
    assert (task, fps) == (TASK, 50.0)  # Reacher-v5: timestep 0.01 s, frame_skip 2
    recorder = FieldRecorder(tmp_path, thing_name="robot-1", model_version="a" * 64, deployment_id="d-1",
                             record_data=True, task=task, fps=fps, bucket="sim2real-artifacts-123456789012")
    run_field_episodes(model_path=policy, task_id=TASK, episodes=1, seed=7, gap=DomainGap(action_delay_steps=2),
                       recorder=recorder)
    (summary,) = tmp_path.glob("*.json")
    doc = json.loads(summary.read_text())
    table = pq.read_table(summary.with_suffix(".parquet"))
    assert contract.errors(doc) == [] and table.num_rows == doc["data_frames"] == doc["steps"] == 50
    states, actions = table.column("observation.state").to_pylist(), table.column("action").to_pylist()
    assert {len(s) for s in states} == {10} and actions[0] == actions[1] == [0.0, 0.0] and any(actions[2])
    env = gymnasium.make(TASK)
    try:
        first, _ = env.reset(seed=7)
    finally:
        env.close()
    np.testing.assert_allclose(states[0], first, rtol=1e-6)  # no noise in this world: the observation itself
    assert table.column("timestamp").to_pylist()[:2] == [0.0, pytest.approx(0.02)]
