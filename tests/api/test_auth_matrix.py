"""The auth matrix: EVERY route of the app x {no token, another user, the owner, an admin}, with the expected status.

Each route is classified in `ROUTES` (a table: add a line for a new route); `test_every_route_is_classified` fails
when the app has a route the table does not know, so nothing can slip past. The classes:

| class    | no token | another user | owner (a plain user) | admin |
|----------|----------|--------------|----------------------|-------|
| public   | < 400    | < 400        | < 400                | < 400 |
| user     | 401      | 2xx          | 2xx                  | 2xx   |
| owned    | 401      | 404          | 2xx                  | 2xx   |
| admin    | 401      | 403          | 403                  | 2xx   |
| serving  | 401      | 404          | 503                  | 503   |
| private  | 401      | 404          | 2xx                  | 404   |

`owned` routes act on one object of alice (the owner); bob is "another user"; root is the admin. For listings
(`user` routes with `hidden`), alice's object must be in alice's and root's answer and absent from bob's.
Destructive requests (cancel, retry, delete) get a fresh object per call. Runs on SQLite and PostgreSQL.
`serving` routes generate with alice's model in an inference worker, which the matrix does not run: past the
authorization, the owner and the admin get the 503 "no inference worker" (tests/api/test_playground.py runs one).
`private` objects (saved views) are their owner's alone: an admin gets the 404 another user gets.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from api_helpers import API, ingested, set_status, valid_config

from training_platform.db import crud
from training_platform.db.models import Checkpoint, EvalMetric, EvalSchedule, Evaluation, RegisteredModel, User
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

GSM8K = {"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 2}
SMALL = {"benchmarks": [GSM8K], "generation": {"max_new_tokens": 4}, "backend": {"num_threads": 1}}
OWNER, OTHER, ADMIN = "alice", "bob", "root"
CALLERS = [None, OTHER, OWNER, ADMIN]


def _uid() -> str:
    return uuid.uuid4().hex[:10]


# ---------------------------------------------------------------------------------------------- alice's objects


@dataclass
class Objects:
    """One of each kind of object, owned by alice."""

    api: Any
    job: int = 0
    model: int = 0
    dataset: int = 0
    version: int = 0
    evaluation: int = 0
    evaluation_b: int = 0
    schedule: int = 0
    names: dict[str, str] = field(default_factory=dict)

    # -- builders (also used for fresh objects)

    def user(self, session, name: str = OWNER) -> User:
        return session.get(User, self.api.user_ids[name])

    def train_job(self, status: str = "succeeded") -> int:
        name = f"matrix-job-{_uid()}"
        with session_scope() as s:
            job = crud.create_job(s, owner=self.user(s), name=name, config=valid_config())
            job_id = job.id
        run_dir = self.api.data_dir / "runs" / f"job-{job_id}-matrix-{_uid()}"  # one data dir, two databases
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "train.log").write_text("line 1\nline 2\n")
        set_status(
            job_id, status, run_dir=str(run_dir), best_checkpoint={"step": 10, "metric": "gsm8k/accuracy", "value": 0.5}
        )
        with session_scope() as s:
            s.add(
                Checkpoint(
                    job_id=job_id,
                    step=10,
                    path=str(run_dir / "checkpoints" / "step_000010"),
                    sha256="0" * 64,
                    size_bytes=1,
                )
            )
        self.names.setdefault("job", name)
        return job_id

    def registered_model(self) -> int:
        name = f"matrix-model-{_uid()}"
        with session_scope() as s:
            model = RegisteredModel(
                name=name, path=str(self.api.data_dir / "demo" / "model"), owner_id=self.api.user_ids[OWNER], info={}
            )
            s.add(model)
            s.flush()
            model_id = model.id
        self.names.setdefault("model", name)
        return model_id

    def uploaded_dataset(self) -> tuple[int, int]:
        name = f"matrix-ds-{_uid()}"
        content = "".join(
            json.dumps(
                {"messages": [{"role": "user", "content": f"q{i} {name}"}, {"role": "assistant", "content": f"a{i}"}]}
            )
            + "\n"
            for i in range(3)
        ).encode()
        r = self.api.post(
            "/datasets",
            user=OWNER,
            files={"file": ("d.jsonl", content, "application/octet-stream")},
            data={"name": name},
        )
        body = ingested(self.api, r, OWNER)  # 202: the ingest data job, run here
        self.names.setdefault("dataset", name)
        return body["dataset"]["id"], body["version"]["id"]

    def evaluation_run(self) -> int:
        from training_platform.evaluation.request import EvalRequest
        from training_platform.services.evaluations import Target, create_evaluation

        name = f"matrix-eval-{_uid()}"
        model_path = str(self.api.data_dir / "demo" / "model")
        config = EvalRequest.model_validate(SMALL).to_config(model_path)
        with session_scope() as s:
            job = create_evaluation(
                s,
                owner=self.user(s),
                name=name,
                config=config,  # one leaderboard entry each
                target=Target(model_path=f"matrix/{name}", label=name),
            )
            job_id = job.id
        out = self.api.data_dir / "evals" / f"job-{job_id}-matrix-{_uid()}"
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps({"model": {"model": name}, "benchmarks": {}}))
        (out / "report.html").write_text("<html>report</html>")
        (out / "report.md").write_text("# report")
        set_status(job_id, "succeeded", run_dir=str(out))
        with session_scope() as s:
            evaluation = s.get(Evaluation, job_id)
            evaluation.output_dir = str(out)
            s.add(evaluation)
            s.add(
                EvalMetric(
                    job_id=job_id,
                    benchmark="gsm8k",
                    metric="accuracy",
                    value=0.5,
                    stderr=0.1,
                    ci_low=0.3,
                    ci_high=0.7,
                    n=2,
                )
            )
        self.names.setdefault("evaluation", name)
        return job_id

    def eval_schedule(self) -> int:
        from training_platform.core.timeutil import utcnow
        from training_platform.evaluation.request import EvalRequest

        name = f"matrix-schedule-{_uid()}"
        with session_scope() as s:
            schedule = EvalSchedule(
                owner_id=self.api.user_ids[OWNER],
                name=name,
                trigger="cron",
                cron="0 3 * * *",
                model="demo/model",
                next_fire_at=utcnow(),
                request=EvalRequest.model_validate(SMALL).model_dump(mode="json"),
            )
            s.add(schedule)
            s.flush()
            schedule_id = schedule.id
        self.names.setdefault("schedule", name)
        return schedule_id

    def endpoint(self) -> str:
        """Endpoints belong to the operator, not to a user: an admin-defined row (no key variable)."""
        from training_platform.db.models import Endpoint

        name = f"matrix-ep-{_uid()}"
        with session_scope() as s:
            s.add(Endpoint(name=name, base_url="http://127.0.0.1:9/v1", models=["m"]))
        return name

    def running_job_with_worker(self) -> None:
        from training_platform.core.timeutil import utcnow

        worker = f"matrix-worker-{_uid()}"
        with session_scope() as s:
            job_id = crud.create_job(s, owner=self.user(s), name=f"matrix-running-{_uid()}", config=valid_config()).id
        set_status(job_id, "running", worker=worker, heartbeat_at=utcnow())
        self.names["worker"] = worker

    # -- sweeps and templates (made on first use; `names` holds the first one's name for the listings)

    def sweep_of_alice(self) -> int:
        from training_platform.db.models import Sweep

        if "sweep" not in self.names:
            name = f"matrix-sweep-{_uid()}"
            with session_scope() as s:
                sweep = Sweep(
                    owner_id=self.api.user_ids[OWNER],
                    name=name,
                    config=valid_config(),
                    grid={"training.learning_rate": [1e-4]},
                    seeds=[0],
                )
                s.add(sweep)
                s.flush()
                crud.create_job(
                    s,
                    owner=self.user(s),
                    name=f"{name} lr=0.0001 seed=0",
                    sweep_id=sweep.id,
                    config=valid_config(
                        training={"max_steps": 5, "per_device_batch_size": 4, "learning_rate": 1e-4, "seed": 0}
                    ),
                )
                self.names["sweep"], self.names["sweep_id"] = name, str(sweep.id)
        return int(self.names["sweep_id"])

    def named(self, kind: str) -> str:
        """The name of alice's first sweep or template (made now if needed)."""
        self.sweep_of_alice() if kind == "sweep" else self.job_template()
        return self.names[kind]

    def job_template(self, first: bool = True) -> int:
        from training_platform.db.models import JobTemplate

        if first and "template" in self.names:
            return int(self.names["template_id"])
        name = f"matrix-template-{_uid()}"
        with session_scope() as s:
            template = JobTemplate(owner_id=self.api.user_ids[OWNER], name=name, config=valid_config())
            s.add(template)
            s.flush()
            template_id = template.id
        if first:
            self.names["template"], self.names["template_id"] = name, str(template_id)
        return template_id

    # -- checkpoint archives and webhooks

    def job_with_checkpoint(self) -> int:
        """alice's job (o.job) with a checkpoint directory holding one file (made once)."""
        from training_platform.db.models import Job

        with session_scope() as s:
            run_dir = Path(s.get(Job, self.job).run_dir)
        step = run_dir / "checkpoints" / "step_000010"
        if not step.is_dir():
            step.mkdir(parents=True)
            (step / "weights.bin").write_bytes(b"matrix")
        return self.job

    def webhook(self, first: bool = True) -> int:
        """A webhook of alice (a row: the operator's allowlist is set only for the POST case)."""
        from training_platform.db.models import Webhook

        if first and "webhook_id" in self.names:
            return int(self.names["webhook_id"])
        url = f"https://hooks.example.test/matrix-{_uid()}"
        with session_scope() as s:
            row = Webhook(owner_id=self.api.user_ids[OWNER], url=url, events=["job.failed"])
            s.add(row)
            s.flush()
            webhook_id = row.id
        if first:
            self.names["webhook"], self.names["webhook_id"] = url, str(webhook_id)
        return webhook_id


