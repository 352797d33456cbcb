"""Named outbound endpoints: the only places the platform sends a request carrying a key.

An OpenAI-compatible server (a judge, a reward model, a served model to evaluate) is defined by the operator under a
name; requests (evaluations, schedules, dataset scoring, `tp eval`, `tp data score`) name it and a model, never a
URL or the variable a key is read from. Two sources, one namespace:

- the environment: `TP_ENDPOINTS` (JSON) and/or `TP_ENDPOINTS_FILE` (a JSON file), read on every lookup, e.g.
  `{"judge": {"base_url": "https://api.example.com/v1", "api_key_env": "JUDGE_API_KEY", "models": ["gpt-x"]}}`;
  read-only over the API;
- rows admins create at `/api/v1/endpoints` (table `endpoints`; looked up through a function passed to
  `Endpoints`, so this module knows no database).

Rules enforced here, whatever the source:
- a name is 1-64 letters, digits, `_`, `.`, `-` (starting with a letter or digit); `platform` is reserved for the
  platform's own served models (an OpenAI-compatible inference route of later work will answer to it);
- `base_url` is `http://` or `https://` with a host, no user:password, query or fragment (`file://`, `ftp://`,
  `gopher://`... are refused when the endpoint is defined);
- `api_key_env` names an environment variable of the workers (the key itself is never stored, shown or logged);
  admin-defined endpoints may not name the platform's own settings (`DATABASE_URL`, `REDIS_URL`, `TP_*`);
- when `models` is non-empty, a request's model must be one of them;
- `keyed_client` builds the one httpx client that carries a key: it never follows redirects and refuses to send
  anything to another scheme/host/port than the endpoint's own (an absolute URL passed to it included).

Error messages name the endpoint and the model; never the key, nor (to users) the base URL or the variable name.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from training_platform.core.errors import InvalidInput

if TYPE_CHECKING:
    import httpx

__all__ = [
    "PLATFORM_ENDPOINT",
    "RESERVED_NAMES",
    "Endpoint",
    "EndpointConfigError",
    "EndpointError",
    "Endpoints",
    "ModelNotServed",
    "OutboundRefused",
    "UnknownEndpoint",
    "check_base_url",
    "endpoint_reference",
    "check_key_env",
    "check_models",
    "check_name",
    "env_endpoints",
    "has_key",
    "keyed_client",
    "make_endpoint",
    "parse_endpoints",
]

# The platform's own OpenAI-compatible inference route (later work) will be the endpoint of this name: nobody may
# define it, and `Endpoints` is where it will be added (a lookup answering for it).
PLATFORM_ENDPOINT = "platform"
RESERVED_NAMES = frozenset({PLATFORM_ENDPOINT})

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
_KEY_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_URL = 2048
MAX_MODELS = 1000
MAX_MODEL_NAME = 256
ALLOWED_SCHEMES = ("http", "https")
# Settings of the platform itself: an admin-defined endpoint may not have them sent as its "key".
_PLATFORM_ENV = re.compile(r"^(DATABASE_URL|REDIS_URL|TP_.*)$")

Source = Literal["env", "admin", "platform"]


class EndpointError(InvalidInput):
    """A problem with an endpoint reference or definition; `field` is the request field it concerns (if any)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__([(field or "", message)], message=message)
        self.field = field


class UnknownEndpoint(EndpointError):
    pass


class ModelNotServed(EndpointError):
    pass


class EndpointConfigError(EndpointError):
    """TP_ENDPOINTS / TP_ENDPOINTS_FILE cannot be read: an operator's mistake, reported as such."""

    http_status = 500  # not the caller's input
    exit_code = 1


class OutboundRefused(EndpointError):
    """A keyed client was asked to send a request somewhere else than its endpoint."""


# ---------------------------------------------------------------------------------------------- definitions


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise EndpointError(
            f"an endpoint name is 1-64 letters, digits, '_', '.', '-', starting with a letter or digit; got {name!r}"[
                :300
            ],
            "name",
        )
    return name


def endpoint_reference(value: str) -> str:
    """A config's reference to an operator endpoint (a judge's, a tool's): its name, never a URL. ValueError saying
    why otherwise (for pydantic field validators)."""
    if "://" in value or value.startswith("/"):
        raise ValueError(
            "name an endpoint the operator defined (TP_ENDPOINTS; GET /api/v1/endpoints lists them), not a URL"
        )
    try:
        return check_name(value)
    except EndpointError as exc:
        raise ValueError(str(exc)) from None


