"""The agent tools (training/tools/): the registry and its schemas (valid for verl), the calculator (bounded, never
`eval`), python in the bubblewrap sandbox (no host files, killed at its timeout, output cut) and http_endpoint
(operator-named endpoints only, the key to the endpoint's own origin only). Whatever the model sends, a call answers
with a ToolResult, never an exception."""

from __future__ import annotations

import builtins
import json
import os
import time

import pytest
from judge_helpers import JudgeServer
from pydantic import Field, ValidationError
from tools_helpers import StubChatServer

from training_platform.training import tools as registry
from training_platform.training.tools import (
    MAX_ARGS_CHARS,
    MAX_RESULT_CHARS,
    NoParams,
    ToolArgs,
    ToolResult,
    build_tool,
    call_tool,
    register_tool,
    tool_names,
    tool_schema,
)
from training_platform.training.tools import python as python_tool

pytestmark = pytest.mark.unit

SECRET = "sk-tool-" + "0123456789abcdef"
HTTP = {"endpoint": "local", "model": "m1"}


def calc(expression) -> ToolResult:
    return call_tool("calculator", None, {"expression": expression}, 5.0)


# ---------------------------------------------------------------------------------------------- registry


def test_every_tool_has_a_schema_verl_accepts():
    from verl.tools.schemas import OpenAIFunctionToolSchema

    assert {"calculator", "python", "http_endpoint"} <= set(tool_names())
    for name in tool_names():
        params = HTTP if name == "http_endpoint" else None
        schema = tool_schema(name, params)
        parsed = OpenAIFunctionToolSchema.model_validate(schema)
        assert parsed.model_dump(exclude_unset=True, exclude_none=True) == schema, "nothing dropped by verl's model"
        assert schema["function"]["name"] == name and schema["function"]["description"]
        assert schema["function"]["parameters"]["required"], name
    assert tool_schema("calculator")["function"]["parameters"]["properties"] == {
        "expression": {
            "type": "string",
            "description": "Arithmetic on numbers with + - * / // % ** and parentheses, e.g. 37*48 (at most 200 "
            "characters)",
        }
    }
    described = tool_schema("http_endpoint", {**HTTP, "description": "Look a word up in the dictionary."})
    assert described["function"]["description"] == "Look a word up in the dictionary."


def test_params_are_checked_and_registration_refuses_what_a_schema_cannot_say():
    for bad in ({"endpoint": "http://evil.test/v1", "model": "m"}, {"endpoint": "a b", "model": "m"}, {"model": "m"}):
        with pytest.raises(ValidationError):
            tool_schema("http_endpoint", bad)
    with pytest.raises(ValidationError):
        build_tool("calculator", {"unknown": 1})
    with pytest.raises(ValidationError):
        build_tool("python", {"memory_mb": 10})
    with pytest.raises(KeyError, match="known tools: calculator, http_endpoint, python"):
        build_tool("no_such_tool")

    class Nested(ToolArgs):
        inner: dict[str, int] = Field(description="an object")

    with pytest.raises(TypeError, match="not a flat JSON type"):
        register_tool("nested", Nested, NoParams, "x")
    with pytest.raises(ValueError, match="already registered"):
        register_tool("calculator", registry.calculator.CalculatorArgs, NoParams, "again")(lambda p: None)
    assert "nested" not in tool_names()


def test_whatever_the_model_sends_is_an_error_result_never_an_exception():
    cases = {
        "not json": "{expression: 1}",
        "an array": "[1, 2]",
        "a number": "5",
        "too long": json.dumps({"expression": "1" * MAX_ARGS_CHARS}),
        "wrong type (no coercion)": '{"expression": 5}',
        "unknown key": '{"expression": "1+1", "mode": "fast"}',
        "missing key": "{}",
        "deeply nested": '{"expression": ' + "[" * 5000 + "]" * 5000 + "}",
    }
    for what, raw in cases.items():
        result = call_tool("calculator", None, raw, 5.0)
        assert isinstance(result, ToolResult) and not result.ok, what
        assert result.text.startswith("error: calculator: "), (what, result.text)
    assert "expression: Input should be a valid string" in call_tool("calculator", None, '{"expression": 5}', 1).text
    assert not call_tool("calculator", None, ["1+1"], 1.0).ok  # type: ignore[arg-type]
    unknown = call_tool("rm_rf", None, "{}", 1.0)
    assert not unknown.ok and "unknown tool 'rm_rf'" in unknown.text and "calculator" in unknown.text
    with pytest.raises(ValueError, match="timeout_s"):  # the job's setting, checked by the config: a bug here
        call_tool("calculator", None, '{"expression": "1"}', 61.0)


