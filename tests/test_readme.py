"""The README's Python snippets run as written (in order, sharing one namespace)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    namespace = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    M, J = namespace["M"], namespace["J"]
    assert M.shape == (1024, 8, 8) and J.shape == (1024, 6, 8)  # two iCub joints + floating base
    assert namespace["q"].grad is not None
    assert namespace["tau"].grad is not None and namespace["tau"].grad.abs().sum() > 0
