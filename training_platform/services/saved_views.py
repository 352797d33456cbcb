"""Saved views: a user's named views of a UI page (the jobs list's filters, sort and columns as its query string).
Private to their owner (others, admins included, neither see nor delete them); at most MAX_VIEWS_PER_USER per user;
saving a name the user already has on that page replaces its query."""

from __future__ import annotations

from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from training_platform.core.errors import Conflict, NotFound
from training_platform.db.models import SavedView

MAX_VIEWS_PER_USER = 50


def list_views(session: Session, owner_id: int, page: str | None = None) -> list[SavedView]:
    """The owner's views (of one page, or of every page), newest first."""
    query = select(SavedView).where(SavedView.owner_id == owner_id)
    if page is not None:
        query = query.where(SavedView.page == page)
    return list(session.exec(query.order_by(col(SavedView.created_at).desc(), col(SavedView.id).desc())).all())


def _named(session: Session, owner_id: int, page: str, name: str) -> SavedView | None:
    return session.exec(
        select(SavedView).where(SavedView.owner_id == owner_id, SavedView.page == page, SavedView.name == name)
    ).first()


def save_view(
    session: Session, owner_id: int, *, name: str, page: str, query: dict[str, str]
) -> tuple[SavedView, bool]:
    """Create the view, or replace the query of the owner's view of that name on that page; commits. Returns the
    view and whether it was created. Conflict when the owner already has MAX_VIEWS_PER_USER views."""
    for _ in range(2):  # a view of the same name created concurrently: replace it instead
        existing = _named(session, owner_id, page, name)
        if existing is not None:
            existing.query = dict(query)
            session.add(existing)
            session.commit()
            return existing, False
        count = session.exec(select(func.count()).select_from(SavedView).where(SavedView.owner_id == owner_id)).one()
        if count >= MAX_VIEWS_PER_USER:
            raise Conflict(f"at most {MAX_VIEWS_PER_USER} saved views per user: delete one first")
        view = SavedView(owner_id=owner_id, name=name, page=page, query=dict(query))
        session.add(view)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            continue
        return view, True
    raise Conflict(f"the view {name!r} is being saved by another request; try again")


def delete_view(session: Session, owner_id: int, view_id: int) -> SavedView:
    """Delete one of the owner's views; commits. NotFound for another user's view, as for a missing one."""
    view = session.get(SavedView, view_id)
    if view is None or view.owner_id != owner_id:
        raise NotFound(f"view {view_id} not found")
    session.delete(view)
    session.commit()
    return view
