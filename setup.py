"""The optional C extension only; everything else is in pyproject.toml.

``torchrbd._placement`` (src/torchrbd/_placement.c, no torch headers) is built where a C
compiler is; ``optional=True`` lets an install without one go on (torchrbd then uses
torch's gather instead, see torchrbd.algorithms.placement)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "torchrbd._placement", ["src/torchrbd/_placement.c"],
    extra_compile_args=["-O3", "-fopenmp"], extra_link_args=["-fopenmp"], optional=True,
)])
