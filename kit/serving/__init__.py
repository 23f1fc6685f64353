"""Notebook 04: a launch line as a typed spec, its checks, the server process and its logs, the serving engines.

`kit launch` (`kit.launch_verb`) lints and starts SGLang (or the kit's CPU reference server, `kit.refserver`)
through `kit.serving.process`; the rehearsal (`kit.rehearsal`) runs a launch in miniature on real SGLang.
"""
