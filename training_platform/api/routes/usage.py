"""Usage: device-hours, jobs and cost per user, job or device type over a window (services/usage.py). A user sees their
own usage; admins everyone's, or one user's (`user_id`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from training_platform.api import errors, schemas
from training_platform.api.deps import CurrentUser, SessionDep, SettingsDep
from training_platform.core.errors import InvalidInput
from training_platform.core.timeutil import utcnow
from training_platform.db.models import row_id
from training_platform.services import usage

router = APIRouter(prefix="/usage", tags=["usage"])


def _utc(name: str, value: datetime) -> datetime:
    try:
        return schemas.as_utc(value)
    except OverflowError:
        raise InvalidInput([(f"query.{name}", "out of range once converted to UTC")]) from None


@router.get("", response_model=schemas.UsageReport, response_model_exclude_none=True, responses=errors.responses(403))
def get_usage(
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    since: Annotated[
        datetime | None, Query(description="ISO 8601; without a timezone: UTC. Default: `until` - 7 days.")
    ] = None,
    until: Annotated[datetime | None, Query(description="ISO 8601; without a timezone: UTC. Default: now.")] = None,
    group_by: Annotated[schemas.UsageGroupBy, Query(description="Rows per user, job or device type.")] = "user",
    user_id: Annotated[int | None, schemas.id_query("Only this user's usage (admins; others: their own id).")] = None,
):
    """Device-hours (devices x wall hours, each attempt clipped to the window; a running one counts up to now), jobs
    and cost (TP_DEVICE_HOUR_COST) in [since, until], with a total and device-hours per UTC day and user. Your own
    usage; an admin's covers everyone (or `user_id`'s). 422 naming the field: `until` before `since`, a window over
    366 days (`since`), an unknown `group_by`."""
    if user_id is not None and user_id != user.id and not user.is_admin:
        raise errors.forbidden("admin only: the usage of another user")
    end = _utc("until", until) if until is not None else utcnow()
    if since is not None:
        start = _utc("since", since)
    else:
        try:
            start = end - usage.DEFAULT_WINDOW
        except OverflowError:
            start = datetime.min.replace(tzinfo=UTC)
    owner_id = user_id if user.is_admin else row_id(user)
    try:
        usage.check_window(start, end, group_by)
    except InvalidInput as exc:
        raise InvalidInput([(f"query.{e.path}", e.reason) for e in exc.errors]) from None
    prices = usage.device_hour_prices(settings)
    return usage.usage_report(session, since=start, until=end, group_by=group_by, owner_id=owner_id, prices=prices)
