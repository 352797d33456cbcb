"""Loaded for every test: the proof audit (an embedded Redis when none listens, the skip summary by cause, CI's
rule that a feature's proof may not be skipped). See tests/proof_audit.py."""

pytest_plugins = ["proof_audit"]
