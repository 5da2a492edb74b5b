"""The README's install command installs what its test command needs (issue 24, item 9): a
fresh clone that runs the first command and then the Tests section's command must not fail
with ``No module named pytest`` (or, for ``-n``, a missing pytest-xdist)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_install_command_brings_the_test_tools() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = _bash_blocks(readme)
    install = blocks[0].splitlines()[0]
    test_cmd = next(b for b in blocks if "pytest" in b).strip()
    m = re.search(r'pip install -e "?\.(?:\[([\w,]+)\])?"?', install)
    assert m, install
    extras = set((m.group(1) or "").split(",")) - {""}
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = " ".join(deps["dependencies"] + [d for e in extras for d in deps["optional-dependencies"][e]])
    assert re.search(r"\bpytest\b", installed), f"{install!r} does not install pytest for {test_cmd!r}"
    if re.search(r"\s-n\s", test_cmd):
        assert "pytest-xdist" in installed, f"{install!r} does not install pytest-xdist for {test_cmd!r}"
