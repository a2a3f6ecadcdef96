"""Attacks on the shared-server promises (issue 42): a hostile tenant and failing stores. Each
test names a promise a hostile try broke on main, and is a strict xfail until it holds."""

from __future__ import annotations

import pytest
import trio

from runtime import ToolCall, open_runtime, tool


def C(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


# -- fair admission: one principal's burst cannot starve another's calls ------------------------


@pytest.mark.xfail(
    strict=True, reason="attack-1: fair=True orders the queue, but callers waiting for room are served FIFO"
)
async def test_fair_admission_holds_when_one_principal_fills_the_mailbox(
    autojump_clock: trio.abc.Clock,
) -> None:
    served: list[str] = []

    @tool(max_concurrency=1, mailbox_size=4)
    async def work(who: str, i: int) -> str:
        await trio.sleep(1)
        served.append(who)
        return who

    async with open_runtime([work], fair=True) as rt, trio.open_nursery() as nursery:
        for i in range(40):  # eve's burst: 40 concurrent requests, 4 fit the mailbox
            call = C(f"e{i}", "work", f'{{"who":"eve","i":{i}}}')
            nursery.start_soon(lambda call=call: rt.call(call, principal="eve"))
        await trio.sleep(0.5)
        result = await rt.call(C("b", "work", '{"who":"bob","i":0}'), principal="bob")
        assert result.ok
        nursery.cancel_scope.cancel()
    # deficit round robin: bob's call is served within a few turns, not after eve's whole burst
    assert served.index("bob") <= 6, served.index("bob")
