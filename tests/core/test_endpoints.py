"""training_platform/core/endpoints.py on its own: definitions (names, http(s) URLs, key variables, models), the
operator's TP_ENDPOINTS / TP_ENDPOINTS_FILE, resolution order, and the keyed client's headers."""

from __future__ import annotations

import json

import httpx
import pytest

from training_platform.core.endpoints import (
    Endpoint,
    EndpointConfigError,
    EndpointError,
    Endpoints,
    ModelNotServed,
    UnknownEndpoint,
    check_base_url,
    env_endpoints,
    keyed_client,
    make_endpoint,
    parse_endpoints,
)
from training_platform.core.settings import Settings

pytestmark = pytest.mark.unit


def test_base_urls_are_http_or_https_with_a_host():
    assert check_base_url("HTTPS://api.example.com/v1/") == "https://api.example.com/v1"
    assert check_base_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    for url, reason in [
        ("file:///etc/passwd", "only http:// and https://"),
        ("ftp://x/v1", "only http://"),
        ("gopher://x:70/_", "only http://"),
        ("/v1", "only http://"),
        ("http:///v1", "no host"),
        ("http://u:p@x/v1", "no user:password"),
        ("http://x/v1?k=1", "no query"),
        ("http://x/v1#f", "no query"),
        ("http://x /v1", "without spaces"),
        ("http://x:99999/v1", "not a valid URL"),
        ("", "give the API root"),
        (None, "API root"),
    ]:
        with pytest.raises(EndpointError, match=reason):
            check_base_url(url)


def test_definitions():
    endpoint = make_endpoint(
        "judge", {"base_url": "https://j.example/v1/", "api_key_env": "JUDGE_KEY", "models": ["a", "b", "a"]}
    )
    assert endpoint == Endpoint("judge", "https://j.example/v1", "JUDGE_KEY", ("a", "b"), "env")
    assert endpoint.public() == {"name": "judge", "models": ["a", "b"], "source": "env"}
    for name, spec, reason in [
        ("platform", {"base_url": "http://x"}, "reserved"),
        ("a/b", {"base_url": "http://x"}, "an endpoint name is"),
        ("judge\n", {"base_url": "http://x"}, "an endpoint name is"),
        ("x", {"base_url": "http://x", "api_key_env": "KEY\n"}, "environment variable"),
        ("x", {"base_url": "http://x", "key": "sk"}, "unknown key 'key'"),
        ("x", {"base_url": "http://x", "api_key_env": "1X"}, "environment variable"),
        ("x", {"base_url": "http://x", "models": "gpt"}, "a list of at most"),
        ("x", {"base_url": "http://x", "models": [""]}, r"models\[0\]"),
        ("x", "http://x", "expected an object"),
    ]:
        with pytest.raises(EndpointError, match=reason):
            make_endpoint(name, spec)
    # the operator may name any variable; an admin not the platform's own settings
    assert make_endpoint("x", {"base_url": "http://x", "api_key_env": "TP_JUDGE_KEY"}).api_key_env == "TP_JUDGE_KEY"
    with pytest.raises(EndpointError, match="a setting of the platform itself"):
        make_endpoint("x", {"base_url": "http://x", "api_key_env": "TP_JUDGE_KEY"}, "admin")


