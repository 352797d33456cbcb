"""Which queued training job starts next, and why the others wait: admission by devices, quotas and fair share.

The jobs table stays the queue of record; this module is the rule a worker applies when it claims (in one
transaction, under a lock every claimer takes) and the API applies to say why a job waits. `plan()` is the whole
policy, a pure function:

- A job asks for `resources.num_nodes x resources.num_devices` devices of its `resources.device` (auto: cuda, then
  mps, then cpu, whichever the pool has) in one pool: `ray` for the Ray launcher, else a training worker's node
  (`node:<host>`, TP_NODE_DEVICES or detected). A pool's free devices are its devices minus those of the jobs in
  preflight or running on it, so several small jobs run side by side on a node that has room.
- Order: priority (high first), then the owner who used the fewest device-seconds in the last week (fair share),
  then the longest waiting; a job that waited past TP_SCHED_RESERVE_AFTER_S goes before the fresh ones of its
  priority.
- A job starts only when its devices are free and its owner's quota allows it (max_devices, max_running_jobs, the
  weekly device-hours); one that cannot start does not block smaller ones behind it (backfill) ...
- ... until it has waited TP_SCHED_RESERVE_AFTER_S: then the free devices of its type in its pool are held for it,
  and no job behind it takes them, so a stream of small jobs cannot starve a big one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select as sa_select
from sqlalchemy import text, update
from sqlmodel import Session, col, select

from training_platform.core.settings import Settings
from training_platform.core.timeutil import utcnow
from training_platform.db import crud
from training_platform.db.models import ComputePool, Job, JobEvent, JobStatus, User
from training_platform.services import quotas as quota_service

log = logging.getLogger("training_platform.scheduler")

HOLDING = (JobStatus.preflight.value, JobStatus.running.value)
AUTO_ORDER = ("cuda", "mps", "cpu")
# A pool its workers have not written for this long is left out of the API's reasons (a node taken away).
POOL_STALE_AFTER = timedelta(days=1)
# The statements `load()` (and so `queue_info()`, on a jobs page with a queued training job) runs.
LOAD_STATEMENTS = 5
# pg_advisory_xact_lock key of the claim: one claimer at a time decides (SQLite serialises writers itself).
CLAIM_LOCK_KEY = 726_153_001


@dataclass(frozen=True)
class Ask:
    """A queued job's request."""

    job_id: int
    owner_id: int
    owner: str
    priority: int
    queued_at: datetime
    ray: bool
    device: str  # cuda | mps | cpu | auto
    devices: int


@dataclass(frozen=True)
class Holding:
    """A job in preflight or running: the devices it was admitted to."""

    job_id: int
    owner_id: int
    pool: str
    device: str
    devices: int


@dataclass
class Decision:
    job_id: int
    position: int
    reason: str
    start: tuple[str, str] | None = None  # (pool, device) when it may start now
    holds: tuple[str, str] | None = None  # its devices are held for it (waited past the reservation time)


@dataclass
class _OwnerState:
    devices: int = 0
    jobs: int = 0


@dataclass
class Snapshot:
    """What `plan()` decides on, read from the database by `load()`."""

    queued: list[Ask]
    holding: list[Holding]
    pools: dict[str, dict[str, int]]
    quotas: dict[int, quota_service.Quota]
    week_seconds: dict[int, float]
    names: dict[int, str] = field(default_factory=dict)


def ask_of(
    job_id: int, owner_id: int, owner: str, priority: int, queued_at: datetime, config: Mapping[str, Any]
) -> Ask:
    """A job's request from its (validated) config."""
    from training_platform.training.config import resolve_launcher

    section = config.get("resources")
    resources: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    num_nodes = int(resources.get("num_nodes") or 1)
    num_devices = int(resources.get("num_devices") or 1)
    launcher = resolve_launcher(str(resources.get("launcher") or "auto"), num_nodes=num_nodes, num_devices=num_devices)
    return Ask(
        job_id=job_id,
        owner_id=owner_id,
        owner=owner,
        priority=priority,
        queued_at=queued_at,
        ray=launcher == "ray",
        device=str(resources.get("device") or "auto"),
        devices=num_nodes * num_devices,
    )


def _device_in(pool: dict[str, int], device: str) -> str:
    if device != "auto":
        return device
    return next((d for d in AUTO_ORDER if pool.get(d, 0) > 0), "cpu")


def _devices_text(n: int, device: str) -> str:
    return f"{n} {device} device{'s' if n != 1 else ''}"


