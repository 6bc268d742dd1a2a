"""docs/guides/mixtures.md: every python block runs as the page says (in a process of its
own, or under torchrun with the number of processes its ``run:`` line gives)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from torchrun_runs import torchrun

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "mixtures.md"
BLOCK = re.compile(r"(?:<!-- run: (?P<run>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.DOTALL)


def blocks() -> list[tuple[str | None, str]]:
    return [(m["run"], m["code"]) for m in BLOCK.finditer(GUIDE.read_text())]


def test_the_guide_has_an_in_process_and_torchrun_blocks() -> None:
    runs = [run for run, _ in blocks()]
    assert runs == [
        None,
        "torchrun --nproc-per-node 2",
        "torchrun --nproc-per-node 3",
    ]


def test_the_in_process_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (code,) = [code for run, code in blocks() if run is None]
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(code, str(GUIDE), "exec"), {})
    first = output.getvalue().splitlines()[0]
    assert first == "(Fraction(3, 5), Fraction(3, 10), Fraction(1, 10))"


@pytest.mark.processes
def test_train_checkpoint_and_resume_on_another_world_size_with_new_weights(
    tmp_path: Path,
) -> None:
    outputs = []
    for number, (run, code) in enumerate(blocks()):
        if run is None:
            continue
        processes = int(run.rsplit(" ", 1)[1])
        script = tmp_path / f"block{number}.py"
        script.write_text(code)
        done = torchrun(str(script), processes=processes, cwd=tmp_path, timeout=150.0)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout)
    saved, resumed = outputs
    assert sorted(saved.splitlines()) == [
        "rank 0 of 2: saved at 80",
        "rank 1 of 2: saved at 80",
    ]
    lines = sorted(resumed.splitlines())
    assert len(lines) == 3
    # 920 positions left, 3 ranks x 8 per step: 39 steps each (the last one padded).
    for rank, line in enumerate(lines):
        assert line == (
            f"rank {rank} of 3: 39 more steps, schedule [[0, [6, 3, 1]], [80, [2, 3, 5]]]"
        )
