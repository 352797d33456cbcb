"""The production compose file and the Dockerfile describe the topology the code expects.

Docker does not run here: these read docker-compose.yml and the Dockerfile as data and check them against the
code (the `tp` Typer app, the Celery queues, the settings' environment variables). That the same topology works
with real local services is covered by tests/workers and tests/e2e.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import typer
import typer.main
import yaml
from packaging.requirements import Requirement

from training_platform.cli import app

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"

PLATFORM_SERVICES = ("migrate", "api", "worker", "beat")  # the services running our image
EXPECTED_COMMAND = {"migrate": ["db", "upgrade"], "api": ["api"], "worker": ["worker"], "beat": ["beat"]}
SECRET_KEY = re.compile(r"PASSWORD|TOKEN|KEY|SECRET", re.IGNORECASE)
# ${VAR}, ${VAR:?message}, ${VAR?message}, ${VAR:-} / ${VAR-} (an empty default only: a default is a literal).
SECRET_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?\?[^}]*|:?-)?\}")
DATABASE_URL = re.compile(
    r"(?P<driver>[a-z0-9+]+)://(?P<user>[^:@/]+):(?P<password>\$\{[^}]*\})@(?P<host>[^:/]+)"
    r":(?P<port>\d+)/(?P<db>[A-Za-z0-9_]+)"
)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict]:
    return compose["services"]


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["KEY=value", "KEY"]
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {k: (None if v is None else str(v)) for k, v in env.items()}


def argv_of(command) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(x) for x in command]


def resolve_tp(argv: list[str]) -> tuple[list[str], object]:
    """The `tp` subcommand path of `argv` and its (click) command; parses the options exactly as `tp` would (an
    unknown option, a missing value or a bad type raises click's UsageError, e.g. typer.BadParameter)."""
    assert argv and argv[0] == "tp", f"not a tp command: {argv}"
    command = typer.main.get_command(app)
    args, path = argv[1:], []
    while isinstance(getattr(command, "commands", None), dict):  # a group (typer may vendor its own click)
        assert args, f"{argv}: `tp {' '.join(path)}` needs a subcommand"
        name = args.pop(0)
        assert name in command.commands, f"{argv}: `{name}` is not a subcommand of `tp {' '.join(path)}`"
        command = command.commands[name]
        path.append(name)
    known = {opt for param in command.params for opt in (*param.opts, *getattr(param, "secondary_opts", ()))}
    for arg in args:
        if arg.startswith("-"):
            assert arg.split("=", 1)[0] in known, f"{argv}: `tp {' '.join(path)}` has no option {arg}"
    command.make_context(f"tp {' '.join(path)}", list(args))
    return path, command


def option_value(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def dockerfile_instructions() -> list[tuple[str, str]]:
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, rest = full.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def cpu_torch_pin() -> str:
    """The CPU stack's torch pin (constraints.txt); pyproject.toml's range must accept it."""
    pins = [line.split("#")[0].replace(" ", "") for line in (REPO / "constraints.txt").read_text().splitlines()]
    pins = [p for p in pins if re.match(r"torch==", p)]
    assert len(pins) == 1, pins
    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    ranges = [Requirement(d) for d in deps if Requirement(d).name == "torch"]
    assert len(ranges) == 1 and pins[0].removeprefix("torch==") in ranges[0].specifier, (pins, deps)
    return pins[0]


# ---------------------------------------------------------------------------------------------- services


def test_the_services_exist(services):
    assert {"postgres", "redis", *PLATFORM_SERVICES} <= set(services)


def test_platform_services_run_one_image(services):
    images = {name: services[name].get("image") for name in PLATFORM_SERVICES}
    builds = {name: json.dumps(services[name].get("build"), sort_keys=True) for name in PLATFORM_SERVICES}
    assert len(set(images.values())) == 1 and None not in images.values(), images
    assert len(set(builds.values())) == 1, builds
    build = services["api"]["build"]
    context = build if isinstance(build, str) else build.get("context", ".")
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    assert (REPO / context / dockerfile).resolve() == DOCKERFILE


@pytest.mark.parametrize("name", PLATFORM_SERVICES)
def test_each_command_is_a_real_tp_command_with_real_options(services, name):
    argv = argv_of(services[name]["command"])
    path, _ = resolve_tp(argv)
    assert path == EXPECTED_COMMAND[name]


def test_api_listens_on_all_interfaces_on_the_published_port(services):
    argv = argv_of(services["api"]["command"])
    assert option_value(argv, "--host") == "0.0.0.0"
    port = option_value(argv, "--port") or "8000"
    published = [str(p) for p in services["api"].get("ports", [])]
    assert any(p.split(":")[-1] == port for p in published), published


def test_api_runs_several_processes(services):
    argv = argv_of(services["api"]["command"])
    workers = option_value(argv, "--workers", "-w")
    assert workers is not None and int(workers) >= 2, argv


def test_workers_consume_the_work_queues(services):
    from training_platform.taskqueue.app import QUEUES

    consumed = {}
    for name in ("worker", "eval-worker"):
        argv = argv_of(services[name]["command"])
        consumed[name] = set((option_value(argv, "--queues", "-Q") or "train").split(","))
    assert consumed["worker"] | consumed["eval-worker"] == {"train", "data", "eval"}
    assert consumed["eval-worker"] == {"eval"}  # evaluations never wait behind a long training job
    for queues in consumed.values():
        assert queues <= set(QUEUES)
        assert "maintenance" not in queues  # beat's own queue (the recovery sweep, the schedule tick)


def test_beat_runs_exactly_one_replica(services):
    beat = services["beat"]
    assert (beat.get("deploy") or {}).get("replicas") == 1
    assert beat.get("scale", 1) == 1


def test_platform_services_wait_for_healthy_stores_and_the_migration(services):
    for name in ("api", "worker", "eval-worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert depends["redis"]["condition"] == "service_healthy", name
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["migrate"].get("restart", "no") == "no"


def test_postgres_and_redis_have_healthchecks(services):
    pg_test = " ".join(argv_of(services["postgres"]["healthcheck"]["test"]))
    redis_test = " ".join(argv_of(services["redis"]["healthcheck"]["test"]))
    assert "pg_isready" in pg_test
    assert "redis-cli" in redis_test and "ping" in redis_test


# ---------------------------------------------------------------------------------------------- environment


def test_environment_points_at_the_compose_services(compose, services):
    envs = {name: env_of(services[name]) for name in PLATFORM_SERVICES}
    for key in ("DATABASE_URL", "REDIS_URL", "TP_DATA_DIR"):
        values = {name: env.get(key) for name, env in envs.items()}
        assert None not in values.values() and len(set(values.values())) == 1, (key, values)
    env = envs["api"]

    db = DATABASE_URL.fullmatch(env["DATABASE_URL"])
    assert db, f"DATABASE_URL is not postgresql+psycopg://user:${{...}}@host:port/db: {env['DATABASE_URL']}"
    assert db["host"] in services, f"DATABASE_URL host {db['host']!r} is not a compose service"
    pg = services[db["host"]]
    pg_env = env_of(pg)
    assert db["driver"] == "postgresql+psycopg"
    assert pg["image"].startswith("postgres:")
    assert int(db["port"]) == int(pg_env.get("PGPORT") or 5432)
    assert db["user"] == pg_env["POSTGRES_USER"] and db["db"] == pg_env.get("POSTGRES_DB", db["user"])
    password_var = re.match(r"\$\{(\w+)", db["password"])[1]
    assert re.match(r"\$\{(\w+)", pg_env["POSTGRES_PASSWORD"])[1] == password_var == "POSTGRES_PASSWORD"

    redis_url = urlsplit(env["REDIS_URL"])
    assert redis_url.scheme == "redis" and redis_url.hostname in services
    assert services[redis_url.hostname]["image"].startswith("redis:")
    redis_cmd = argv_of(services[redis_url.hostname].get("command") or [])
    assert redis_url.port == int(option_value(redis_cmd, "--port") or 6379)


def test_data_dir_is_one_shared_volume(compose, services):
    data_dir = env_of(services["api"])["TP_DATA_DIR"]
    assert data_dir == "/data"
    sources = set()
    for name in ("api", "worker", "beat"):
        mounts = [argv_of(v)[0] if not isinstance(v, str) else v for v in services[name].get("volumes", [])]
        targets = {m.split(":")[1]: m.split(":")[0] for m in mounts if ":" in m}
        assert data_dir in targets, (name, mounts)
        sources.add(targets[data_dir])
    assert len(sources) == 1, sources
    assert sources.pop() in (compose.get("volumes") or {}), "the /data volume must be a declared named volume"
    instructions = dockerfile_instructions()
    assert ("VOLUME", '["/data"]') in instructions or ("VOLUME", "/data") in instructions
    assert any(kw == "ENV" and re.search(r"\bTP_DATA_DIR=/data\b", args) for kw, args in instructions)


def _walk(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, str(key)), str(key), value
            yield from _walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, str) and "=" in item and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", item.split("=")[0]):
                key, value = item.split("=", 1)
                yield (*path, str(i)), key, value
            yield from _walk(item, (*path, str(i)))


def test_no_secret_literal_values(compose):
    checked = []
    for path, key, value in _walk(compose):
        if SECRET_KEY.search(key) and not isinstance(value, dict | list):
            assert isinstance(value, str) and SECRET_REF.fullmatch(value), (
                f"{'.'.join(path)}: secrets must be ${{VAR}} references (from the env file), got {value!r}"
            )
            checked.append(key)
        if isinstance(value, str) and re.search(r"://[^/@\s]+:[^/@\s]+@", value):
            password = re.search(r"://[^/@\s:]+:(.+?)@", value)[1]
            assert SECRET_REF.fullmatch(password), f"{'.'.join(path)}: a literal password in a URL"
    assert {"POSTGRES_PASSWORD", "HF_TOKEN", "WANDB_API_KEY"} <= set(checked)


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_image():
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".env", ".git", ".venv", "var", "runs"} <= patterns


# ---------------------------------------------------------------------------------------------- Dockerfile


def test_dockerfile_pins_torch_and_installs_it_before_the_project():
    pin = cpu_torch_pin()
    assert pin == "torch==2.13.0"
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    runs = [(i, args) for i, (kw, args) in enumerate(instructions) if kw == "RUN" and "pip install" in args]
    torch_runs = [(i, args) for i, args in runs if re.search(r"(^|\s)torch==", args)]
    assert torch_runs, "no `pip install torch==...` in the Dockerfile"
    torch_at, torch_args = torch_runs[0]
    assert re.search(rf"(^|\s){re.escape(pin)}(\s|$)", torch_args), torch_args
    assert f"--index-url {CPU_INDEX}" in torch_args, torch_args

    project_runs = [(i, args) for i, args in runs if re.search(r"\s['\"]?\.(\s|$|\[)", args + " ")]
    assert project_runs, "no `pip install .` in the Dockerfile"
    project_at, project_args = project_runs[0]
    assert torch_at < project_at
    constraint = re.search(r"(?:-c|--constraint)[ =](\S+)", project_args)
    assert constraint, f"the project is installed without a constraints file: {project_args}"
    constraints = (REPO / constraint[1]).read_text().split()
    assert pin in constraints, f"{constraint[1]} does not pin {pin}"
    copied = [args.split()[:-1] for kw, args in instructions if kw == "COPY"]
    assert any(constraint[1] in srcs for srcs in copied), f"{constraint[1]} is not copied into the image"


def test_dockerfile_runs_as_a_non_root_user_and_serves_the_api():
    instructions = dockerfile_instructions()
    users = [args for kw, args in instructions if kw == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    cmd = [args for kw, args in instructions if kw == "CMD"][-1]
    argv = json.loads(cmd)
    path, _ = resolve_tp(argv)
    assert path == ["api"] and option_value(argv, "--host") == "0.0.0.0"


def test_resolve_tp_rejects_unknown_commands_and_options():
    with pytest.raises(AssertionError):
        resolve_tp(["tp", "wroker"])
    with pytest.raises(AssertionError):
        resolve_tp(["tp", "worker", "--queue", "train"])
    with pytest.raises(typer.BadParameter):
        resolve_tp(["tp", "api", "--port", "eighty"])


def test_ray_profile_runs_a_head_and_scalable_workers_on_the_shared_volume(services):
    head, worker = services["ray-head"], services["ray-worker"]
    assert head["profiles"] == worker["profiles"] == ["ray"], "Ray starts only with --profile ray"
    assert head["image"] == worker["image"] == services["api"]["image"], "nodes run the training code's image"
    head_argv, worker_argv = argv_of(head["command"]), argv_of(worker["command"])
    assert head_argv[:4] == ["ray", "start", "--head", "--block"] and "--block" in worker_argv
    port = next(a.split("=", 1)[1] for a in head_argv if a.startswith("--port="))
    assert f"--address=ray-head:{port}" in worker_argv
    assert "replicas" not in worker.get("deploy", {}) and "container_name" not in worker, "scalable"
    for node in (head, worker):
        assert "tp-data:/data" in node["volumes"], "every node sees the run directories"
        env = env_of(node)
        assert env["RAY_AUTH_MODE"] == "token" and SECRET_REF.fullmatch(env["RAY_AUTH_TOKEN"])
    assert all(str(p).startswith("127.0.0.1:") for p in head.get("ports", [])), "dashboard on loopback only"
    platform_env = env_of(services["worker"])
    assert SECRET_REF.fullmatch(platform_env["TP_RAY_ADDRESS"]) and SECRET_REF.fullmatch(platform_env["RAY_AUTH_TOKEN"])


def _compose_cli() -> tuple[list[str], str] | None:
    """The real Compose CLI here: `docker compose` (v2) if installed, else Debian's `docker-compose` (v1.29)."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"], "v2"
    if shutil.which("docker-compose"):
        return ["docker-compose"], "v1"
    return None


def test_docker_compose_config_accepts_the_file(tmp_path):
    """`docker compose config` with the real tool (no daemon needed): the file parses, every ${...} resolves, the
    secret guard refuses a missing POSTGRES_PASSWORD, and the ray profile adds its two services. Where only Compose
    v1 installs (Debian 12: docker-compose 1.29), the v2-only top-level `name:` is given as `-p` instead."""
    cli = _compose_cli()
    if cli is None:
        pytest.skip("docker compose not installed — `apt-get install -y --no-install-recommends docker-compose`")
    command, version = cli
    compose_file = COMPOSE_FILE
    project = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["name"]
    if version == "v1":
        compose_file = tmp_path / "docker-compose.yml"
        text = COMPOSE_FILE.read_text(encoding="utf-8")
        compose_file.write_text(re.sub(r"(?m)^name: .*\n", "", text), encoding="utf-8")
    base = [*command, "-f", str(compose_file), "--project-directory", str(REPO), "-p", project]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}

    refused = subprocess.run([*base, "config"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "set POSTGRES_PASSWORD" in refused.stdout + refused.stderr

    env["POSTGRES_PASSWORD"] = "s3cret-for-the-test"
    proc = subprocess.run([*base, "config"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)
    assert set(PLATFORM_SERVICES) | {"postgres", "redis", "eval-worker", "inference-worker"} <= set(
        resolved["services"]
    )
    assert "s3cret-for-the-test" in resolved["services"]["api"]["environment"]["DATABASE_URL"]
    ray = subprocess.run([*base, "--profile", "ray", "config", "--services"], env=env, capture_output=True, text=True)
    assert ray.returncode == 0 and {"ray-head", "ray-worker"} <= set(ray.stdout.split())