def check_base_url(url: Any) -> str:
    """The normalised URL (no trailing '/'); EndpointError saying why it is refused."""
    if not isinstance(url, str) or not url.strip():
        raise EndpointError("base_url: give the API root, e.g. https://api.example.com/v1", "base_url")
    if len(url) > MAX_URL or any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise EndpointError(f"base_url: at most {MAX_URL} characters, without spaces or control characters", "base_url")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise EndpointError(f"base_url: not a valid URL ({exc})", "base_url") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise EndpointError(
            f"base_url: only http:// and https:// URLs are allowed, not {scheme or 'no'} scheme "
            f"({scheme + '://' if scheme else 'a bare path'} is refused)",
            "base_url",
        )
    if not parts.hostname:
        raise EndpointError("base_url: the URL has no host", "base_url")
    if parts.username is not None or parts.password is not None:
        raise EndpointError(
            "base_url: no user:password in the URL; put the key in the variable named by api_key_env", "base_url"
        )
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        raise EndpointError(
            "base_url: no query string or fragment; give the API root such as https://api.example.com/v1", "base_url"
        )
    if port is not None and port == 0:
        raise EndpointError("base_url: port 0 is not a port", "base_url")
    return f"{scheme}://{parts.netloc}{parts.path}".rstrip("/")


def check_key_env(name: Any, *, admin: bool = False) -> str | None:
    if name is None or name == "":
        return None
    if not isinstance(name, str) or not _KEY_ENV.fullmatch(name):
        raise EndpointError(
            "api_key_env: the name of an environment variable (letters, digits, '_'; not starting "
            "with a digit; at most 128)",
            "api_key_env",
        )
    if admin and _PLATFORM_ENV.match(name):
        raise EndpointError(f"api_key_env: {name} is a setting of the platform itself, not an API key", "api_key_env")
    return name


def check_models(models: Any) -> tuple[str, ...]:
    if models is None:
        return ()
    if not isinstance(models, list | tuple) or len(models) > MAX_MODELS:
        raise EndpointError(f"models: a list of at most {MAX_MODELS} model names", "models")
    out: list[str] = []
    for i, model in enumerate(models):
        if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_NAME or "\x00" in model:
            raise EndpointError(
                f"models[{i}]: a non-empty model name of at most {MAX_MODEL_NAME} characters", f"models.{i}"
            )
        if model not in out:
            out.append(model)
    return tuple(out)


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str
    api_key_env: str | None = None
    models: tuple[str, ...] = field(default_factory=tuple)
    source: Source = "env"

    @property
    def origin(self) -> tuple[str, str, int]:
        return _origin(self.base_url)

    def public(self) -> dict[str, Any]:
        """What every user may see."""
        return {"name": self.name, "models": list(self.models), "source": self.source}

    def admin_view(self) -> dict[str, Any]:
        """What admins see: also where it points and the NAME of the variable holding its key (never the key)."""
        return {**self.public(), "base_url": self.base_url, "api_key_env": self.api_key_env}

    def check_model(self, model: str | None, field: str = "model") -> None:
        if self.models and model not in self.models:
            raise ModelNotServed(
                f"endpoint {self.name!r} serves {', '.join(map(repr, self.models))}; not {model!r}"[:1000], field
            )


def make_endpoint(name: Any, spec: Any, source: Source = "env") -> Endpoint:
    """Validate one definition (`spec` = {"base_url", "api_key_env"?, "models"?}); EndpointError otherwise."""
    name = check_name(name)
    if name in RESERVED_NAMES and source != "platform":
        raise EndpointError(f"{name!r} is reserved for the platform's own served models", "name")
    if not isinstance(spec, Mapping):
        raise EndpointError(f"endpoint {name!r}: expected an object with base_url (+ api_key_env, models)")
    unknown = sorted(set(spec) - {"base_url", "api_key_env", "models"})
    if unknown:
        raise EndpointError(
            f"endpoint {name!r}: unknown key {unknown[0]!r} (allowed: base_url, api_key_env, models)", unknown[0]
        )
    return Endpoint(
        name=name,
        base_url=check_base_url(spec.get("base_url")),
        api_key_env=check_key_env(spec.get("api_key_env"), admin=source == "admin"),
        models=check_models(spec.get("models")),
        source=source,
    )


def parse_endpoints(text: str, origin: str = "TP_ENDPOINTS") -> dict[str, Endpoint]:
    """{name: Endpoint} from the JSON object `text`; EndpointConfigError naming `origin` and the problem."""
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise EndpointConfigError(f"{origin}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise EndpointConfigError(
            f"{origin}: expected a JSON object mapping names to "
            f'{{"base_url": ..., "api_key_env": ..., "models": [...]}}'
        )
    out: dict[str, Endpoint] = {}
    for name, spec in data.items():
        try:
            out[name] = make_endpoint(name, spec, "env")
        except EndpointError as exc:
            raise EndpointConfigError(f"{origin}: {name!r}: {exc}"[:2000]) from None
    return out


