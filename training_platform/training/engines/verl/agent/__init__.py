"""verl's agent loop with our tools (`agent:` of an RL job, docs/plans/agentic-rl.md):

- tools.py: `PlatformTool`, verl's `BaseTool` over our tool registry (training/tools), and the tools YAML verl
  reads at `multi_turn.tool_config_path` (`write_tools_config`, with the episode limits our loop reads);
- loop.py: `PlatformToolAgentLoop`, verl's `ToolAgentLoop` (registered as `platform_tool_agent` by the plugin)
  with a deadline per call, the episode's call budget, malformed calls counted, and each turn recorded in the
  trajectory's `extra_fields`.
"""