def test_a_failing_tool_is_an_error_result_and_long_output_is_cut(monkeypatch):
    class Args(ToolArgs):
        n: int = Field(description="how many")

    def build(params):
        def run(args, *, timeout_s):
            if args.n < 0:
                raise RuntimeError("boom")
            return ToolResult("y" * args.n, True, latency_s=123.0)

        return run

    monkeypatch.setattr(registry, "TOOLS", dict(registry.TOOLS))
    register_tool("test_echo", Args, NoParams, "echo")(build)
    failed = call_tool("test_echo", None, {"n": -1}, 1.0)
    assert (failed.ok, failed.text) == (False, "error: test_echo failed: RuntimeError: boom")
    long = call_tool("test_echo", None, {"n": 3 * MAX_RESULT_CHARS}, 1.0)
    assert long.ok and len(long.text) == MAX_RESULT_CHARS and long.text.endswith("more characters]")
    assert long.latency_s < 5, "call_tool measures the latency itself"


# ---------------------------------------------------------------------------------------------- calculator


def test_calculator_computes_exactly():
    cases = {
        "37*48": "1776",
        " (1 + 2) * 3 ": "9",
        "7/2": "3.5",
        "6/2": "3",
        "17//5": "3",
        "17 % 5": "2",
        "-(2**10)": "-1024",
        "+4 - -3": "7",
        "2**-1": "0.5",
        "2**64": str(2**64),
        "1.5e3 * 2": "3000",
        "123456789 * 987654321": str(123456789 * 987654321),
    }
    for expression, expected in cases.items():
        result = calc(expression)
        assert (result.text, result.ok) == (expected, True), expression


def test_calculator_refuses_everything_but_bounded_arithmetic(monkeypatch):
    def no_eval(*args, **kwargs):
        raise AssertionError("the calculator must never call eval")

    monkeypatch.setattr(builtins, "eval", no_eval)
    monkeypatch.setattr(builtins, "exec", no_eval)
    refused = {
        "x + 1": "found a name",
        "abs(-1)": "found a call",
        "__import__('os').system('id')": "found a call",
        "(1).real": "found a attribute",
        "[1, 2][0]": "found a subscript",
        "1 < 2": "found a compare",
        "lambda: 1": "found a lambda",
        "True + 1": "only numbers are allowed, not bool",
        "'a' * 3": "only numbers are allowed, not str",
        "1j * 2": "only numbers are allowed, not complex",
        "2**65": "exponents are at most 64",
        "10**64**2": "exponents are at most 64",
        "10**60 * 10**60": "larger than 1e+100",
        "1e300": "larger than 1e+100",
        "9" * 150: "larger than 1e+100",
        "1.5 ** 64 ** 1": "",  # allowed: 64 is the limit
        "1/0": "division by zero",
        "5 % 0": "division by zero",
        "(-8) ** 0.5": "not a real number",
        "1 +": "not an arithmetic expression",
        "(" * 120 + "1": "not an arithmetic expression",
        "(" * 99 + "-1" + ")" * 99: "",  # deep but bounded by the length
        "1; 2": "not an arithmetic expression",
    }
    for expression, reason in refused.items():
        result = calc(expression)
        if not reason:
            assert result.ok, expression
            continue
        assert not result.ok and reason in result.text, (expression, result.text)
    too_long = calc("1+" * 100 + "1")  # 201 characters: refused by the schema before the calculator runs
    assert not too_long.ok and "at most 200 characters" in too_long.text


# ---------------------------------------------------------------------------------------------- python


