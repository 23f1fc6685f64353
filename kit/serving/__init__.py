"""Notebook 04: a launch line as a typed spec, its checks, the server process, its logs, the CPU reference server.

`python -m kit launch` lints and starts SGLang (or the reference server) through `kit.serving.process`;
`python -m kit serve` is the reference server itself.
"""
