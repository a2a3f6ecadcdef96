"""Tools whose return annotations are looser than their values, as real code's often are (issue 46).

Imported by reference: served over MCP (`python -m runtime serve tests.loose_tools:registry`) and
run in worker processes (`Subprocess`) by tests/test_loose_results.py.
"""

from __future__ import annotations

from typing import Dict, Union  # noqa: UP035 - written as the BFCL classes write them

from runtime import ToolRegistry, tool
from runtime.placement import Subprocess


@tool
def notify(receiver_id: str, message: str) -> Dict[str, Union[str, bool]]:  # noqa: UP006, UP007
    """Send a message (BFCL's MessageAPI: the annotation says str or bool, the value holds a dict)."""
    return {"sent_status": True, "message_id": {"new_id": 7}, "message": f"to {receiver_id}: {message}"}


@tool
def rate(base: str, target: str) -> float:
    """An exchange rate (annotated `float`, returns a dict)."""
    return {"rate": 1.1, "pair": f"{base}/{target}"}  # type: ignore[return-value]


@tool(placement=Subprocess(workers=1))
def placed_rate(base: str, target: str) -> float:
    """`rate`, in a worker process."""
    return {"rate": 1.1, "pair": f"{base}/{target}"}  # type: ignore[return-value]


registry = ToolRegistry([notify, rate])