@pytest.fixture(scope="module")
def sandbox_ok():
    """The python tool runs only with working bubblewrap isolation (it fails closed without it), as the
    evaluation's sandbox tests: without it these fail with instructions; TP_SKIP_SANDBOX_TESTS=1 skips them."""
    from training_platform.evaluation.sandbox import detect_isolation

    info = detect_isolation()
    if not info.available:
        if os.environ.get("TP_SKIP_SANDBOX_TESTS") == "1":
            pytest.skip(f"sandbox isolation unavailable: {info.reason}")
        pytest.fail(f"sandbox isolation unavailable: {info.reason} -- apt-get install -y bubblewrap")
    return info


def py(code: str, timeout_s: float = 10.0, **params) -> ToolResult:
    return call_tool("python", params, {"code": code}, timeout_s)


def test_python_runs_in_the_sandbox_without_host_files_or_network(sandbox_ok, monkeypatch):
    monkeypatch.delenv("TP_SANDBOX_ALLOW_UNSAFE", raising=False)
    monkeypatch.setenv("TOOL_TEST_SECRET", SECRET)
    assert py("print(6 * 7)").text == "42\n"
    assert python_tool.sandbox().isolation == "bwrap"
    hostname = py("print(open('/etc/hostname').read())")
    assert not hostname.ok and "FileNotFoundError" in hostname.text and hostname.text.endswith("[exit status 1]")
    env = py("import os; print(os.environ.get('TOOL_TEST_SECRET'))")
    assert env.ok and env.text == "None\n", "the caller's environment does not reach the program"
    net = py("import socket\ns = socket.create_connection(('1.1.1.1', 53), timeout=2)\nprint('connected')")
    assert not net.ok and "connected" not in net.text
    failed = py("import sys; sys.exit(3)")
    assert (failed.ok, failed.text) == (False, "[exit status 3]")


def test_python_is_killed_at_its_timeout_and_its_output_is_cut(sandbox_ok):
    start = time.monotonic()
    hang = py("while True: pass", timeout_s=1.5)
    took = time.monotonic() - start
    assert not hang.ok and hang.text == "[killed: it ran past 1.5s]"
    assert 1.4 < took < 4.0 and 1.4 < hang.latency_s < 4.0, took
    sleeper = py("import time\nprint('started', flush=True)\ntime.sleep(60)", timeout_s=1.0)
    assert not sleeper.ok and sleeper.text == "started\n[killed: it ran past 1s]"
    flood = py("print('x' * 100_000)", max_output_chars=100)
    assert flood.ok and flood.text == "x" * 100 + "\n[output truncated]"
    assert len(py("print('y' * 10_000_000)").text) < 2100, "the default cut is 2000 characters"
    noisy = py(
        "import sys\nprint('out')\nsys.stderr.write('noise\\n' * 1000)\nraise ValueError('the end')",
        max_output_chars=100,
    )
    assert noisy.text.startswith("out\n") and "ValueError: the end\n[output truncated]\n[exit status 1]" in noisy.text


def test_a_cut_keeps_the_head_of_stdout_and_the_tail_of_stderr():
    cut = python_tool._cut
    assert cut("ab", "cd", 100) == "abcd"
    assert cut("x" * 1000, "", 100) == "x" * 100
    assert cut("out\n", "e" * 6000, 100) == "out\n" + "e" * 96, "stderr takes what stdout leaves"
    assert cut("x" * 1000, "err", 100) == "x" * 97 + "err"
    assert cut("x" * 1000, "e" * 999 + "!", 100) == "x" * 50 + "e" * 49 + "!", "half each when both overflow"


def test_python_fails_closed_without_isolation(monkeypatch, tmp_path):
    from training_platform.evaluation import sandbox as sandbox_mod

    monkeypatch.setenv(sandbox_mod.ENV_BWRAP, str(tmp_path / "no-bwrap"))
    monkeypatch.delenv(sandbox_mod.ENV_ALLOW_UNSAFE, raising=False)
    monkeypatch.setattr(python_tool, "_sandbox", None)
    try:
        sandbox_mod.detect_isolation(refresh=True)
        result = py("print(1)")
        assert not result.ok and "SandboxUnavailable" in result.text and "refusing to run untrusted code" in result.text
    finally:
        monkeypatch.delenv(sandbox_mod.ENV_BWRAP)
        sandbox_mod.detect_isolation(refresh=True)


