"""The MCP server (stdio) exposing the memory tools."""
