"""Generation backends: transformers (batching, stops, chat template, sampling seeds, log-likelihood), an
OpenAI-compatible endpoint (a local fake server), and the vLLM import guard."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from eval_helpers import read_jsonl, write_jsonl

from training_platform.evaluation.generation import (
    GenerationRequest,
    OpenAIBackend,
    SamplingParams,
    VLLMBackend,
    cut_at_stop,
)

PROMPTS = [
    "What is 2+3?",
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "1+1=",
    "Add the two numbers.\n\n3+4",
    "x",
    "Question: 12+7=\nAnswer:",
]


@pytest.mark.unit
def test_cut_at_stop():
    assert cut_at_stop("abc\nQuestion: x", ["Question:"]) == ("abc\n", True)
    assert cut_at_stop("a#b!c", ["!", "#"]) == ("a", True)  # the earliest stop wins
    assert cut_at_stop("abc", ["", "z"]) == ("abc", False)


@pytest.mark.integration
def test_batched_left_padded_greedy_equals_one_by_one(tiny_backend):
    import torch

    torch.set_num_threads(1)
    requests = [GenerationRequest(prompt=p) for p in PROMPTS]
    params = SamplingParams(max_new_tokens=12)
    tiny_backend.batch_size = 4
    batched = tiny_backend.generate(requests, params)
    tiny_backend.batch_size = 1
    single = tiny_backend.generate(requests, params)
    tiny_backend.batch_size = 4
    assert [g[0].text for g in batched] == [g[0].text for g in single]
    assert all(g[0].latency_s > 0 and g[0].finish_reason in ("length", "eos") for g in batched)


@pytest.mark.integration
def test_stop_sequences_cut_the_output(tiny_backend):
    requests = [GenerationRequest(prompt=p) for p in PROMPTS]
    free = tiny_backend.generate(requests, SamplingParams(max_new_tokens=12))
    for request, gens in zip(requests, free, strict=True):
        text = gens[0].text
        if len(text) < 6:
            continue
        stop = text[3:5]
        stopped = tiny_backend.generate([request], SamplingParams(max_new_tokens=12, stop=(stop,)))[0][0]
        assert stopped.text == text[: text.index(stop)]
        assert stopped.finish_reason == "stop"


@pytest.mark.integration
def test_chat_template_on_and_off(tiny_backend):
    chat = GenerationRequest(messages=[{"role": "user", "content": "3+4="}])
    assert tiny_backend.supports_chat()
    assert tiny_backend.render(chat) == "<|im_start|>user\n3+4=<|im_end|>\n<|im_start|>assistant\n"
    assert tiny_backend.render(GenerationRequest(prompt="3+4=")) == "3+4="
    with pytest.raises(ValueError):
        GenerationRequest(prompt="a", messages=[])


@pytest.mark.integration
def test_sampling_is_seeded_and_returns_n(tiny_backend):
    requests = [GenerationRequest(prompt="Hello"), GenerationRequest(prompt="1+1=")]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, n=3, seed=7)
    first = tiny_backend.generate(requests, params)
    again = tiny_backend.generate(requests, params)
    other = tiny_backend.generate(requests, SamplingParams(max_new_tokens=8, temperature=1.0, n=3, seed=8))
    assert [len(g) for g in first] == [3, 3]
    assert [[x.text for x in g] for g in first] == [[x.text for x in g] for g in again]
    assert [[x.text for x in g] for g in first] != [[x.text for x in g] for g in other]


@pytest.mark.integration
def test_loglikelihood_matches_a_direct_forward_pass(tiny_backend):
    import torch

    context, continuation = "What is 2+2?\nAnswer: ", "4"  # the trailing space moves to the continuation
    ((score, greedy),) = tiny_backend.loglikelihood([(context, continuation)])
    tok = tiny_backend.tokenizer
    ctx_ids = tok("What is 2+2?\nAnswer:")["input_ids"]
    whole = tok("What is 2+2?\nAnswer: 4")["input_ids"]
    cont_ids = whole[len(ctx_ids) :]
    with torch.no_grad():
        logits = tiny_backend.model(torch.tensor([whole])).logits[0]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    expected = sum(float(logprobs[len(ctx_ids) - 1 + i, t]) for i, t in enumerate(cont_ids))
    assert score == pytest.approx(expected, abs=1e-4)
    batch = tiny_backend.loglikelihood([(context, " A"), (context, "4"), ("Hi", " there")])
    assert batch[1][0] == pytest.approx(score, abs=1e-4)  # same result inside a padded batch


# --- OpenAI-compatible endpoint ---------------------------------------------------------------------------------


class _FakeOpenAI(BaseHTTPRequestHandler):
    calls: list[dict] = []

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeOpenAI.calls.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        n = body.get("n", 1)
        if self.path.endswith("/chat/completions"):
            question = body["messages"][-1]["content"]
            choices = [
                {
                    "message": {"role": "assistant", "content": f"Answer {i}: {question} #### 4\nQuestion: x"},
                    "finish_reason": "stop",
                }
                for i in range(n)
            ]
        else:
            choices = [{"text": " 4 STOP more", "finish_reason": "length"} for _ in range(n)]
        data = json.dumps({"choices": choices}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_openai():
    _FakeOpenAI.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.integration
def test_openai_backend(fake_openai, monkeypatch):
    from training_platform.core.endpoints import Endpoint

    monkeypatch.setenv("MY_EVAL_KEY", "sk-test-123")
    backend = OpenAIBackend(Endpoint("local", fake_openai, "MY_EVAL_KEY"), "served-model", max_concurrency=2)
    stops = ("Question:", "a", "b", "c", "STOP")
    chat = backend.generate(
        [GenerationRequest(messages=[{"role": "user", "content": "2+2?"}])],
        SamplingParams(max_new_tokens=20, stop=("Question:",), n=2, temperature=0.7),
    )
    assert [g.text for g in chat[0]] == ["Answer 0: 2+2? #### 4\n", "Answer 1: 2+2? #### 4\n"]
    plain = backend.generate([GenerationRequest(prompt="2+2=")], SamplingParams(max_new_tokens=5, stop=stops))
    assert plain[0][0].text == " 4 "  # cut client-side at the 5th stop, which the API does not accept
    first, second = _FakeOpenAI.calls
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test-123"
    assert first["body"]["model"] == "served-model" and first["body"]["n"] == 2
    assert first["body"]["temperature"] == 0.7 and first["body"]["max_tokens"] == 20
    assert second["path"] == "/v1/completions" and second["body"]["stop"] == list(stops[:4])
    assert backend.describe() == {
        "backend": "openai",
        "model": "served-model",
        "endpoint": "local",
        "authenticated": True,
    }
    backend.close()


@pytest.mark.integration
def test_openai_backend_end_to_end_run_never_records_the_key(fake_openai, monkeypatch, tmp_path):
    from training_platform.core.endpoints import Endpoints
    from training_platform.core.settings import Settings
    from training_platform.evaluation.config import EvalConfig
    from training_platform.evaluation.runner import run_evaluation

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-456")
    # The operator's TP_ENDPOINTS names the server; the config names only the endpoint.
    endpoints = Endpoints.from_env(
        Settings(
            TP_ENDPOINTS=json.dumps(
                {"local": {"base_url": fake_openai, "api_key_env": "OPENAI_API_KEY", "models": ["served-model"]}}
            )
        )
    )
    data = write_jsonl(
        tmp_path / "gsm.jsonl", [{"question": "2+2?", "answer": "#### 4"}, {"question": "3+3?", "answer": "#### 6"}]
    )
    config = EvalConfig(
        model={"backend": "openai", "path": "served-model", "endpoint": "local"},
        benchmarks=[{"name": "gsm8k", "data": str(data)}],
    )
    events = []
    summary = run_evaluation(config, tmp_path / "out", progress=False, on_progress=events.append, endpoints=endpoints)
    assert summary["model"] == {
        "backend": "openai",
        "model": "served-model",
        "endpoint": "local",
        "authenticated": True,
    }
    assert {c["auth"] for c in _FakeOpenAI.calls} == {"Bearer sk-secret-456"}
    assert {"benchmark": "gsm8k", "stage": "generate", "done": 2, "total": 2} in events
    assert events[-1] == {"benchmark": "gsm8k", "stage": "score", "done": 2, "total": 2}
    metrics = summary["benchmarks"]["gsm8k"]["metrics"]
    assert metrics["accuracy"]["value"] == 0.5  # "#### 4" is right for 2+2, wrong for 3+3
    records = read_jsonl(tmp_path / "out" / "samples" / "gsm8k.jsonl")
    assert json.loads(records[0]["prompt"])[0]["role"] == "user"  # chat prompt recorded as messages
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert "sk-secret-456" not in text and "OPENAI_API_KEY" not in text and fake_openai not in text, path


@pytest.mark.integration
def test_eval_cli_names_an_endpoint_from_tp_endpoints(fake_openai, monkeypatch, tmp_path):
    from eval_helpers import last_json_line, run_eval_cli

    from training_platform.core.settings import get_settings

    monkeypatch.setenv("CLI_EVAL_KEY", "sk-" + "cli-key-0123456789")
    monkeypatch.setenv(
        "TP_ENDPOINTS",
        json.dumps({"local": {"base_url": fake_openai, "api_key_env": "CLI_EVAL_KEY", "models": ["served-model"]}}),
    )
    get_settings.cache_clear()
    try:
        data = write_jsonl(tmp_path / "gsm.jsonl", [{"question": "2+2?", "answer": "#### 4"}])
        common = ["--backend", "openai", "--benchmarks", "gsm8k", "--data", f"gsm8k={data}", "--no-progress"]
        result = run_eval_cli(
            "run", "--model", "served-model", "--endpoint", "local", *common, "--output", tmp_path / "out"
        )
        assert result.exit_code == 0, result.stderr
        assert last_json_line(result.stdout)["gsm8k"]["accuracy"] == 1.0
        assert {c["auth"] for c in _FakeOpenAI.calls} == {"Bearer sk-cli-key-0123456789"}
        unknown = run_eval_cli(
            "run", "--model", "served-model", "--endpoint", "elsewhere", *common, "--output", tmp_path / "o2"
        )
        assert unknown.exit_code == 2 and "unknown endpoint 'elsewhere' (known: 'local')" in unknown.stderr
        missing = run_eval_cli("run", "--model", "served-model", *common, "--output", tmp_path / "o3")
        assert missing.exit_code == 2 and "needs `endpoint`" in missing.stderr
        assert run_eval_cli("run", "--model", "m", "--base-url", fake_openai, *common).exit_code == 2  # gone
    finally:
        get_settings.cache_clear()


@pytest.mark.unit
def test_vllm_backend_is_import_guarded():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="needs the vllm package"):
            VLLMBackend("some/model")
    else:  # pragma: no cover - GPU machines
        pytest.skip("vllm is installed")