def _allow_webhook_hosts() -> None:
    from training_platform.core.settings import get_settings

    get_settings().webhook_hosts = "hooks.example.test"  # this module's cached settings (cleared after it)


@pytest.fixture(scope="module")
def objs(api) -> Objects:
    o = Objects(api)
    o.job = o.train_job()
    o.model = o.registered_model()
    o.dataset, o.version = o.uploaded_dataset()
    o.evaluation, o.evaluation_b = o.evaluation_run(), o.evaluation_run()
    o.schedule = o.eval_schedule()
    o.running_job_with_worker()
    return o


# ---------------------------------------------------------------------------------------------- the table


@dataclass
class Req:
    method: str
    path: str
    json: Any = None
    files: Any = None
    data: Any = None


@dataclass
class Case:
    cls: str  # public | user | owned | admin | serving | private
    request: Callable[[Objects], Req]
    hidden: str | None = None  # listings: the key in Objects.names of alice's object that bob must not see


def _mount_file(path: str) -> Callable[[Objects], Req]:
    def make(o: Objects) -> Req:
        from training_platform.api.app import create_app

        mount = next(r for r in create_app().routes if getattr(r, "path", None) == path)
        directory = Path(mount.app.directory)
        first = next(p for p in sorted(directory.rglob("*")) if p.is_file())
        return Req("GET", f"{path}/{first.relative_to(directory)}")

    return make