def plan(
    snap: Snapshot, *, now: datetime, reserve_after_s: float, pools: Iterable[str] | None = None
) -> list[Decision]:
    """Every queued job in queue order with what happens to it now. `pools`: the pools considered (a claimer: its
    own node and the Ray cluster; None: all)."""
    considered = {name: dict(devs) for name, devs in snap.pools.items() if pools is None or name in set(pools)}
    free = {name: dict(devs) for name, devs in considered.items()}
    owners: dict[int, _OwnerState] = {}
    for h in snap.holding:
        if h.pool in free:
            free[h.pool][h.device] = free[h.pool].get(h.device, 0) - h.devices
        state = owners.setdefault(h.owner_id, _OwnerState())
        state.devices += h.devices
        state.jobs += 1
    held_for: dict[tuple[str, str], int] = {}  # (pool, device) -> the job its free devices are held for

    def waited(a: Ask) -> float:
        return (now - a.queued_at).total_seconds()

    # A job that waited past the reservation time goes before the fresh ones of its priority, whatever its
    # owner's use: the devices held for it would otherwise go to a lighter user's stream of small jobs.
    order = sorted(
        snap.queued,
        key=lambda a: (
            -a.priority,
            waited(a) < reserve_after_s,
            snap.week_seconds.get(a.owner_id, 0.0),
            a.queued_at,
            a.job_id,
        ),
    )
    decisions = []
    for position, ask in enumerate(order, start=1):
        decision = Decision(ask.job_id, position, "")
        decisions.append(decision)
        owner = owners.setdefault(ask.owner_id, _OwnerState())
        quota = snap.quotas.get(ask.owner_id, quota_service.NO_LIMITS)
        blocked = quota_service.concurrency_block(
            quota, ask.owner, running_devices=owner.devices, running_jobs=owner.jobs, asks=ask.devices
        ) or quota_service.budget_block(quota, ask.owner, snap.week_seconds.get(ask.owner_id, 0.0))
        if blocked:
            decision.reason = blocked
            continue
        candidates = [
            name for name in considered if (name == "ray") == ask.ray and _device_in(considered[name], ask.device)
        ]
        if not candidates:
            where = "the Ray cluster" if ask.ray else "a training worker's node"
            decision.reason = f"waiting for {where}: none has reported its devices yet"
            continue
        fits, best_free, best_total, holder = None, -1, 0, None
        for name in sorted(candidates, key=lambda n: -free[n].get(_device_in(considered[n], ask.device), 0)):
            device = _device_in(considered[name], ask.device)
            available = free[name].get(device, 0)
            total = considered[name].get(device, 0)
            holder_id = held_for.get((name, device))
            if holder_id is not None:
                holder = holder or holder_id
                continue
            best_total = max(best_total, total)
            if available >= ask.devices and fits is None:
                fits = (name, device)
            if available > best_free:
                best_free = available
        device = _device_in(considered[candidates[0]], ask.device)
        if fits is not None:
            pool, device = fits
            decision.start = fits
            decision.reason = f"starting: {_devices_text(ask.devices, device)} free" + (
                "" if pool == "ray" else f" on {pool.removeprefix('node:')}"
            )
            free[pool][device] -= ask.devices
            owner.devices += ask.devices
            owner.jobs += 1
            continue
        want = _devices_text(ask.devices, device)
        if best_free < 0:  # every pool with the device is held for an earlier job
            decision.reason = f"waiting for {want}: the free ones are held for job {holder} (it waited longest)"
            continue
        if best_total < ask.devices:
            where = "the Ray cluster has" if ask.ray else "no node has more than"
            decision.reason = f"waiting for {want}: {where} {best_total}"
        else:
            decision.reason = f"waiting for {want}: {max(best_free, 0)} free"
        if waited(ask) >= reserve_after_s and best_total >= ask.devices:
            # Hold what is free in the pool that will fit it soonest (most free now) until it fits.
            pool = max(
                (n for n in candidates if (n, _device_in(considered[n], ask.device)) not in held_for),
                key=lambda n: free[n].get(_device_in(considered[n], ask.device), 0),
            )
            pool_device = _device_in(considered[pool], ask.device)
            held_for[(pool, pool_device)] = ask.job_id
            decision.holds = (pool, pool_device)
            decision.reason += f" (waited {waited(ask):.0f} s: free devices are held for it)"
    return decisions


# ---------------------------------------------------------------------------------------------- reading the state


