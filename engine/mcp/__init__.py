"""MCP tools as OpenAI's Realtime API defines them (`type: "mcp"` session tools).

- rules.py: a session's servers and the tools they list, and the pure decisions
  (which tools are offered, which calls wait for approval), errors in OpenAI's shape.
- client.py: listing and calling over Streamable HTTP (`StreamableHttpMcp`, built
  once by server/app.py and handed to every session), or no server at all (`NoMcp`).
- tools.py: a session's servers (`McpTools`): listed into the conversation, offered
  to the model, routed back when it calls them.
- calls.py: a response's calls (`McpCalls`), run inside its response task.
"""
