"""The field bench measures what it says: the production canary trigger's listings, the operator's time before it
defers, and the ingestion of real episode objects (moto's S3 over a socket)."""

from __future__ import annotations

from sim2real.dev import bench_field


def test_the_canary_wait_lists_each_robot_once_a_poll_and_the_anchor_reads_every_object():
    result = bench_field.canary_wait(polls=3)
    assert result["status"] == "timeout"  # the objects are older than the window: nothing counts, the wait goes on
    assert result["ours_calls"] == 3 * len(bench_field.ROBOTS)
    assert result["anchor_calls"] == 3 * (1 + result["objects"])  # one listing page and every object, each poll
    assert result["ours_per_hour"] == result["ours_calls"] / 3 * 3600 / bench_field.FIELD_POLL_AWS


def test_the_verdict_defers_at_once_and_ingestion_reads_and_accepts_every_episode():
    assert 0 < bench_field.worker_slot_seconds()["execute_s"] < 30
    result = bench_field.ingestion(episodes=20)
    assert (result["accepted"], result["refused"], result["n"]) == (20, 0, 20)
    names = [name for name, _ in bench_field.rows({"canary_wait": bench_field.canary_wait(polls=1),
                                                   "worker_slot": {"execute_s": 0.1, "window_s": 3600},
                                                   "ingestion": result})]
    assert len(names) == 3 and names[0].startswith("canary wait, S3 calls per waiting hour")
