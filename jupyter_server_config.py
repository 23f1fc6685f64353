"""Jupyter server settings for the kit's notebooks: `jupyter lab --config=jupyter_server_config.py notebooks/`
at the top of this checkout (the README's command). JupyterLab then saves the kit's own notebooks without their
outputs (kit.demo.strip_saved_outputs), so running them leaves `git status` clean; their results are files
under `runs/<time>/`.
"""

c = get_config()  # noqa: F821  (provided by Jupyter when it loads this file)
c.FileContentsManager.pre_save_hook = "kit.demo.strip_saved_outputs"
