"""The guarantee kit (``samplers.testing``) and ``dsampler check``.

The kit must find each violation in ``kit_samplers``' deliberately wrong samplers, with a
counterexample that the plain check function confirms, and none in the project's samplers
for the guarantees they give.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import kit_samplers
import kit_tokens
import pytest
from torch.utils.data.distributed import DistributedSampler as StockSampler

from samplers import DistributedBatchSampler, DistributedSampler
from samplers import testing as kit
from studies.cli import main
from studies.findings import guarantees
from studies.kit import peers

#: For each guarantee, one of the project's samplers that gives it (a factory).
HOLDERS = {
    "handles-every-size": kit_samplers.ours_uneven,
    "len-matches-iteration": kit_samplers.ours_uneven,
    "equal-length-across-ranks": kit_samplers.ours_batches_pad,
    "equal-batch-counts": kit_samplers.ours_batches_pad,
    "covers-dataset": kit_samplers.ours_uneven,
    "exactly-once": kit_samplers.ours_uneven,
    "no-tiny-batch": kit_samplers.ours_batches_pad,
    "reshuffles-with-set-epoch": kit_samplers.ours_uneven,
    # torch's generator keeps 32 bits of the seed: the randperm samplers repeat at 2**32.
    "seed-changes-order": peers.ours_feistel,
    "deterministic": kit_samplers.ours_uneven,
    "resumes-same-world-size": kit_samplers.ours_batches_pad,
    "resumes-other-world-size": kit_samplers.ours_uneven,
    "refuses-impossible-states": kit_samplers.ours_batches_pad,
    "loads-version-1-states": kit_samplers.ours_uneven,
    "state-read-concurrently": kit_samplers.ours_tokens,
    "second-iterator": kit_samplers.ours_uneven,
    "loader-epochs": kit_samplers.ours_auto_epoch,
    "bool-like-attributes": kit_samplers.ours_uneven,
    "loop-state-with-workers": kit_samplers.ours_uneven,
    "within-budget": kit_tokens.flops_uneven,
}

#: Deliberately wrong samplers not named after the guarantee they break.
WRONG = {
    "loop-state-with-workers": kit_samplers.per_rank_resume,
    "within-budget": kit_tokens.wrapping_flops,
}


def _wrong(guarantee: str) -> kit.Factory:
    if guarantee in WRONG:
        return WRONG[guarantee]
    return getattr(kit_samplers, "wrong_" + guarantee.replace("-", "_"))


def stock(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
    return StockSampler(dataset, num_replicas, rank, seed=seed)


def test_the_guarantee_ids_are_the_issue_s() -> None:
    assert (
        list(kit.GUARANTEES)
        == list(kit.CHECKS)
        == [
            "handles-every-size",
            "len-matches-iteration",
            "equal-length-across-ranks",
            "equal-batch-counts",
            "covers-dataset",
            "exactly-once",
            "no-tiny-batch",
            "reshuffles-with-set-epoch",
            "seed-changes-order",
            "deterministic",
            "resumes-same-world-size",
            "resumes-other-world-size",
            "refuses-impossible-states",
            "loads-version-1-states",
            "state-read-concurrently",
            "second-iterator",
            "bool-like-attributes",
            "loader-epochs",
            "loop-state-with-workers",
            "within-budget",
        ]
    )


@pytest.mark.parametrize("guarantee", list(kit.CHECKS))
def test_the_kit_finds_each_deliberate_violation_with_a_counterexample(guarantee: str) -> None:
    result = kit.check_guarantee(_wrong(guarantee), guarantee)
    assert result.holds is False, result
    found = result.counterexample
    assert found is not None
    assert {"dataset_size", "world_size", "batch_size", "rank", "epoch", "what"} <= set(found)
    assert found["what"] and result.experience
    assert 0 <= found["dataset_size"] <= kit.MAX_DATASET_SIZE
    if guarantee == "deterministic":
        return  # the configuration alone does not replay another process's global RNG
    arguments = {
        name: found[name]
        for name in ("dataset_size", "world_size", "batch_size", "epoch", "taken", "seed")
        if name in found
    }
    if "other_world_size" in found:
        arguments["other_world_size"] = found["other_world_size"]
    with pytest.raises(AssertionError, match=guarantee):
        kit.CHECKS[guarantee](_wrong(guarantee), kit.Configuration(**arguments))


@pytest.mark.parametrize("guarantee", list(kit.CHECKS))
def test_the_kit_finds_no_violation_in_our_samplers_that_give_it(guarantee: str) -> None:
    result = kit.check_guarantee(HOLDERS[guarantee], guarantee)
    assert result.holds is True, result
    assert result.counterexample is None


@pytest.mark.parametrize(
    ("factory", "guarantee", "said"),
    [
        (kit_samplers.replays_after_epoch_end, "resumes-same-world-size", "the epoch was over"),
        (kit_samplers.per_rank_resume, "resumes-same-world-size", "state"),
        (kit_samplers.stale_after_resume, "resumes-same-world-size", "the uninterrupted run's"),
        (kit_samplers.len_after_resume, "len-matches-iteration", "after a state saved at step"),
        (kit_samplers.len_after_finished, "len-matches-iteration", "after a state saved at"),
        (kit_samplers.every_other_epoch, "reshuffles-with-set-epoch", "every other epoch"),
        (kit_samplers.uneven_after_resume, "equal-batch-counts", "was loaded into"),
    ],
)
def test_the_kit_searches_the_boundaries(factory: kit.Factory, guarantee: str, said: str) -> None:
    """Each of these samplers resumes right mid-epoch and breaks at a boundary: the epoch's
    end, another rank's state, the epochs after the resumed one, len() after loading (a
    state mid-epoch, or one at the epoch's end), the epoch after next, the batch counts of
    an epoch resumed on another world size."""
    result = kit.check_guarantee(factory, guarantee)
    assert result.holds is False, result
    assert result.counterexample is not None
    assert said in result.counterexample["what"] + result.experience, result


class _Warning(DistributedSampler):  # type: ignore[type-arg]
    """Our sampler, warning every time it is iterated."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        warnings.warn("a warning of the sampler's own", UserWarning, stacklevel=2)
        return super().__iter__()


