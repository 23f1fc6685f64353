"""Tests of kit.vllm: the per-release vLLM EAGLE-3 table, read and (one release) re-derived from its wheel."""