def env_endpoints(settings: Any = None) -> dict[str, Endpoint]:
    """The operator's endpoints (TP_ENDPOINTS + TP_ENDPOINTS_FILE), read now (a changed file is seen at once)."""
    if settings is None:
        from training_platform.core.settings import get_settings

        settings = get_settings()
    out: dict[str, Endpoint] = {}
    inline = (getattr(settings, "endpoints_json", None) or "").strip()
    if inline:
        out.update(parse_endpoints(inline, "TP_ENDPOINTS"))
    file = str(getattr(settings, "endpoints_file", None) or "").strip()
    if file:
        path = Path(file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise EndpointConfigError(f"TP_ENDPOINTS_FILE: cannot read {path}: {exc.strerror or exc}") from None
        for name, endpoint in parse_endpoints(text, "TP_ENDPOINTS_FILE").items():
            if name in out:
                raise EndpointConfigError(f"endpoint {name!r} is defined in both TP_ENDPOINTS and TP_ENDPOINTS_FILE")
            out[name] = endpoint
    return out


# ---------------------------------------------------------------------------------------------- resolution


Lookup = Callable[[str], "Endpoint | None"]


class Endpoints:
    """Endpoints by name: the operator's (environment) first, then `lookup` (admin-defined rows). The environment
    wins a name clash, so an admin can never shadow what the operator set. `from_env` reads the environment on
    first use (EndpointConfigError then, if the operator's JSON is broken), so a resolver nobody asks costs
    nothing."""

    def __init__(
        self,
        env: Mapping[str, Endpoint] | Iterable[Endpoint] | Callable[[], Mapping[str, Endpoint]] | None = None,
        lookup: Lookup | None = None,
        names: Callable[[], Iterable[Endpoint]] | None = None,
    ):
        self._env_source = env if callable(env) else None
        if env is None or callable(env):
            env = {}
        self._env = dict(env) if isinstance(env, Mapping) else {e.name: e for e in env}
        self._lookup = lookup
        self._names = names

    @classmethod
    def from_env(
        cls, settings: Any = None, lookup: Lookup | None = None, names: Callable[[], Iterable[Endpoint]] | None = None
    ) -> Endpoints:
        return cls(lambda: env_endpoints(settings), lookup, names)

    @property
    def env(self) -> dict[str, Endpoint]:
        if self._env_source is not None:
            self._env, self._env_source = dict(self._env_source()), None
        return self._env

    def get(self, name: str) -> Endpoint | None:
        if name in self.env:
            return self.env[name]
        if self._lookup is not None and isinstance(name, str) and _NAME.fullmatch(name):
            return self._lookup(name)
        return None

    def all(self) -> list[Endpoint]:
        """Every endpoint (environment first, then the looked-up ones it does not shadow), by name."""
        found = dict(self.env)
        for endpoint in self._names() if self._names is not None else []:
            found.setdefault(endpoint.name, endpoint)
        return sorted(found.values(), key=lambda e: e.name)

    def resolve(
        self, name: str | None, model: str | None = None, *, field: str = "endpoint", model_field: str = "model"
    ) -> Endpoint:
        """The endpoint `name`, checked to serve `model` (when it lists models). UnknownEndpoint / ModelNotServed
        carry the request field they concern."""
        if not name:
            raise UnknownEndpoint("name an endpoint the operator defined (GET /api/v1/endpoints lists them)", field)
        endpoint = self.get(name)
        if endpoint is None:
            known = ", ".join(repr(e.name) for e in self.all()[:20]) or "none is defined"
            raise UnknownEndpoint(f"unknown endpoint {name!r}"[:200] + f" (known: {known})", field)
        if model is not None:
            endpoint.check_model(model, model_field)
        return endpoint


# ---------------------------------------------------------------------------------------------- the keyed client


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.hostname or "").lower(), port


def keyed_client(
    endpoint: Endpoint, *, timeout: float, transport: Any = None, environ: Mapping[str, str] | None = None
) -> httpx.Client:
    """The httpx.Client for `endpoint`: base URL set, `Authorization: Bearer <key>` when its `api_key_env` is set
    in the environment, redirects never followed, and every request checked to go to the endpoint's own
    scheme://host:port before it is sent (OutboundRefused otherwise)."""
    import httpx

    check_base_url(endpoint.base_url)  # a row written around the API is refused here too
    environ = os.environ if environ is None else environ
    headers = {"Content-Type": "application/json"}
    key = environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    origin = endpoint.origin
    name = endpoint.name

    def same_origin(request: httpx.Request) -> None:
        if _origin(str(request.url)) != origin:
            raise OutboundRefused(
                f"endpoint {name!r}: refusing to send a request to another host than the endpoint's own"
            )

    return httpx.Client(
        base_url=endpoint.base_url,
        headers=headers,
        timeout=timeout,
        transport=transport,
        follow_redirects=False,
        event_hooks={"request": [same_origin]},
    )


def has_key(endpoint: Endpoint, environ: Mapping[str, str] | None = None) -> bool:
    """Whether a key for `endpoint` is set here (reports say "authenticated", never which variable)."""
    environ = os.environ if environ is None else environ
    return bool(endpoint.api_key_env and environ.get(endpoint.api_key_env))