def test_the_kit_keeps_a_samplers_warnings_quiet_and_judges_what_it_yields() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = kit.check_guarantee(_Warning, "len-matches-iteration")
    assert result.holds is True, result
    assert [str(warning.message) for warning in caught] == []


def test_a_rank_whose_state_differs_is_named() -> None:
    """Per-rank counts: the short ranks' states resume the long ranks wrongly."""
    config = kit.Configuration(dataset_size=10, world_size=4, taken=2)
    with pytest.raises(AssertionError, match=r"rank [23]'s state"):
        kit.resumes_same_world_size(kit_samplers.per_rank_resume, config)


def test_counterexamples_are_shrunk_to_the_smallest_case() -> None:
    # A batch of one out of four is the smallest tiny batch: 5 samples on one rank.
    result = kit.check_guarantee(kit_samplers.wrong_no_tiny_batch, "no-tiny-batch")
    assert result.counterexample is not None
    shown = {k: result.counterexample[k] for k in ("dataset_size", "world_size", "batch_size")}
    assert shown == {"dataset_size": 5, "world_size": 1, "batch_size": 4}


def test_a_sampler_that_differs_only_in_a_fresh_process_is_not_deterministic() -> None:
    # The same in this process (the in-process search holds), not in another one.
    kit.deterministic(kit_samplers.hash_seeded, kit.Configuration(dataset_size=20, world_size=2))
    result = kit.check_guarantee(kit_samplers.hash_seeded, "deterministic")
    assert result.holds is False
    assert result.counterexample is not None
    assert "a fresh process yields a different order" in result.counterexample["what"]