def _upload(o: Objects) -> Req:
    content = json.dumps({"text": f"upload {_uid()}"}).encode() + b"\n"
    return Req(
        "POST",
        f"{API}/datasets",
        files={"file": ("u.jsonl", content, "application/octet-stream")},
        data={"name": f"matrix-up-{_uid()}"},
    )


def _fresh_dataset(o: Objects) -> Req:
    dataset_id, _ = o.uploaded_dataset()
    return Req("DELETE", f"{API}/datasets/{dataset_id}")


def _fresh_view(o: Objects) -> Req:
    """A saved view of alice (fresh per call: the owner's DELETE removes it)."""
    from training_platform.db.models import SavedView

    with session_scope() as s:
        view = SavedView(owner_id=o.api.user_ids[OWNER], name=f"matrix-view-{_uid()}", page="jobs", query={})
        s.add(view)
        s.flush()
        view_id = view.id
    return Req("DELETE", f"{API}/views/{view_id}")


def _served(o: Objects) -> int:
    """alice's job with a final model on disk (a copy of the demo model), made once per database."""
    if "served" not in o.names:
        import shutil

        from training_platform.db.models import Job

        job_id = o.train_job()
        with session_scope() as s:
            run_dir = Path(s.get(Job, job_id).run_dir)
        shutil.copytree(o.api.data_dir / "demo" / "model", run_dir / "final")
        o.names["served"] = f"job-{job_id}/final"
    return int(o.names["served"].split("/")[0].removeprefix("job-"))


def _gate_profile() -> str:
    """An admin-defined gate profile (a row), fresh per call."""
    from training_platform.data.gate import parse_profile
    from training_platform.db.models import GateProfileRecord

    profile = parse_profile(f"matrix-{_uid()}", {"checks": {"schema": {}}})
    with session_scope() as s:
        s.add(GateProfileRecord(name=profile.name, checks=profile.checks, hash=profile.hash))
    return profile.name