def test_the_operators_environment(tmp_path):
    assert env_endpoints(Settings(TP_ENDPOINTS=" ", TP_ENDPOINTS_FILE="")) == {}  # set but empty: none
    inline = Settings(TP_ENDPOINTS=json.dumps({"a": {"base_url": "http://a/v1"}}))
    assert list(env_endpoints(inline)) == ["a"]
    file = tmp_path / "endpoints.json"
    file.write_text(json.dumps({"b": {"base_url": "https://b/v1", "models": ["m"]}}))
    both = Settings(TP_ENDPOINTS=json.dumps({"a": {"base_url": "http://a/v1"}}), TP_ENDPOINTS_FILE=str(file))
    assert sorted(env_endpoints(both)) == ["a", "b"]
    file.write_text(json.dumps({"b": {"base_url": "https://b/v1"}, "c": {"base_url": "https://c/v1"}}))
    assert sorted(env_endpoints(both)) == ["a", "b", "c"]  # read at each lookup
    file.write_text(json.dumps({"a": {"base_url": "https://other/v1"}}))
    with pytest.raises(EndpointConfigError, match="both TP_ENDPOINTS and TP_ENDPOINTS_FILE"):
        env_endpoints(both)
    with pytest.raises(EndpointConfigError, match="TP_ENDPOINTS_FILE: cannot read"):
        env_endpoints(Settings(TP_ENDPOINTS_FILE=str(tmp_path / "missing.json")))
    with pytest.raises(EndpointConfigError, match="TP_ENDPOINTS: not valid JSON"):
        parse_endpoints("{")
    with pytest.raises(EndpointConfigError, match="expected a JSON object"):
        parse_endpoints("[]")
    with pytest.raises(EndpointConfigError, match="'x': base_url: only http:// and https://"):
        parse_endpoints(json.dumps({"x": {"base_url": "file:///etc/passwd"}}))


def test_resolution_environment_first_then_lookup():
    rows = {
        "team": Endpoint("team", "http://team/v1", source="admin"),
        "judge": Endpoint("judge", "http://shadow/v1", source="admin"),
    }
    endpoints = Endpoints(
        [Endpoint("judge", "http://judge/v1", models=("m",))], lookup=rows.get, names=lambda: rows.values()
    )
    assert endpoints.resolve("judge", "m").base_url == "http://judge/v1"  # an admin row cannot shadow it
    assert endpoints.resolve("team", "anything").source == "admin"
    assert [e.name for e in endpoints.all()] == ["judge", "team"]
    with pytest.raises(ModelNotServed, match="serves 'm'; not 'x'") as info:
        endpoints.resolve("judge", "x")
    assert info.value.field == "model"
    with pytest.raises(UnknownEndpoint, match=r"unknown endpoint 'nope' \(known: 'judge', 'team'\)"):
        endpoints.resolve("nope")
    with pytest.raises(UnknownEndpoint, match="name an endpoint"):
        endpoints.resolve(None)
    broken = Endpoints.from_env(Settings(TP_ENDPOINTS="{"))  # nothing read until asked
    with pytest.raises(EndpointConfigError):
        broken.resolve("judge")


def test_keyed_client_headers(monkeypatch):
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"Location": "http://elsewhere/x"})

    monkeypatch.setenv("EP_KEY", "sk-" + "unit-key-0123456789")
    monkeypatch.delenv("EP_UNSET", raising=False)
    for env, expected in (("EP_KEY", "Bearer sk-unit-key-0123456789"), ("EP_UNSET", None), (None, None)):
        client = keyed_client(
            Endpoint("e", "https://api.example/v1", env), timeout=5, transport=httpx.MockTransport(server)
        )
        response = client.post("/chat/completions", json={})
        assert response.status_code == 302  # not followed
        assert seen[-1].headers.get("authorization") == expected
        assert str(seen[-1].url) == "https://api.example/v1/chat/completions"
        client.close()
    with pytest.raises(EndpointError, match="only http://"):  # a bad row written around the API
        keyed_client(Endpoint("e", "file:///etc"), timeout=5)


def test_a_bad_environment_variable_is_named_not_a_traceback(monkeypatch):
    """core/paths reads TP_DATA_DIR through the settings: an unrelated bad variable must say which and why."""
    from training_platform.core.errors import InvalidInput
    from training_platform.core.paths import data_dir

    monkeypatch.setenv("TP_MAX_BODY_MB", "lots")
    with pytest.raises(InvalidInput) as info:
        data_dir()
    assert info.value.errors[0].path == "TP_MAX_BODY_MB" and "must be a number" in info.value.errors[0].reason
    monkeypatch.delenv("TP_MAX_BODY_MB")
    assert data_dir().is_absolute()
