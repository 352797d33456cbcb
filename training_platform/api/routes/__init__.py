"""One router per resource; `training_platform.api.app` mounts them under /api/v1."""
