"""Describes shared by the waits of one event loop (sim2real.orchestration.events.shared), and the Batch trigger's
DescribeJobs split per job: no timing is asserted (the gather window only decides who shares a call)."""

from __future__ import annotations

import asyncio

import pytest

from sim2real.orchestration.events.shared import SharedDescribe, shared_describe
from sim2real.orchestration.triggers.batch import _describe_jobs


class Recorder:
    """A list call that records its id lists and answers each id with its own response."""

    def __init__(self, fail: BaseException | None = None, block: asyncio.Event | None = None) -> None:
        self.calls: list[list[str]] = []
        self.clients: list[str] = []
        self.fail = fail
        self.block = block
        self.started = asyncio.Event()

    async def __call__(self, client, ids):
        self.calls.append(list(ids))
        self.clients.append(client)
        self.started.set()
        if self.block is not None:
            await self.block.wait()
        if self.fail is not None:
            raise self.fail
        return {i: {"jobs": [{"jobId": i, "status": "RUNNING"}]} for i in ids}


def test_describes_asked_together_share_one_call_and_each_gets_its_own_answer() -> None:
    call = Recorder()

    async def scenario():
        shared = SharedDescribe(call, gather_seconds=0.05)
        answers = await asyncio.gather(*(shared(f"client-{i}", f"job-{i % 7}") for i in range(30)))
        return shared, answers

    shared, answers = asyncio.run(scenario())
    assert call.calls == [[f"job-{i}" for i in range(7)]]          # 30 describes of 7 jobs: one call
    assert call.clients == ["client-0"]                            # the leader's client
    assert [a["jobs"][0]["jobId"] for a in answers] == [f"job-{i % 7}" for i in range(30)]
    assert (shared.calls, shared.describes) == (1, 30)


def test_a_call_takes_at_most_max_ids_and_later_describes_start_the_next_round() -> None:
    call = Recorder()

    async def scenario():
        shared = SharedDescribe(call, gather_seconds=0.05, max_ids=3)
        return await asyncio.gather(*(shared("c", f"job-{i}") for i in range(7)))

    answers = asyncio.run(scenario())
    assert sorted(len(ids) for ids in call.calls) == [1, 3, 3]
    assert sorted(i for ids in call.calls for i in ids) == sorted(f"job-{i}" for i in range(7))
    assert [a["jobs"][0]["jobId"] for a in answers] == [f"job-{i}" for i in range(7)]


def test_an_error_of_the_shared_call_reaches_every_wait_that_shared_it() -> None:
    call = Recorder(fail=RuntimeError("ThrottlingException"))

    async def scenario():
        shared = SharedDescribe(call, gather_seconds=0.05)
        return await asyncio.gather(*(shared("c", f"job-{i}") for i in range(4)), return_exceptions=True)

    results = asyncio.run(scenario())
    assert len(call.calls) == 1
    assert [type(r).__name__ for r in results] == ["RuntimeError"] * 4


def test_a_cancelled_leader_hands_the_others_back_to_a_call_of_their_own() -> None:
    async def scenario():
        block = asyncio.Event()
        call = Recorder(block=block)
        shared = SharedDescribe(call, gather_seconds=0.01)
        leader = asyncio.ensure_future(shared("leader-client", "job-0"))
        await asyncio.sleep(0)
        others = [asyncio.ensure_future(shared(f"client-{i}", f"job-{i}")) for i in (1, 2)]
        await call.started.wait()                 # the leader's call is in flight (blocked)
        leader.cancel()
        block.set()
        answers = await asyncio.gather(*others)
        with pytest.raises(asyncio.CancelledError):
            await leader
        return call, answers

    call, answers = asyncio.run(scenario())
    assert call.calls[0] == ["job-0", "job-1", "job-2"]
    assert sorted(map(tuple, call.calls[1:])) == [("job-1",), ("job-2",)]   # each with its own client
    assert sorted(call.clients[1:]) == ["client-1", "client-2"]
    assert [a["jobs"][0]["jobId"] for a in answers] == ["job-1", "job-2"]


def test_one_shared_describe_per_loop_and_key() -> None:
    call = Recorder()

    async def scenario():
        return shared_describe(("DescribeJobs", "a"), call), shared_describe(("DescribeJobs", "a"), call), \
            shared_describe(("DescribeJobs", "b"), call)

    first = asyncio.run(scenario())
    second = asyncio.run(scenario())
    assert first[0] is first[1] and first[0] is not first[2]
    assert second[0] is not first[0]                                   # another loop, another one


def test_describe_jobs_split_gives_each_job_what_a_call_of_its_own_gives() -> None:
    class Client:
        def __init__(self) -> None:
            self.asked: list[list[str]] = []

        async def describe_jobs(self, jobs):
            self.asked.append(jobs)
            return {"jobs": [{"jobId": j, "status": "SUCCEEDED"} for j in jobs if j != "gone"],
                    "ResponseMetadata": {"HTTPStatusCode": 200}}

    client = Client()
    split = asyncio.run(_describe_jobs(client, ["a", "gone", "b"]))
    assert client.asked == [["a", "gone", "b"]]
    assert split["a"] == {"jobs": [{"jobId": "a", "status": "SUCCEEDED"}], "ResponseMetadata": {"HTTPStatusCode": 200}}
    assert split["gone"]["jobs"] == [] and split["b"]["jobs"][0]["jobId"] == "b"
