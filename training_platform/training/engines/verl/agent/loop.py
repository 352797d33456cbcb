"""`platform_tool_agent`: verl 0.9.1's `ToolAgentLoop` with what an `agent:` job needs on top.

verl's loop (`verl/experimental/agent_loop/tool_agent_loop.py`) generates, parses hermes calls, runs them and
appends the tool messages (loss-masked) until the model answers without a call or a limit ends the episode. Ours:
- parses with our hermes codec (`data/tool_calls.py`, the one the demo template and the OpenAI route use): a
  malformed block becomes a call that answers with an error text (verl drops it silently, ending the episode), and
  is counted in `agent/malformed_calls`;
- gives each call a deadline (`tool_timeout_s` + `TIMEOUT_MARGIN_S`; the tool's own limit comes first) and the
  episode a budget of `max_tool_calls` calls (a call past it answers with an error text, unrun);
- records every turn - the assistant's text and calls, each tool's result - and the episode's counts in the
  trajectory's `extra_fields` (`EXTRA_KEYS`), which verl hands to the reward function (`extra_info`) and our
  trainer (metrics, rollout records).

A call is an error when the tool did not say `ok` (verl's own unknown-tool, bad-JSON and exception answers say
nothing, so they count), and its reward is then `tool_error_reward` (`tool_call_reward` when ok).
The episode's settings come from the `episode:` section of the tools YAML (agent/tools.py). verl makes one loop per
trajectory; the per-episode record lives in a context variable set by `run`, which the tool-call tasks inherit.

Relies on verl internals (`_handle_generating_state`, `_handle_processing_tools_state`, `_call_tool`, `AgentData`):
pinned to verl 0.9.1, and tests/training/test_verl_agent.py runs this loop against a scripted server.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.schemas import ToolResponse

from training_platform.data.tool_calls import TOOL_CALL_END, TOOL_CALL_START, parse
from training_platform.training.engines.verl.agent.tools import episode_settings

NAME = "platform_tool_agent"
MALFORMED = "<malformed tool call>"  # the name of the call a malformed block becomes (no tool can have it)
TIMEOUT_MARGIN_S = 1.0
EXTRA_KEYS = (
    "agent_turns",
    "agent_final_answer",
    "agent/turns",
    "agent/tool_calls",
    "agent/tool_errors",
    "agent/tool_latency_s",
    "agent/cut",
    "agent/malformed_calls",
    "agent/generated_tokens",
)
# a block, or an unclosed one running to the end (the codec counts both)
_BLOCK = re.compile(f"{re.escape(TOOL_CALL_START)}(?:.*?{re.escape(TOOL_CALL_END)}|.*\\Z)", re.DOTALL)


class PlatformHermesParser(ToolParser):
    """Hermes calls by our codec, in order; a malformed block (or an unclosed one) is a `MALFORMED` call whose
    arguments are the block's text, so the model is told rather than the episode ended."""

    @property
    def stop_token_ids(self) -> list[int]:
        return []  # the hf rollout refuses unknown sampling keys; hermes needs no stop ids

    async def extract_tool_calls(self, responses_ids, tools=None) -> tuple[str, list[FunctionCall]]:
        return self.parse_text(self.tokenizer.decode(responses_ids, skip_special_tokens=True))

    @staticmethod
    def parse_text(text: str) -> tuple[str, list[FunctionCall]]:
        content, _, _ = parse(text)
        calls: list[FunctionCall] = []
        for match in _BLOCK.finditer(text):
            block = match.group(0)
            found = parse(block)[1] if block.endswith(TOOL_CALL_END) else []
            if found:
                name, arguments = found[0]["name"], json.dumps(found[0]["arguments"], ensure_ascii=False)
                calls.append(FunctionCall(name=name, arguments=arguments))
            else:
                calls.append(FunctionCall(name=MALFORMED, arguments=block[:500]))
        return content, calls


@dataclass
class Episode:
    turns: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    errors: int = 0
    latency_s: float = 0.0
    malformed: int = 0
    cut: bool = False
    final_answer: str = ""


