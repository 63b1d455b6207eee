"""sweepit.search's halving rules without processes: the rungs a config's epochs give, and who is promoted."""

from __future__ import annotations

import pytest

from sweepit.errors import ConfigError
from sweepit.results import JobState
from sweepit.search import HalvingOptions
from sweepit.search._halving import survivors


@pytest.mark.parametrize(("options", "epochs", "rungs"), [
    (HalvingOptions(eta=3), 9, [1, 3]),               # the example: cuts at 1 and 3, the rest to 9
    (HalvingOptions(eta=3), 10, [1, 3, 9]),
    (HalvingOptions(eta=2, min_epochs=2), 9, [2, 4, 8]),
    (HalvingOptions(eta=3), 1, []),                   # nothing to cut: a plain grid
    (HalvingOptions(rungs=[3, 9]), 27, [3, 9]),
])
def test_the_rungs_come_from_epochs_eta_and_min_epochs_unless_given(options: HalvingOptions, epochs: int,
                                                                     rungs: list[int]) -> None:
    assert options.rung_epochs(epochs) == rungs


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"eta": 1}, "hydra.sweeper.eta must be an integer >= 2"),
    ({"min_epochs": 0}, "hydra.sweeper.min_epochs must be an integer >= 1"),
    ({"rungs": [3, 1]}, "hydra.sweeper.rungs must be increasing epochs >= 1, but got rungs=[3, 1]"),
])
def test_bad_options_are_refused_with_the_rule_and_the_value(kwargs: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError, match=said.replace("[", r"\[").replace("]", r"\]")):
        HalvingOptions(**kwargs)  # type: ignore[arg-type]


def test_rungs_at_or_past_the_last_epoch_and_a_config_without_epochs_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"below the config's epochs=9, but got rungs=\[3, 9\]"):
        HalvingOptions(rungs=[3, 9]).rung_epochs(9)
    with pytest.raises(ConfigError, match="Add `epochs: N` to the app's config"):
        HalvingOptions().rung_epochs(None)


def test_the_best_one_in_eta_go_on_ties_to_the_lower_job_and_a_job_without_a_value_never() -> None:
    values: dict[int, float | None] = {0: 0.5, 1: 0.9, 2: None, 3: 0.9, 4: 0.1, 5: 0.7}
    assert survivors(values, "maximize", 3) == [1, 3]
    assert survivors(values, "minimize", 3) == [0, 4]
    assert survivors(values, "maximize", 2) == [1, 3, 5]
    assert survivors({0: None, 1: 0.2}, "maximize", 3) == [1]  # at least one, of those with a value
    assert survivors({0: None, 1: None}, "maximize", 2) == []


def test_a_paused_job_is_ended_and_settled_but_neither_a_result_nor_a_failure() -> None:
    assert JobState.is_ended(JobState.PAUSED) and JobState.is_settled("paused")
    assert not JobState.is_success(JobState.PAUSED) and not JobState.is_failure(JobState.PAUSED)
    assert all(JobState.is_settled(s) for s in (JobState.COMPLETED, JobState.PRUNED, JobState.DIVERGED))
    assert not any(JobState.is_settled(s) for s in (JobState.FAILED, JobState.INTERRUPTED, JobState.RUNNING))
