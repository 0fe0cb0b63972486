"""MCP servers and their tools (Qt-free): configuration, connections, approval, loop guard."""
