"""Small MCP servers written with the official SDK, run as real processes by the MCP tests."""