def _aware(ts: datetime) -> datetime:
    from datetime import UTC

    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def load(session: Session, settings: Settings, *, now: datetime | None = None) -> Snapshot:
    """The queue, the jobs holding devices, the pools, and every owner's quota and last week's use."""
    now = now or utcnow()
    # sqlmodel's select() is typed for at most four entities: SQLAlchemy's for these rows.
    queued_rows = session.execute(
        sa_select(
            col(Job.id),
            col(Job.owner_id),
            col(User.name),
            col(Job.priority),
            col(Job.queued_at),
            col(Job.created_at),
            col(Job.config),
        )
        .join(User, col(User.id) == col(Job.owner_id))
        .where(col(Job.status) == JobStatus.queued.value, col(Job.kind) == "train")
    ).all()
    holding_rows = session.execute(
        sa_select(col(Job.id), col(Job.owner_id), col(Job.pool), col(Job.device), col(Job.devices)).where(
            col(Job.status).in_(HOLDING), col(Job.kind) == "train", col(Job.pool).is_not(None)
        )
    ).all()
    owner_ids = {r[1] for r in queued_rows} | {r[1] for r in holding_rows}
    names = {r[1]: r[2] for r in queued_rows}
    queued = [
        ask_of(jid, oid, name, prio, _aware(qat or cat), cfg or {})
        for jid, oid, name, prio, qat, cat, cfg in queued_rows
    ]
    holding = [Holding(jid, oid, pool or "", dev or "cpu", n or 1) for jid, oid, pool, dev, n in holding_rows]
    cutoff = now - POOL_STALE_AFTER
    pools = {
        p.name: {k: int(v) for k, v in (p.devices or {}).items()}
        for p in session.exec(select(ComputePool)).all()
        if _aware(p.updated_at) >= cutoff
    }
    return Snapshot(
        queued=queued,
        holding=holding,
        pools=pools,
        quotas=quota_service.quotas_for(session, owner_ids, settings),
        week_seconds=quota_service.week_device_seconds(session, owner_ids, now=now),
        names=names,
    )


def queue_info(session: Session, settings: Settings, job_ids: Sequence[int] | None = None) -> dict[int, dict[str, Any]]:
    """{job id: {"position", "reason"}} for queued training jobs (those of `job_ids`, or all)."""
    now = utcnow()
    snap = load(session, settings, now=now)
    if not snap.queued:
        return {}
    wanted = set(job_ids) if job_ids is not None else None
    out = {}
    for d in plan(snap, now=now, reserve_after_s=settings.sched_reserve_after_s):
        if wanted is None or d.job_id in wanted:
            reason = d.reason
            if d.start is not None:
                reason = f"{reason}: a worker is picking it up"
            out[d.job_id] = {"position": d.position, "reason": reason}
    return out


# ---------------------------------------------------------------------------------------------- claiming


def record_pool(session: Session, name: str, devices: dict[str, int]) -> None:
    """Upsert a pool's devices in one statement (a write first: on SQLite it takes the database's write lock, so
    claimers decide one after the other)."""
    values = {"name": name, "devices": devices, "updated_at": utcnow()}
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt: Any = pg_insert(ComputePool).values(**values)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(ComputePool).values(**values)
    stmt = stmt.on_conflict_do_update(
        index_elements=["name"], set_={"devices": stmt.excluded.devices, "updated_at": stmt.excluded.updated_at}
    )
    session.exec(stmt)


def _lock(session: Session) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.exec(text("SELECT pg_advisory_xact_lock(:key)").bindparams(key=CLAIM_LOCK_KEY))  # type: ignore[call-overload]


def claim(
    session: Session,
    settings: Settings,
    *,
    worker: str,
    node_pool: str,
    node_devices: dict[str, int],
    ray_devices: dict[str, int] | None,
    task_id: str | None = None,
) -> int | None:
    """In the caller's transaction: decide and claim the first queued training job that may start on this node
    or the Ray cluster (preflight, its devices recorded on the row). Returns its id, or None."""
    _lock(session)
    record_pool(session, node_pool, node_devices)  # first statement a write: SQLite claimers queue up here
    if ray_devices is not None:
        record_pool(session, "ray", ray_devices)
    now = utcnow()
    snap = load(session, settings, now=now)
    considered = [node_pool] + (["ray"] if ray_devices is not None else [])
    for decision in plan(snap, now=now, reserve_after_s=settings.sched_reserve_after_s, pools=considered):
        if decision.start is None:
            continue
        pool, device = decision.start
        ask = next(a for a in snap.queued if a.job_id == decision.job_id)
        result = session.exec(
            update(Job)
            .where(col(Job.id) == decision.job_id, col(Job.status) == JobStatus.queued.value)
            .values(**crud.claim_values(worker, task_id, now), pool=pool, device=device, devices=ask.devices)
            .returning(col(Job.attempts))
            .execution_options(synchronize_session=False)
        ).first()
        if result is None:  # cancelled meanwhile
            continue
        session.add(
            JobEvent(
                job_id=decision.job_id,
                from_status=JobStatus.queued.value,
                to_status=JobStatus.preflight.value,
                reason=f"claimed by {worker} (attempt {result[0]}): {_devices_text(ask.devices, device)} on {pool}",
            )
        )
        return decision.job_id
    return None


def queued_training_jobs(session: Session) -> int:
    from sqlalchemy import func

    return int(
        session.exec(
            select(func.count()).select_from(Job).where(Job.status == JobStatus.queued.value, Job.kind == "train")
        ).one()
    )
