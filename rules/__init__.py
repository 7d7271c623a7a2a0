"""The rule programs (``*.dl``): the optimizer's and the engine's examples, shipped as package data.

They live at the top of the source tree, outside ``reopt/``, because they are the design: read them
first. Installed, they are the package ``reopt.rules``, found with ``importlib.resources``.
"""
