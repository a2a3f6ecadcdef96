"""LLM message adapters: the model's tool calls in, the runtime's results out.

`from runtime.providers import openai, anthropic, gemini`. Each adapter accepts the
provider SDK's objects or plain dicts (as the REST API sends them) and returns plain dicts
that the SDK's request types accept. No provider SDK is imported here.
"""

from . import anthropic as anthropic
from . import gemini as gemini
from . import openai as openai

__all__ = ["anthropic", "gemini", "openai"]
