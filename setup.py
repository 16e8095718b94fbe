"""Packaging hook: with ROUTER_COMPILE=1 the hot-path modules listed in mypyc-modules.txt are
compiled with mypyc (about 2.5x less CPU per routed message). Everything else, and every
install without that variable (e.g. the editable development install), is plain Python."""

import os
from pathlib import Path

from setuptools import setup

ext_modules = []
if os.environ.get("ROUTER_COMPILE") == "1":
    from mypyc.build import mypycify

    listed = Path(__file__).with_name("mypyc-modules.txt").read_text().splitlines()
    modules = [line.strip() for line in listed if line.strip() and not line.startswith("#")]
    ext_modules = mypycify(modules, opt_level="3")

setup(ext_modules=ext_modules)