def test_a_factory_not_importable_by_name_is_compared_in_this_process_only() -> None:
    def local(dataset, num_replicas, rank, seed):  # type: ignore[no-untyped-def]
        return kit_samplers.hash_seeded(dataset, num_replicas, rank, seed)

    result = kit.check_guarantee(local, "deterministic")
    assert result.holds is True
    assert "not compared with a fresh process" in result.detail


def test_the_thorough_search_finds_the_violation_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kit.search, "GUARANTEES", {"covers-dataset": "every index"})
    reference = "kit_samplers:wrong_covers_dataset"
    assert main(["check", reference, "--thorough", "--format", "json"]) == 1
    (record,) = json.loads(capsys.readouterr().out)
    assert record["holds"] is False
    assert record["counterexample"]["dataset_size"] % record["counterexample"]["world_size"]


def test_the_stock_sampler_pads_and_has_no_resume() -> None:
    frame = kit.check(stock)
    holds = dict(zip(frame["guarantee"], frame["holds"], strict=True))
    assert holds["exactly-once"] is False
    assert holds["equal-batch-counts"] is True
    assert holds["resumes-same-world-size"] is None
    assert holds["resumes-other-world-size"] is None
    assert list(frame.columns) == ["guarantee", "holds", "counterexample", "detail", "experience"]
    unsupported = frame[frame["guarantee"] == "resumes-same-world-size"].iloc[0]
    assert unsupported["counterexample"] is None
    assert "state_dict" in unsupported["detail"]


def test_the_plain_functions_work_in_a_user_s_own_test() -> None:
    config = kit.Configuration(dataset_size=10, world_size=4, batch_size=2, epoch=1, taken=3)
    for name, function in kit.CHECKS.items():
        if name == "within-budget":  # an index sampler has no budget to keep
            with pytest.raises(kit.Unsupported, match="no lengths"):
                function(kit_samplers.ours_uneven, kit.Configuration(dataset_size=10, world_size=5))
            continue
        if name == "seed-changes-order":  # randperm, as torch's, keeps 32 bits of the seed
            with pytest.raises(AssertionError, match="seeds 0 and 4294967296 give every rank"):
                function(kit_samplers.ours_uneven, kit.Configuration(dataset_size=10, world_size=5))
            function(peers.ours_feistel, kit.Configuration(dataset_size=10, world_size=5))
            continue
        function(kit_samplers.ours_uneven, kit.Configuration(dataset_size=10, world_size=5))
    kit.exactly_once(kit_samplers.ours_uneven, config)
    kit.resumes_other_world_size(kit_samplers.ours_batches_pad, config)
    with pytest.raises(AssertionError, match=r"exactly-once \(epoch 1\): 2 indices"):
        kit.exactly_once(stock, config)
    with pytest.raises(kit.Unsupported, match="state_dict"):
        kit.resumes_same_world_size(stock, config)


def test_a_batch_sampler_is_told_from_what_it_yields() -> None:
    def batches(dataset, num_replicas, rank, batch_size):  # type: ignore[no-untyped-def]
        return DistributedBatchSampler(dataset, batch_size, num_replicas, rank, tail="drop")

    def indices(dataset, num_replicas, rank):  # type: ignore[no-untyped-def]
        return DistributedSampler(dataset, num_replicas, rank, tail="drop")

    config = kit.Configuration(dataset_size=11, world_size=2, batch_size=3)
    # 11 samples in full batches of 3 on 2 ranks: one step of 2 batches each, 5 dropped;
    # the index sampler drops 1 and a DataLoader batches each rank's 5 as 3 + 2.
    with pytest.raises(AssertionError, match="5 of 11 indices reach no rank"):
        kit.covers_dataset(batches, config)
    with pytest.raises(AssertionError, match="1 of 11 indices reach no rank"):
        kit.covers_dataset(indices, config)
    kit.no_tiny_batch(indices, config)
    kit.equal_batch_counts(indices, config)


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_configuration_names_a_bad_value(bad: object) -> None:
    with pytest.raises(ValueError, match=r"dataset_size must be an integer >= 0, got"):
        kit.Configuration(dataset_size=bad, world_size=2)  # type: ignore[arg-type]


