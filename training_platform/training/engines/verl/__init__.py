"""The verl engine: the job becomes a verl config (mapping.py, one table), checked by our rules and verl's own
(checks.py), composed offline from verl's Hydra defaults (generate.py); engine.py runs it."""
