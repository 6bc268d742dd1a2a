"""studies.common.records: a record names its command, machine and versions, is written
whole, and a keyed record (Rows) gives back what was measured or refuses to be used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from studies.common import records

COMMAND = "python -m tests.example --record"


def _rows(path: Path, settings: dict[str, Any], keys: list[tuple[str, int]]) -> records.Rows:
    def measure(name: str, size: int) -> dict[str, Any]:
        return {"name": name, "size": np.int64(size), "half": np.float64(size / 2), "t": (1, 2)}

    return records.Rows(path, COMMAND, measure, lambda: keys, lambda: settings, ("torch",))


def test_rows_give_back_what_was_measured(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    rows = _rows(path, {"sizes": (1, 3)}, [("a", 1), ("b", 3)])
    rows.save()
    data = json.loads(path.read_text())
    assert data[records.MARK] == COMMAND
    assert set(data["machine"]) == {"CPU", "cores", "memory", "system"}
    assert set(data["versions"]) == {"Python", "torch"}
    loaded = rows.load()
    assert list(loaded) == [("a", 1), ("b", 3)]
    assert loaded[("b", 3)] == {"name": "b", "size": 3, "half": 1.5, "t": [1, 2]}
    assert loaded[("b", 3)] == rows.row("b", 3)
    assert type(loaded[("b", 3)]["size"]) is int
    sentence = rows.provenance("Measuring is slow", "the rows", "a test compares")
    assert sentence.startswith("Measuring is slow, so this finding renders the rows from")
    assert "rows.json" in sentence and COMMAND in sentence and "torch" in sentence


def test_rows_refuse_a_record_of_other_settings_or_keys(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    _rows(path, {"sizes": (1, 3)}, [("a", 1)]).save()
    with pytest.raises(records.RecordError, match="other settings.*" + COMMAND):
        _rows(path, {"sizes": (1, 4)}, [("a", 1)]).load()
    with pytest.raises(records.RecordError, match=r"no row for \('b', 2\)"):
        _rows(path, {"sizes": (1, 3)}, [("a", 1), ("b", 2)]).load()
    with pytest.raises(records.RecordError, match="cannot be read"):
        _rows(tmp_path / "missing.json", {}, []).load()


def test_rows_refuse_a_value_json_cannot_hold(tmp_path: Path) -> None:
    rows = records.Rows(
        tmp_path / "rows.json", COMMAND, lambda: {"x": object()}, lambda: [()], dict, ()
    )
    with pytest.raises(TypeError, match="is not a JSON value"):
        rows.save()
    assert not (tmp_path / "rows.json").exists()


def test_a_record_of_another_command_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text('{"generated_by": "something else", "machine": {}, "versions": {}}\n')
    with pytest.raises(records.RecordError, match="not replaced"):
        _rows(path, {}, [("a", 1)]).save()
    assert "something else" in path.read_text()


def test_rows_command_line_records_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.json"
    rows = _rows(path, {"sizes": (1,)}, [("a", 1)])
    for wrong in ([], ["--recrd"], ["--record", "extra"]):
        with pytest.raises(SystemExit, match=f"usage: {COMMAND}"):
            rows.main(wrong)
        assert not path.exists()
    rows.main(["--record"])
    assert rows.load() == {("a", 1): rows.row("a", 1)}
    assert f"wrote {path}" in capsys.readouterr().err
