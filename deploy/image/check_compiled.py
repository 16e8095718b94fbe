"""Fails (exit 1) unless every module listed in mypyc-modules.txt loads as a compiled extension:
the image must carry the mypyc build, not the interpreted one."""

import importlib
import sys

listed = [line.strip() for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")]
interpreted = [
    path for path in listed
    if not (importlib.import_module(path.removesuffix(".py").replace("/", ".")).__file__ or "").endswith(".so")
]
if interpreted:
    sys.exit(f"not compiled: {', '.join(interpreted)}")
print(f"{len(listed)} compiled modules")
