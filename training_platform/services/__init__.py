"""The use cases the API and the workers share (who may read what, ...): they use `db/` for storage and the domain
packages for the work, and know nothing of HTTP or Celery."""
