"""Installed without extras, the package pulls in torch alone and the sampler works.

Builds a fresh virtual environment, installs the project into it exactly as a user adding
the sampler to their project would (``pip install -c constraints.txt <checkout>``, no
extras), and checks that none of the study's libraries arrived, that ``import samplers``
runs a DataLoader identical to the stock sampler's, and that ``dsampler`` names the extra
it needs. Marked ``install`` (about a minute: it installs torch); deselect with
``-m "not install"``.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from studies.console import STUDY_MODULES

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as Stock
from samplers import DistributedSampler

for rank in range(3):
    ours = DataLoader(range(20), batch_size=4, sampler=DistributedSampler(range(20), 3, rank))
    stock = DataLoader(range(20), batch_size=4, sampler=Stock(range(20), 3, rank))
    assert [b.tolist() for b in ours] == [b.tolist() for b in stock]
study = {names}
print(sorted(name for name in sys.modules if name.split(".")[0] in study))
"""


@pytest.mark.install
@pytest.mark.timeout(900)
def test_the_sampler_installs_and_runs_without_the_study_libraries(tmp_path: Path) -> None:
    environment = tmp_path / "env"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", ROOT],
        check=True,
        cwd=tmp_path,
        timeout=840,
    )
    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "freeze"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.lower()
    names = {line.split("==")[0] for line in installed.split()}
    assert "torch" in names and "dsampler" in names
    assert names.isdisjoint(STUDY_MODULES), sorted(names & STUDY_MODULES)

    run = subprocess.run(
        [python, "-c", SCRIPT.format(names=sorted(STUDY_MODULES))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"

    command = subprocess.run(
        [environment / "bin" / "dsampler", "--help"], capture_output=True, text=True
    )
    assert command.returncode == 1
    assert "install the study extra" in command.stderr
    assert "Traceback" not in command.stderr


def test_import_samplers_imports_no_study_library() -> None:
    # torch itself imports tqdm when it is installed; only what samplers adds counts.
    code = (
        "import sys, torch, torch.utils.data, torch.distributed\n"
        "before = set(sys.modules)\n"
        "import samplers, samplers.plan, samplers.iterators, samplers.checks\n"
        f"study = {sorted(STUDY_MODULES)}\n"
        "print(sorted(n for n in set(sys.modules) - before if n.split('.')[0] in study))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert run.stdout.strip() == "[]"