def _gate_report(o: Objects) -> int:
    """A stored gate report of alice's version (made once per database)."""
    from training_platform.db.models import DatasetVersionRecord, GateReportRecord

    if "gate_report" not in o.names:
        with session_scope() as s:
            version = s.get(DatasetVersionRecord, o.version)
            row = GateReportRecord(
                dataset_version_id=version.id,
                sha256=version.sha256,
                profile_name="default",
                profile_hash="0" * 64,
                passed=True,
                report={"passed": True, "failed": []},
            )
            s.add(row)
            s.flush()
            o.names["gate_report"] = str(row.id)
    return int(o.names["gate_report"])


def _gated_job(o: Objects) -> int:
    """A failed training job of alice with data.gate (fresh per call: the override re-queues it)."""
    config = valid_config()
    config["data"] = {**config["data"], "gate": {"profile": "strict"}}
    with session_scope() as s:
        job_id = crud.create_job(s, owner=o.user(s), name=f"matrix-gated-{_uid()}", config=config).id
    set_status(job_id, "failed")
    return job_id


HI = [{"role": "user", "content": "hi"}]
QUOTA_FIELDS = ("max_devices", "max_running_jobs", "device_hours_per_week")
J = f"{API}/jobs"
E = f"{API}/evaluations"
D = f"{API}/datasets"

