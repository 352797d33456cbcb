"""Saved views of the UI's pages (for now the jobs list): a user's named filter/sort/column sets, stored as the
page's query string. Private: each user lists and deletes only their own (another user's view is 404, for admins
too). The rules (limit, replace by name) live in services/saved_views.py."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from training_platform.api import errors, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep
from training_platform.db.models import SavedView, row_id
from training_platform.services import saved_views

log = logging.getLogger("training_platform.api.views")

router = APIRouter(prefix="/views", tags=["views"])


def _read(view: SavedView) -> dict:
    return {
        "id": view.id,
        "name": view.name,
        "page": view.page,
        "query": dict(view.query or {}),
        "created_at": view.created_at,
    }


@router.get("", response_model=list[schemas.SavedViewRead])
def list_views(
    session: SessionDep,
    user: CurrentUser,
    page: Annotated[schemas.ViewPage | None, Query(description="Only this page's views (default: every page).")] = None,
):
    """Your saved views, newest first (at most 50)."""
    return [_read(view) for view in saved_views.list_views(session, row_id(user), page)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.SavedViewRead,
    dependencies=[JsonBody],
    responses={
        200: {"model": schemas.SavedViewRead, "description": "Replaced: the query of your view of that name."},
        **errors.responses(409),
    },
)
def save_view(body: schemas.SavedViewCreate, response: Response, session: SessionDep, user: CurrentUser):
    """Saves a view (201). A name you already use on that page replaces that view's query (200). 409 when you
    already have 50 views."""
    view, created = saved_views.save_view(session, row_id(user), name=body.name, page=body.page, query=body.query)
    if not created:
        response.status_code = status.HTTP_200_OK
    log.info(
        "view %s (%r on %s) %s by %s", view.id, view.name, view.page, "saved" if created else "replaced", user.name
    )
    return _read(view)


@router.delete("/{view_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def delete_view(view_id: Annotated[int, schemas.id_path("View id.")], session: SessionDep, user: CurrentUser):
    """Deletes one of your views (another user's: 404)."""
    saved_views.delete_view(session, row_id(user), view_id)
    log.info("view %s deleted by %s", view_id, user.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
