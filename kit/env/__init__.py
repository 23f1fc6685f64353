"""Notebook 01: is this machine fit to serve EAGLE-3 with SGLang? GPU/driver/CUDA/torch/NCCL facts and their rules.

`kit.env.machine` gathers facts (no verdicts), `kit.env.gpu_arch`, `kit.env.nccl` and `kit.env.multigpu` judge them,
`kit.env.checks` is `python -m kit env`. Rules run on recorded facts files, so they are tested on a CPU laptop.
"""