# ---------------------------------------------------------------------------------------------- http_endpoint


def endpoints_env(monkeypatch, url: str, models=("m1",)) -> None:
    spec = {"base_url": url, "api_key_env": "TOOL_TEST_KEY", "models": list(models)}
    monkeypatch.setenv("TP_ENDPOINTS", json.dumps({"local": spec}))
    monkeypatch.setenv("TOOL_TEST_KEY", SECRET)


def ask(query="What is 2+3?", timeout_s=5.0, **params) -> ToolResult:
    return call_tool("http_endpoint", {**HTTP, **params}, {"query": query}, timeout_s)


def test_http_endpoint_asks_the_named_endpoint_with_its_key(monkeypatch):
    with StubChatServer(key=SECRET) as server:
        endpoints_env(monkeypatch, server.url)
        result = ask(system="Answer briefly.", max_tokens=32)
        assert result == ToolResult("stub answer", True, result.latency_s)
        request = server.requests[-1]
        assert request["path"] == "/v1/chat/completions"
        assert request["headers"]["Authorization"] == f"Bearer {SECRET}"
        assert request["body"] == {
            "model": "m1",
            "messages": [
                {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "What is 2+3?"},
            ],
            "max_tokens": 32,
            "temperature": 0.0,
        }
        server.content = "z" * 5000
        assert ask(max_output_chars=100).text.endswith("more characters]")

        monkeypatch.setenv("TOOL_TEST_KEY", "sk-wrong")
        refused = ask()
        assert not refused.ok and refused.text == "error: endpoint 'local' (model 'm1') answered HTTP 401"


def test_http_endpoint_refuses_unknown_endpoints_models_redirects_and_bad_replies(monkeypatch):
    monkeypatch.delenv("TP_ENDPOINTS", raising=False)
    monkeypatch.delenv("TP_ENDPOINTS_FILE", raising=False)
    unknown = ask()
    assert not unknown.ok and "unknown endpoint 'local'" in unknown.text
    with StubChatServer(key=SECRET) as server, StubChatServer() as elsewhere:
        endpoints_env(monkeypatch, server.url)
        texts = []
        other_model = call_tool("http_endpoint", {**HTTP, "model": "m2"}, {"query": "q"}, 5.0)
        assert not other_model.ok and "serves 'm1'; not 'm2'" in other_model.text
        server.location = elsewhere.url + "/chat/completions"
        redirected = ask()
        assert not redirected.ok and "HTTP 302" in redirected.text
        assert elsewhere.requests == [], "a redirect is never followed: the key stays with its endpoint"
        server.location = None
        for status, content, size, expected in (
            (500, "x", None, "answered HTTP 500"),
            (200, None, None, "a reply without a message"),
            (200, "x", 10, "not JSON"),
            (200, "x", (1 << 20) + 10, "over 1048576 bytes"),
        ):
            server.status, server.content, server.size = status, content, size
            result = ask()
            assert not result.ok and expected in result.text, (expected, result.text)
            texts.append(result.text)
        server.status, server.content, server.size, server.delay_s = 200, "late", None, 3.0
        start = time.monotonic()
        slow = ask(timeout_s=0.5)
        assert not slow.ok and "did not answer within 0.5s" in slow.text
        assert time.monotonic() - start < 2.5
        texts += [unknown.text, other_model.text, redirected.text, slow.text]
    for text in texts:
        assert SECRET not in text and "127.0.0.1" not in text, text


def test_http_endpoint_against_the_generating_judge_server(data_dir, monkeypatch):
    """llm_judge's test server (the demo model, answering one digit, demanding its key) as the tool's endpoint."""
    with JudgeServer(data_dir / "demo" / "model", key=SECRET) as judge:
        endpoints_env(monkeypatch, judge.url)
        result = ask("Grade 2+3=5 from 0 to 9.", timeout_s=30.0)
        assert result.ok and result.text.isdigit() and judge.calls == 1 and judge.unauthorized == 0
        monkeypatch.delenv("TOOL_TEST_KEY")
        assert not ask(timeout_s=30.0).ok and judge.unauthorized == 1
