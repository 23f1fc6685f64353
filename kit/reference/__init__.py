"""Notebook 03 (models): SGLang's EAGLE-3 draft and speculative step in plain PyTorch, the oracle, the trainer.

One speculative step (`kit.reference.speculate`) serves the offline oracle and the CPU reference server.
Imports torch: nothing below this layer does.
"""
