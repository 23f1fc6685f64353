"""Notebook 05: benchmark a live server: acceptance from every source, throughput, speedup, verdicts, sweeps, plots.

`python -m kit bench` and `python -m kit sweep` are the verbs; the client speaks SGLang's and OpenAI's APIs.
"""