def test_check_rejects_a_factory_that_builds_no_sampler() -> None:
    with pytest.raises(TypeError, match="returned int, not a sampler"):
        kit.check(kit_samplers.not_a_sampler)
    with pytest.raises(ValueError, match="guarantee must be one of"):
        kit.check_guarantee(stock, "fast")


def test_configurations_a_sampler_raises_for_are_skipped_and_said() -> None:
    class Broken:
        def __init__(self, size: int) -> None:
            self.size = size

        def __iter__(self):  # type: ignore[no-untyped-def]
            if self.size > 3:
                raise RuntimeError("boom")
            return iter(range(self.size))

    def broken(dataset):  # type: ignore[no-untyped-def]
        return Broken(len(dataset))

    result = kit.check_guarantee(broken, "covers-dataset")
    assert result.holds is True
    skipped = re.search(r"the sampler raised for \(e\.g\. dataset_size=(\d+), ", result.detail)
    assert skipped is not None, result.detail
    assert int(skipped.group(1)) > 3
    assert "RuntimeError: boom" in result.detail


# --- dsampler check -----------------------------------------------------------------------------


def test_cli_json_lists_every_guarantee(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["check", "kit_samplers:wrong_equal_batch_counts", "--format", "json"])
    records = json.loads(capsys.readouterr().out)
    assert status == 1
    assert [record["guarantee"] for record in records] == list(kit.GUARANTEES)
    assert all(
        set(record) == {"guarantee", "holds", "counterexample", "detail"} for record in records
    )
    by_id = {record["guarantee"]: record for record in records}
    assert by_id["equal-batch-counts"]["holds"] is False
    assert by_id["equal-batch-counts"]["counterexample"]["world_size"] >= 2
    assert by_id["exactly-once"] == {
        "guarantee": "exactly-once",
        "holds": True,
        "counterexample": None,
        "detail": by_id["exactly-once"]["detail"],
    }
    assert by_id["resumes-same-world-size"]["holds"] is None


def test_cli_table_says_what_a_user_sees(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "kit_samplers:wrong_no_tiny_batch"]) == 1
    out = capsys.readouterr().out
    assert "N=5 W=1 B=4, rank 0, epoch 0: batch 1 holds 1 sample, batch size 4" in out
    assert "BatchNorm" in out
    assert "not supported" in out


