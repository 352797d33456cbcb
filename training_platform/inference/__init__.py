"""Serving models for the playground and the OpenAI-compatible route (no HTTP, no Celery here).

- `serving.py`: the per-process LRU cache of loaded models (keyed by directory + its files' mtimes, so a re-written
  `final/` is loaded again) and streaming generation (`model.generate` with a streamer that hands each decoded
  piece to a callback; seeded sampling or greedy; stop strings; cancel / deadline checked between tokens).
  Loading reuses `evaluation.generation.TransformersBackend` (device, dtype, pad/eos, context length).
- `channel.py`: the Redis protocol between the API and the inference workers (request claim, per-request event
  list, cancel flag, worker heartbeats).

The API process never imports torch or transformers through this package: `serving` imports them inside functions.
"""