ROUTES: dict[str, Case] = {
    # -- public: documentation, health, the UI
    "GET /api/v1/openapi.json": Case("public", lambda o: Req("GET", f"{API}/openapi.json")),
    "GET /openapi.json": Case("public", lambda o: Req("GET", "/openapi.json")),
    "GET /docs": Case("public", lambda o: Req("GET", "/docs")),
    "GET /docs/oauth2-redirect": Case("public", lambda o: Req("GET", "/docs/oauth2-redirect")),
    "MOUNT /static-offline-docs": Case("public", _mount_file("/static-offline-docs")),
    "GET /api/v1/health": Case("public", lambda o: Req("GET", f"{API}/health")),
    "GET /health": Case("public", lambda o: Req("GET", "/health")),
    # /metrics: no user or job names (TP_METRICS_TOKEN, when set, is checked by the metrics work's own tests)
    "GET /api/v1/metrics": Case("public", lambda o: Req("GET", f"{API}/metrics")),
    "GET /metrics": Case("public", lambda o: Req("GET", "/metrics")),
    "GET /": Case("public", lambda o: Req("GET", "/")),
    "MOUNT /ui": Case("public", lambda o: Req("GET", "/ui/")),
    # -- jobs
    "POST /api/v1/jobs": Case("user", lambda o: Req("POST", J, json={"name": "m", "config": valid_config()})),
    "POST /api/v1/jobs/validate": Case("user", lambda o: Req("POST", f"{J}/validate", json={"config": valid_config()})),
    "GET /api/v1/jobs": Case("user", lambda o: Req("GET", f"{J}?q={o.names['job']}"), hidden="job"),
    "GET /api/v1/jobs/{job_id}": Case("owned", lambda o: Req("GET", f"{J}/{o.job}")),
    "PATCH /api/v1/jobs/{job_id}": Case("owned", lambda o: Req("PATCH", f"{J}/{o.job}", json={"note": "matrix"})),
    "GET /api/v1/jobs/{job_id}/events": Case("owned", lambda o: Req("GET", f"{J}/{o.job}/events")),
    "POST /api/v1/jobs/{job_id}/cancel": Case("owned", lambda o: Req("POST", f"{J}/{o.train_job('queued')}/cancel")),
    "POST /api/v1/jobs/{job_id}/retry": Case("owned", lambda o: Req("POST", f"{J}/{o.train_job('failed')}/retry")),
    "POST /api/v1/jobs/{job_id}/clone": Case("owned", lambda o: Req("POST", f"{J}/{o.job}/clone", json={})),
    "DELETE /api/v1/jobs/{job_id}": Case("owned", lambda o: Req("DELETE", f"{J}/{o.train_job()}")),
    "GET /api/v1/jobs/{job_id}/metrics": Case("owned", lambda o: Req("GET", f"{J}/{o.job}/metrics")),
    "GET /api/v1/jobs/{job_id}/logs": Case("owned", lambda o: Req("GET", f"{J}/{o.job}/logs")),
    "GET /api/v1/jobs/{job_id}/logs/stream": Case("owned", lambda o: Req("GET", f"{J}/{o.job}/logs/stream")),
    "GET /api/v1/jobs/{job_id}/files/{name}": Case("owned", lambda o: Req("GET", f"{J}/{o.job}/files/train.log")),
    "GET /api/v1/jobs/{job_id}/checkpoints": Case("owned", lambda o: Req("GET", f"{J}/{o.job}/checkpoints")),
    "GET /api/v1/jobs/{job_id}/best_checkpoint": Case("owned", lambda o: Req("GET", f"{J}/{o.job}/best_checkpoint")),
    "GET /api/v1/jobs/{job_id}/rollouts": Case("owned", lambda o: Req("GET", f"{J}/{o.job}/rollouts?limit=5")),
    # -- registered models
    "POST /api/v1/models": Case(
        "user", lambda o: Req("POST", f"{API}/models", json={"name": f"m-{_uid()}", "path": "demo/model"})
    ),
    "GET /api/v1/models": Case("user", lambda o: Req("GET", f"{API}/models?limit=200"), hidden="model"),
    "GET /api/v1/models/{model_id}": Case("owned", lambda o: Req("GET", f"{API}/models/{o.model}")),
    "PATCH /api/v1/models/{model_id}": Case(
        "owned", lambda o: Req("PATCH", f"{API}/models/{o.model}", json={"shared": False})
    ),
    "DELETE /api/v1/models/{model_id}": Case("owned", lambda o: Req("DELETE", f"{API}/models/{o.registered_model()}")),
    # -- datasets
    "POST /api/v1/datasets": Case("user", _upload),
    "POST /api/v1/datasets/register": Case(
        "user",
        lambda o: Req("POST", f"{D}/register", json={"name": f"matrix-reg-{_uid()}", "path": "demo/data/sft.jsonl"}),
    ),
    "GET /api/v1/datasets": Case("user", lambda o: Req("GET", f"{D}?q={o.names['dataset']}"), hidden="dataset"),
    "GET /api/v1/datasets/operations": Case("user", lambda o: Req("GET", f"{D}/operations")),
    "GET /api/v1/datasets/{dataset_id}": Case("owned", lambda o: Req("GET", f"{D}/{o.dataset}")),
    "PATCH /api/v1/datasets/{dataset_id}": Case(
        "owned", lambda o: Req("PATCH", f"{D}/{o.dataset}", json={"description": "matrix"})
    ),
    "DELETE /api/v1/datasets/{dataset_id}": Case("owned", _fresh_dataset),
    "GET /api/v1/datasets/{dataset_id}/versions": Case("owned", lambda o: Req("GET", f"{D}/{o.dataset}/versions")),
    "GET /api/v1/datasets/{dataset_id}/versions/{version_id}": Case(
        "owned", lambda o: Req("GET", f"{D}/{o.dataset}/versions/{o.version}")
    ),
    "GET /api/v1/datasets/{dataset_id}/versions/{version_id}/rows": Case(
        "owned", lambda o: Req("GET", f"{D}/{o.dataset}/versions/{o.version}/rows")
    ),
    "GET /api/v1/datasets/{dataset_id}/versions/{version_id}/stats": Case(
        "owned", lambda o: Req("GET", f"{D}/{o.dataset}/versions/{o.version}/stats")
    ),
    "POST /api/v1/datasets/{dataset_id}/versions/{version_id}/operations": Case(
        "owned",
        lambda o: Req(
            "POST", f"{D}/{o.dataset}/versions/{o.version}/operations", json={"operation": "dedup", "params": {}}
        ),
    ),
    "POST /api/v1/rewards/shadow": Case(
        "owned",
        lambda o: Req(
            "POST",
            f"{API}/rewards/shadow",
            json={
                "old": "length_penalty",
                "new": "length_penalty:unit=chars",
                "dataset_id": o.dataset,
                "version_id": o.version,
                "limit": 5,
                "repeats": 1,
            },
        ),
    ),
    # -- evaluations
    "POST /api/v1/evaluations": Case("user", lambda o: Req("POST", E, json={"model": "demo/model", **SMALL})),
    "GET /api/v1/evaluations": Case("user", lambda o: Req("GET", f"{E}?limit=200"), hidden="evaluation"),
    "GET /api/v1/evaluations/benchmarks": Case("user", lambda o: Req("GET", f"{E}/benchmarks")),
    "GET /api/v1/evaluations/schema": Case("user", lambda o: Req("GET", f"{E}/schema")),
    "GET /api/v1/evaluations/leaderboard": Case(
        "user", lambda o: Req("GET", f"{E}/leaderboard?benchmark=gsm8k&limit=500"), hidden="evaluation"
    ),
    "GET /api/v1/evaluations/compare": Case(
        "owned", lambda o: Req("GET", f"{E}/compare?a={o.evaluation}&b={o.evaluation_b}")
    ),
    "GET /api/v1/evaluations/{evaluation_id}": Case("owned", lambda o: Req("GET", f"{E}/{o.evaluation}")),
    "GET /api/v1/evaluations/{evaluation_id}/samples": Case(
        "owned", lambda o: Req("GET", f"{E}/{o.evaluation}/samples")
    ),
    "GET /api/v1/evaluations/{evaluation_id}/report": Case("owned", lambda o: Req("GET", f"{E}/{o.evaluation}/report")),
    # -- schedules
    "POST /api/v1/schedules": Case(
        "user",
        lambda o: Req(
            "POST",
            f"{API}/schedules",
            json={"name": "m", "trigger": "cron", "cron": "0 3 * * *", "model": "demo/model", **SMALL},
        ),
    ),
    "GET /api/v1/schedules": Case("user", lambda o: Req("GET", f"{API}/schedules?limit=200"), hidden="schedule"),
    "GET /api/v1/schedules/schema": Case("user", lambda o: Req("GET", f"{API}/schedules/schema")),
    "GET /api/v1/schedules/{schedule_id}": Case("owned", lambda o: Req("GET", f"{API}/schedules/{o.schedule}")),
    "PATCH /api/v1/schedules/{schedule_id}": Case(
        "owned", lambda o: Req("PATCH", f"{API}/schedules/{o.schedule}", json={"enabled": True})
    ),
    "DELETE /api/v1/schedules/{schedule_id}": Case(
        "owned", lambda o: Req("DELETE", f"{API}/schedules/{o.eval_schedule()}")
    ),
    "POST /api/v1/schedules/{schedule_id}/run": Case(
        "owned", lambda o: Req("POST", f"{API}/schedules/{o.schedule}/run")
    ),
    # -- users, monitoring, config
    "GET /api/v1/users/me": Case("user", lambda o: Req("GET", f"{API}/users/me")),
    "POST /api/v1/users": Case("admin", lambda o: Req("POST", f"{API}/users", json={"name": f"u-{_uid()}"})),
    "GET /api/v1/users": Case("admin", lambda o: Req("GET", f"{API}/users")),
    "GET /api/v1/users/{user_id}/quota": Case(
        "owned", lambda o: Req("GET", f"{API}/users/{o.api.user_ids[OWNER]}/quota")
    ),
    "PUT /api/v1/users/{user_id}/quota": Case(
        "admin",
        lambda o: Req("PUT", f"{API}/users/{o.api.user_ids[OWNER]}/quota", json=dict.fromkeys(QUOTA_FIELDS)),
    ),
    "GET /api/v1/monitoring/dashboard": Case(
        "user", lambda o: Req("GET", f"{API}/monitoring/dashboard"), hidden="worker"
    ),
    "GET /api/v1/monitoring/ray": Case("user", lambda o: Req("GET", f"{API}/monitoring/ray")),
    "GET /api/v1/config/schema": Case("user", lambda o: Req("GET", f"{API}/config/schema")),
    "GET /api/v1/config/examples": Case("user", lambda o: Req("GET", f"{API}/config/examples")),
    "GET /api/v1/config/tools": Case("user", lambda o: Req("GET", f"{API}/config/tools")),
    # -- named endpoints: the operator's (admins write; every user lists names and models)
    "GET /api/v1/endpoints": Case("user", lambda o: Req("GET", f"{API}/endpoints")),
    "GET /api/v1/endpoints/{name}": Case("user", lambda o: Req("GET", f"{API}/endpoints/{o.endpoint()}")),
    "POST /api/v1/endpoints": Case(
        "admin",
        lambda o: Req(
            "POST", f"{API}/endpoints", json={"name": f"matrix-ep-{_uid()}", "base_url": "http://127.0.0.1:9/v1"}
        ),
    ),
    "PATCH /api/v1/endpoints/{name}": Case(
        "admin", lambda o: Req("PATCH", f"{API}/endpoints/{o.endpoint()}", json={"models": ["m", "n"]})
    ),
    "DELETE /api/v1/endpoints/{name}": Case("admin", lambda o: Req("DELETE", f"{API}/endpoints/{o.endpoint()}")),
    # -- sweeps and job templates
    "POST /api/v1/sweeps": Case(
        "user",
        lambda o: Req(
            "POST",
            f"{API}/sweeps",
            json={"name": "m", "config": valid_config(), "grid": {"training.learning_rate": [1e-4]}, "seeds": [0]},
        ),
    ),
    "GET /api/v1/sweeps": Case("user", lambda o: Req("GET", f"{API}/sweeps?q={o.named('sweep')}"), hidden="sweep"),
    "GET /api/v1/sweeps/{sweep_id}": Case("owned", lambda o: Req("GET", f"{API}/sweeps/{o.sweep_of_alice()}")),
    "POST /api/v1/sweeps/{sweep_id}/cancel": Case(
        "owned", lambda o: Req("POST", f"{API}/sweeps/{o.sweep_of_alice()}/cancel")
    ),
    "POST /api/v1/templates": Case(
        "user", lambda o: Req("POST", f"{API}/templates", json={"name": f"m-{_uid()}", "config": valid_config()})
    ),
    "GET /api/v1/templates": Case(
        "user", lambda o: Req("GET", f"{API}/templates?q={o.named('template')}"), hidden="template"
    ),
    "GET /api/v1/templates/{template_id}": Case("owned", lambda o: Req("GET", f"{API}/templates/{o.job_template()}")),
    "PATCH /api/v1/templates/{template_id}": Case(
        "owned", lambda o: Req("PATCH", f"{API}/templates/{o.job_template()}", json={"description": "matrix"})
    ),
    "DELETE /api/v1/templates/{template_id}": Case(
        "owned", lambda o: Req("DELETE", f"{API}/templates/{o.job_template(first=False)}")
    ),
    # -- saved views of the UI's pages (private to their owner)
    "GET /api/v1/views": Case("user", lambda o: Req("GET", f"{API}/views?page=jobs")),
    "POST /api/v1/views": Case(
        "user", lambda o: Req("POST", f"{API}/views", json={"name": f"m-{_uid()}", "page": "jobs", "query": {}})
    ),
    "DELETE /api/v1/views/{view_id}": Case("private", _fresh_view),
    # -- usage (device-hours, jobs, cost): everyone their own, admins everyone's (tests/api/test_usage_api.py)
    "GET /api/v1/usage": Case("user", lambda o: Req("GET", f"{API}/usage?group_by=job")),
    # -- checkpoint archives, job-end webhooks
    "GET /api/v1/jobs/{job_id}/checkpoints/{name}/archive": Case(
        "owned", lambda o: Req("GET", f"{J}/{o.job_with_checkpoint()}/checkpoints/step_000010/archive")
    ),
    "POST /api/v1/webhooks": Case(
        "user",
        lambda o: (
            _allow_webhook_hosts(),
            Req(
                "POST",
                f"{API}/webhooks",
                json={"url": f"https://hooks.example.test/{_uid()}", "events": ["job.failed"]},
            ),
        )[1],
    ),
    "GET /api/v1/webhooks": Case("user", lambda o: (o.webhook(), Req("GET", f"{API}/webhooks"))[1], hidden="webhook"),
    "DELETE /api/v1/webhooks/{webhook_id}": Case(
        "owned", lambda o: Req("DELETE", f"{API}/webhooks/{o.webhook(first=False)}")
    ),
    # -- quality gates: profiles (everyone reads, admins write), gate runs and reports on versions, the override
    "GET /api/v1/gate-profiles": Case("user", lambda o: Req("GET", f"{API}/gate-profiles")),
    "GET /api/v1/gate-profiles/{name}": Case("user", lambda o: Req("GET", f"{API}/gate-profiles/strict")),
    "POST /api/v1/gate-profiles": Case(
        "admin",
        lambda o: Req("POST", f"{API}/gate-profiles", json={"name": f"matrix-{_uid()}", "checks": {"schema": {}}}),
    ),
    "PUT /api/v1/gate-profiles/{name}": Case(
        "admin", lambda o: Req("PUT", f"{API}/gate-profiles/{_gate_profile()}", json={"checks": {"duplicates": {}}})
    ),
    "DELETE /api/v1/gate-profiles/{name}": Case(
        "admin", lambda o: Req("DELETE", f"{API}/gate-profiles/{_gate_profile()}")
    ),
    "POST /api/v1/datasets/{dataset_id}/versions/{version_id}/gate": Case(
        "owned", lambda o: Req("POST", f"{D}/{o.dataset}/versions/{o.version}/gate", json={"profile": "default"})
    ),
    "GET /api/v1/datasets/{dataset_id}/versions/{version_id}/gate-reports": Case(
        "owned", lambda o: Req("GET", f"{D}/{o.dataset}/versions/{o.version}/gate-reports")
    ),
    "GET /api/v1/datasets/{dataset_id}/versions/{version_id}/gate-reports/{report_id}": Case(
        "owned", lambda o: Req("GET", f"{D}/{o.dataset}/versions/{o.version}/gate-reports/{_gate_report(o)}")
    ),
    "POST /api/v1/jobs/{job_id}/gate-override": Case(
        "admin", lambda o: Req("POST", f"{J}/{_gated_job(o)}/gate-override", json={"reason": "matrix override"})
    ),
    # -- the playground and the OpenAI-compatible route (generation needs an inference worker: see `serving`)
    "POST /api/v1/playground/generate": Case(
        "serving",
        lambda o: Req(
            "POST",
            f"{API}/playground/generate",
            json={"model": {"job_id": _served(o), "checkpoint": "final"}, "messages": HI, "max_new_tokens": 2},
        ),
    ),
    "POST /api/v1/openai/v1/chat/completions": Case(
        "serving",
        lambda o: Req(
            "POST",
            f"{API}/openai/v1/chat/completions",
            json={"model": f"job-{_served(o)}/final", "messages": HI, "max_tokens": 2},
        ),
    ),
    "POST /api/v1/openai/v1/pooling": Case(
        "serving",
        lambda o: Req("POST", f"{API}/openai/v1/pooling", json={"model": f"job-{_served(o)}/final", "input": "hi"}),
    ),
    "GET /api/v1/openai/v1/models": Case(
        "user", lambda o: (_served(o), Req("GET", f"{API}/openai/v1/models?limit=1000"))[1], hidden="served"
    ),
}