def test_cli_exit_status_says_whether_a_guarantee_is_violated(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two guarantees, one violated, one held (the matrix, reports/guarantees.md, searches
    # them all: the padding batch sampler violates exactly-once alone).
    searched = {name: kit.GUARANTEES[name] for name in ("exactly-once", "equal-batch-counts")}
    monkeypatch.setattr(kit.search, "GUARANTEES", searched)
    assert main(["check", "kit_samplers:ours_batches_pad", "--format", "json"]) == 1
    records = json.loads(capsys.readouterr().out)
    assert {r["guarantee"]: r["holds"] for r in records} == {
        "exactly-once": False,
        "equal-batch-counts": True,
    }
    monkeypatch.setattr(kit.search, "GUARANTEES", {"exactly-once": "exactly once"})
    assert main(["check", "kit_samplers:ours_uneven", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["holds"] is True


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_such_module_here:factory", "cannot import module 'no_such_module_here'"),
        ("kit_samplers:nope", "module 'kit_samplers' has no attribute 'nope'"),
        ("kit_samplers:math", "'kit_samplers:math' is a module, not a callable factory"),
        ("kit_samplers:not_a_sampler", "kit_samplers:not_a_sampler returned int, not a sampler"),
        ("kit_samplers", "expected MODULE:FACTORY, got 'kit_samplers'"),
    ],
)
def test_cli_names_a_bad_factory_in_one_line(
    reference: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", reference]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert message in captured.err


def test_cli_says_which_extra_when_hypothesis_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    assert main(["check", "kit_samplers:ours_uneven"]) == 2
    assert "install the study extra" in capsys.readouterr().err


def test_cli_names_the_accepted_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "kit_samplers:needs_world_size"]) == 2
    err = capsys.readouterr().err
    assert "kit_samplers:needs_world_size requires 'world_size', which the kit does not" in err
    assert "by name, any of: dataset, num_replicas, rank, seed, batch_size" in err
    assert err.count("\n") == 1


@pytest.mark.timeout(120)
def test_cli_bounds_each_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "kit_samplers:hanging", "--timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert "kit_samplers:hanging: a configuration took longer than --timeout 2 s" in err
    size = re.search(r"dataset_size=(\d+)", err)
    assert size is not None and int(size.group(1)) > 100  # it hangs above 100 samples
    assert main(["check", "kit_samplers:ours_uneven", "--timeout", "0"]) == 2
    assert "--timeout must be a number of seconds in (0, 3600], got 0.0" in capsys.readouterr().err


def test_importing_samplers_imports_neither_the_kit_nor_its_libraries() -> None:
    code = (
        "import sys, samplers\n"
        "print(sorted(m for m in ('samplers.testing', 'hypothesis', 'pandas') if m in sys.modules))"
    )
    finished = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert finished.stdout.strip() == "[]"


# --- the matrix (reports/guarantees.md) ---------------------------------------------------------


def test_the_matrix_claim_holds_for_its_samplers() -> None:
    def holds(factory: kit.Factory, guarantee: str) -> bool | None:
        return kit.check_guarantee(factory, guarantee).holds

    # Padding repeats, dropping loses, neither pads nor drops: unequal batch counts unless
    # batches are laid out a step at a time.
    assert holds(peers.torch_pad, "exactly-once") is False
    assert holds(peers.torch_drop, "covers-dataset") is False
    assert holds(peers.ours_uneven, "equal-batch-counts") is False
    assert holds(peers.ours_batches_uneven, "exactly-once") is True
    assert holds(peers.ours_batches_pad, "equal-batch-counts") is True
    # The batch sampler's documented exception: with "uneven", batch size 1 and a world
    # size that does not divide the dataset (or fewer samples than ranks), exactly once
    # wins over equal batch counts.
    uneven = kit.check_guarantee(peers.ours_batches_uneven, "equal-batch-counts")
    assert uneven.holds is False and uneven.counterexample is not None
    example = uneven.counterexample
    assert example["batch_size"] == 1 or example["dataset_size"] < example["world_size"]
    assert holds(peers.ours_batches_uneven, "equal-length-across-ranks") is False
    # Only samplers with state_dict resume; ours on another world size, torchdata's not.
    assert holds(peers.torch_pad, "resumes-same-world-size") is None
    assert holds(peers.ours_pad, "resumes-other-world-size") is True
    # A batch sampler whose epoch can be empty (tail="drop") is graded as a batch sampler.
    assert holds(peers.ours_batches_drop, "resumes-other-world-size") is True
    pytest.importorskip("torchdata")
    assert holds(peers.torchdata_stateful, "resumes-other-world-size") is False


def test_the_matrix_finds_samplers_that_raise_for_valid_sizes_or_ignore_their_seed() -> None:
    pytest.importorskip("lightning")
    unrepeated = kit.check_guarantee(peers.lightning_unrepeated, "handles-every-size")
    assert unrepeated.holds is False and unrepeated.counterexample is not None
    example = unrepeated.counterexample
    assert 1 <= example["dataset_size"] < example["world_size"]
    assert "AssertionError" in example["what"]
    assert kit.check_guarantee(peers.lightning_unrepeated, "seed-changes-order").holds is False
    pytest.importorskip("mmengine")
    rounded = kit.check_guarantee(peers.mmengine_round_up, "handles-every-size")
    assert rounded.holds is False and rounded.counterexample is not None
    assert rounded.counterexample["dataset_size"] == 0
    assert "ZeroDivisionError" in rounded.counterexample["what"]


def test_the_kit_finds_a_seed_kept_in_32_bits() -> None:
    """Seeds 2**32 apart: a sampler keeping its seed in 32 bits gives one order for both,
    though seeds 1 apart differ. So does the stock sampler: torch's CPU generator keeps the
    seed's low 32 bits."""
    result = kit.check_guarantee(kit_samplers.seed_32, "seed-changes-order")
    assert result.holds is False and result.counterexample is not None
    seed = result.counterexample.get("seed", 0)
    assert f"seeds {seed} and {seed + 2**32} give every rank" in result.counterexample["what"]
    assert "32 bits" in result.experience
    stock_result = kit.check_guarantee(stock, "seed-changes-order")
    assert stock_result.holds is False and stock_result.counterexample is not None
    assert "4294967296 give every rank the same order" in stock_result.counterexample["what"]


def test_the_committed_matrix_shows_what_its_claim_says() -> None:
    """The claim's conditions, against the committed table the report rendered it from."""
    import pandas as pd

    cells = Path(__file__).resolve().parents[1] / "reports" / "guarantees-cells.csv"
    frame = pd.read_csv(cells, dtype=str, keep_default_na=False)
    found = guarantees.facts(frame)
    assert list(found.samplers) == [column.name for column in peers.COLUMNS]
    assert set(found.guarantees) <= set(kit.GUARANTEES)
    total = len(found.guarantees)
    assert max(found.count.values()) < total  # no sampler holds them all
    # Padding repeats, dropping loses: each sampler that pads violates exactly-once.
    for name in ("torch", "ours pad", "ours batches pad", "mmengine round_up"):
        assert name in found.violated["exactly-once"], name
    for name in ("torch drop_last", "ours drop"):
        assert name in found.violated["covers-dataset"], name
    # Resuming is checked only through state_dict; ours resume on another world size.
    for name in ("torch", "accelerate even", "Lightning unrepeated"):
        assert name in found.unsupported["resumes-other-world-size"], name
    for name in ("ours pad", "ours uneven", "ours batches uneven", "ours wrapper"):
        assert name in found.held["resumes-other-world-size"], name
    assert "ours batches drop" in found.held["resumes-other-world-size"]
    assert found.violated["resumes-other-world-size"] == ("torchdata",)


def test_a_missing_peer_fails_the_matrix_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import studies.common.extras as extras

    monkeypatch.setitem(extras.EXTRAS, "peers", (*extras.EXTRAS["peers"], "no_such_peer_lib"))
    with pytest.raises(extras.MissingExtra, match=r"no_such_peer_lib is not installed.*peers"):
        guarantees.cells()


def test_the_matrix_keeps_every_column_in_order() -> None:
    stock, ours = peers.COLUMNS[0], peers.COLUMNS[2]
    frame = guarantees.cells((stock, ours))
    assert list(dict.fromkeys(frame["sampler"])) == [stock.name, ours.name]
    assert set(frame[frame["sampler"] == stock.name]["result"]) == {
        "held",
        "violated",
        "not supported",
    }
    wide = guarantees.matrix(frame)
    assert list(wide.columns) == ["guarantee", stock.name, ours.name]
    assert list(wide["guarantee"]) == list(kit.GUARANTEES)
    exactly_once = wide.set_index("guarantee").loc["exactly-once", stock.name]
    assert exactly_once == "[violated](#where-exactly-once-fails): N=1 W=2 B=1"


def test_cli_table_shows_what_the_search_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", "kit_crashing:crashing"])
    out = capsys.readouterr().out
    held = [line for line in out.splitlines() if line.startswith("len-matches-iteration")]
    assert held and "skipped" in held[0] and "RuntimeError: refused" in held[0]
