"""Notebook 03 (wiring): which target hidden states the draft gets under a launch, and the checks on it.

`kit.wiring.plan` builds the wiring (runtime); `kit.wiring.checks` judges configs + a launch (no torch);
`kit.wiring.probe` captures real hidden states (`python -m kit probe`).
"""
