"""`kit tune`: which speculative parameters pay at each batch size on this machine, predicted, then measured.

`kit.tune.predict` is the model; `kit.tune.run` the verb (`python -m kit tune --launch "..." --batch-size 1 4 16`),
tune.json, the figure and notebook 05's panel. Entered from `kit tune` and notebook 05; no module imports it.
"""