_EPISODE: ContextVar[Episode] = ContextVar("platform_tool_agent_episode")


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, TypeError):
        return raw


@register(NAME)
class PlatformToolAgentLoop(ToolAgentLoop):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        multi_turn = self.rollout_config.multi_turn
        if multi_turn.format != "hermes":
            raise ValueError(f"{NAME} reads hermes tool calls, not {multi_turn.format!r} (multi_turn.format)")
        self.tool_parser = PlatformHermesParser(self.tokenizer)
        settings = episode_settings(multi_turn.get("tool_config_path"))
        self.max_tool_calls = settings.max_tool_calls
        self.tool_timeout_s = settings.tool_timeout_s
        self.tool_call_reward = settings.tool_call_reward
        self.tool_error_reward = settings.tool_error_reward

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        episode = Episode()
        token = _EPISODE.set(episode)
        try:
            output = await super().run(sampling_params, priority, **kwargs)
        finally:
            _EPISODE.reset(token)
        output.extra_fields.update(
            {
                "agent_turns": episode.turns,
                "agent_final_answer": episode.final_answer,
                "agent/turns": sum(1 for t in episode.turns if t["role"] == "assistant"),
                "agent/tool_calls": episode.calls,
                "agent/tool_errors": episode.errors,
                "agent/tool_latency_s": round(episode.latency_s, 6),
                "agent/cut": int(episode.cut),
                "agent/malformed_calls": episode.malformed,
                "agent/generated_tokens": int(sum(output.response_mask)),
            }
        )
        return output

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        episode = _EPISODE.get()
        tokenizer: Any = self.tokenizer
        text = tokenizer.decode(agent_data.response_ids, skip_special_tokens=True)
        content, calls, malformed = parse(text)
        episode.malformed += malformed
        turn: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            turn["tool_calls"] = calls
        if malformed:
            turn["malformed_calls"] = malformed
        episode.turns.append(turn)
        episode.final_answer = content
        if state == AgentState.TERMINATED and (
            calls or malformed or len(agent_data.response_mask) >= self.response_length
        ):
            episode.cut = True  # a limit ended it: calls left unrun, or no room left
        return state

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
        state = await super()._handle_processing_tools_state(agent_data)
        if state == AgentState.TERMINATED:
            _EPISODE.get().cut = True  # the tool results did not fit in the response length
        return state

    async def _call_tool(
        self, tool_call: FunctionCall, tools_kwargs: dict[str, Any], agent_data: AgentData
    ) -> tuple[ToolResponse, float, dict]:
        episode = _EPISODE.get()
        episode.calls += 1
        start = time.perf_counter()
        res: dict[str, Any] = {}
        reward = 0.0
        if tool_call.name == MALFORMED:
            response = ToolResponse(
                text='error: malformed tool call: write <tool_call>{"name": NAME, "arguments": {...}}</tool_call>'
            )
        elif episode.calls > self.max_tool_calls:
            response = ToolResponse(text=f"error: no more tool calls in this episode (at most {self.max_tool_calls})")
        else:
            deadline = self.tool_timeout_s + TIMEOUT_MARGIN_S
            try:
                response, reward, res = await asyncio.wait_for(
                    super()._call_tool(tool_call, tools_kwargs, agent_data), timeout=deadline
                )
            except TimeoutError:
                response = ToolResponse(text=f"error: {tool_call.name} did not answer within {self.tool_timeout_s:g} s")
        ok = res.get("ok") is True
        latency = float(res.get("latency_s", time.perf_counter() - start))
        if not ok:
            episode.errors += 1
            reward = self.tool_error_reward if not res else reward
        episode.latency_s += latency
        episode.turns.append(
            {
                "role": "tool",
                "name": tool_call.name,
                "arguments": _arguments(tool_call.arguments),
                "content": response.text or "",
                "ok": ok,
                "latency_s": round(latency, 6),
                "reward": reward,
            }
        )
        return response, reward, res
