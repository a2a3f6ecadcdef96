"""Tools served by `python -m runtime serve tests.attack_servers:registry` for
tests/test_attack_shared.py: a charge with a replay journal, as a payment service would serve it."""

from __future__ import annotations

from runtime import Dedupe, ToolRegistry, tool


@tool(dedupe=Dedupe(ttl=600), annotations={"idempotentHint": True})
def charge(order: str, amount: int) -> str:
    """Charge an order once (a repeated request with the same idempotency key is answered from
    the journal)."""
    return f"charged {amount} for {order}"


registry = ToolRegistry([charge])
