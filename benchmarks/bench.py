"""Run the benchmark from a source checkout: ``python benchmarks/bench.py --help``.

The code lives in :mod:`torchrbd.bench` so that the installed ``torchrbd bench``
runs the same thing.
"""

from torchrbd.bench import main

if __name__ == "__main__":
    main()
