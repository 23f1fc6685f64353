"""Notebook 02: draft checkpoints from their safetensors headers and configs (no torch): layouts, inspect, convert.

`python -m kit inspect PATH` and `python -m kit convert SRC DST --to sglang` are the verbs.
"""
