"""The TRL engine: transformers/TRL trainers in each process (one, or one per rank under torchrun / Ray).

Light to import (config validation reads the builder table): `builders.py` registers one builder per algorithm
and imports TRL only when a builder runs; `engine.py` loads the model and runs the trainer; `callbacks.py` adapts
transformers' callbacks to the engine-neutral RunWriter and StopSignal.
"""
