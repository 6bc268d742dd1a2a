"""Released as a library: a wheel and an sdist that install and run with torch alone.

``python -m build`` (without isolation: offline, with the environment's setuptools) makes
a wheel and an sdist of this checkout. The wheel requires torch alone (every other
requirement belongs to an extra). It is installed into a fresh virtual environment without
its dependencies, and that environment is given the test environment's torch, and only
the packages ``import torch`` loads, through a ``.pth`` file: there ``import samplers``
runs a DataLoader identical to the stock sampler's and imports none of the study's
libraries, ``dsampler --version`` prints the version, ``dsampler --help`` its help, and a
command names the extra it needs. Marked ``install`` (it builds and installs: about a
minute); deselect with ``-m "not install"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from studies.console import STUDY_MODULES

ROOT = Path(__file__).resolve().parents[1]
#: The fresh environment's variables: this checkout is not on its path.
ISOLATED = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}

SCRIPT = """
import sys
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler as Stock
from samplers import DistributedSampler
import samplers

assert samplers.__file__.startswith({environment!r}), samplers.__file__  # the wheel's
for rank in range(3):
    ours = DataLoader(range(20), batch_size=4, sampler=DistributedSampler(range(20), 3, rank))
    stock = DataLoader(range(20), batch_size=4, sampler=Stock(range(20), 3, rank))
    assert [b.tolist() for b in ours] == [b.tolist() for b in stock]
study = {names}
print(sorted(name for name in sys.modules if name.split(".")[0] in study))
"""

#: The top-level packages ``import torch`` (and the parts the sampler uses) loads from the
#: test environment, study libraries left out (torch imports some of them when present).
TORCH_ALONE = """
import json, sys, sysconfig
from pathlib import Path
import torch, torch.distributed, torch.utils.data
site = Path(sysconfig.get_paths()["purelib"]).resolve()
found = set()
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None)
    if path and Path(path).resolve().is_relative_to(site):
        found.add(Path(path).resolve().relative_to(site).parts[0])
print(json.dumps({"site": str(site), "names": sorted(found)}))
"""


def build(output: Path) -> tuple[Path, Path]:
    """The wheel and the sdist ``python -m build`` makes of this checkout."""
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", output, ROOT],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = output.glob("dsampler-*.whl")
    (sdist,) = output.glob("dsampler-*.tar.gz")
    return wheel, sdist


def torch_alone(directory: Path) -> Path:
    """A directory of links to the test environment's torch and what it imports."""
    directory.mkdir()
    run = subprocess.run(
        [sys.executable, "-c", TORCH_ALONE], capture_output=True, text=True, check=True
    )
    found = json.loads(run.stdout)
    for name in found["names"]:
        if name.removesuffix(".py") in STUDY_MODULES or name.endswith(".pth"):
            continue
        (directory / name).symlink_to(Path(found["site"]) / name)
    assert (directory / "torch").exists()
    return directory


@pytest.mark.install
@pytest.mark.timeout(900)
def test_the_wheel_installs_and_runs_with_torch_alone(tmp_path: Path) -> None:
    wheel, sdist = build(tmp_path / "dist")

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        fields = Parser().parsestr(archive.read(metadata).decode())
    assert "samplers/__init__.py" in names and "samplers/py.typed" in names
    assert fields["Version"] == "0.1.0"
    required = [r for r in fields.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert [r.split(" ")[0].split(">")[0].split("<")[0] for r in required] == ["torch"]
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for expected in ("pyproject.toml", "README.md", "LICENSE", "samplers/__init__.py"):
        assert expected in members, expected

    environment = tmp_path / "env"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel],
        check=True,
        timeout=300,
        env=ISOLATED,
    )
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "torch-alone.pth").write_text(f"{torch_alone(tmp_path / 'torch')}\n")

    run = subprocess.run(
        [python, "-c", SCRIPT.format(names=sorted(STUDY_MODULES), environment=str(environment))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=ISOLATED,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"

    dsampler = environment / "bin" / "dsampler"
    shown = subprocess.run([dsampler, "--version"], capture_output=True, text=True, env=ISOLATED)
    assert (shown.returncode, shown.stdout) == (0, "dsampler 0.1.0\n"), shown.stderr
    helped = subprocess.run([dsampler, "--help"], capture_output=True, text=True, env=ISOLATED)
    assert helped.returncode == 0, helped.stderr  # help always works
    assert helped.stdout.startswith("usage: dsampler")
    assert "install the study extra: pip install '/path/to/dsampler[study]'" in helped.stderr
    command = subprocess.run(
        [dsampler, "explain", "--dataset-size", "4", "--world-size", "2", "--batch-size", "2"],
        capture_output=True,
        text=True,
        env=ISOLATED,
    )
    assert command.returncode == 1
    assert "install the study extra" in command.stderr
    assert "Traceback" not in command.stderr + helped.stderr


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