EXPECTED = {  # class -> caller -> "2xx" | "<400" | status
    "public": {None: "<400", OTHER: "<400", OWNER: "<400", ADMIN: "<400"},
    "user": {None: 401, OTHER: "2xx", OWNER: "2xx", ADMIN: "2xx"},
    "owned": {None: 401, OTHER: 404, OWNER: "2xx", ADMIN: "2xx"},
    "admin": {None: 401, OTHER: 403, OWNER: 403, ADMIN: "2xx"},
    "serving": {None: 401, OTHER: 404, OWNER: 503, ADMIN: 503},
    "private": {None: 401, OTHER: 404, OWNER: "2xx", ADMIN: 404},
}


def app_routes() -> set[str]:
    """Every route of the app as "METHOD path" (HEAD aside), mounts as "MOUNT path"."""
    from starlette.routing import Mount

    from training_platform.api.app import create_app

    app = create_app()
    try:
        from fastapi.routing import iter_route_contexts  # FastAPI >= 0.16x: included routers are lazy

        routes = [ctx for ctx in iter_route_contexts(app.router.routes)]
    except ImportError:  # pragma: no cover - older FastAPI: a flat list
        routes = list(app.routes)
    found = set()
    for route in routes:
        inner = getattr(route, "route", route)
        if isinstance(inner, Mount):
            found.add(f"MOUNT {inner.path}")
            continue
        for method in sorted(route.methods or []):
            if method != "HEAD":
                found.add(f"{method} {route.path}")
    return found


def test_every_route_is_classified():
    routes = app_routes()
    missing = sorted(routes - set(ROUTES))
    stale = sorted(set(ROUTES) - routes)
    assert not missing, f"routes without an auth-matrix entry (add them to ROUTES): {missing}"
    assert not stale, f"ROUTES entries for routes the app no longer has: {stale}"


def _send(api, req: Req, caller: str | None):
    headers = {} if caller is None else api.h(caller)
    kwargs: dict[str, Any] = {"headers": headers}
    if req.json is not None:
        kwargs["json"] = req.json
    if req.files is not None:
        kwargs["files"], kwargs["data"] = req.files, req.data
    return api.client.request(req.method, req.path, follow_redirects=False, **kwargs)


@pytest.mark.parametrize("caller", CALLERS, ids=["no-token", "other", "owner", "admin"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_auth_matrix(api, objs, route, caller):
    case = ROUTES[route]
    req = case.request(objs)
    r = _send(api, req, caller)
    expected = EXPECTED[case.cls][caller]
    what = f"{route} as {caller or 'nobody'}: {r.status_code} {r.text[:300]}"
    if expected == "2xx":
        assert 200 <= r.status_code < 300, what
    elif expected == "<400":
        assert r.status_code < 400, what
    else:
        assert r.status_code == expected, what
    if case.hidden and caller is not None:
        marker = objs.names[case.hidden]
        if caller == OTHER:
            assert marker not in r.text, f"{route}: bob sees alice's {case.hidden}"
        else:
            assert marker in r.text, f"{route}: {caller} does not see alice's {case.hidden}"
