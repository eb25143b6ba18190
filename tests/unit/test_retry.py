"""Unit tests for rangetable.client.retry: the back-off formulas and the retry runner."""

from __future__ import annotations

import random

import pytest

from rangetable.client.retry import (
    ExponentialRetry,
    FixedRetry,
    NoRetry,
    call_with_retry,
    default_policy,
)
from rangetable.errors import TableError


class Flaky:
    """A callable that raises the given errors in turn, then returns ``"done"``."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def run(call: Flaky, policy) -> tuple[object, list[float]]:
    slept: list[float] = []
    return call_with_retry(call, policy, sleep=slept.append), slept


# --- policies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_exponential_delays_within_azure_bounds(seed: int) -> None:
    zmin, z, zmax = 0.1, 0.5, 10.0
    policy = ExponentialRetry(zmin, z, zmax, max_attempts=8, rng=random.Random(seed))
    delays = list(policy.delays())
    assert len(delays) == 7
    for x, y in enumerate(delays, start=1):
        lo = min(zmin + 0.8 * z * (2**x - 1), zmax)
        hi = min(zmin + 1.2 * z * (2**x - 1), zmax)
        assert lo <= y <= hi, (x, y, lo, hi)


def test_exponential_is_capped_at_max_delay() -> None:
    policy = ExponentialRetry(initial=1.0, base=2.0, max_delay=5.0, max_attempts=10, rng=random.Random(1))
    delays = list(policy.delays())
    assert max(delays) == 5.0
    assert delays[-4:] == [5.0] * 4
    assert all(d <= 5.0 for d in delays)


def test_exponential_grows_and_is_jittered() -> None:
    policy = ExponentialRetry(initial=0.0, base=1.0, max_delay=1e9, max_attempts=6, rng=random.Random(7))
    delays = list(policy.delays())
    assert delays == sorted(delays)
    # the jitter makes retry 1 something other than exactly z
    assert len({round(d / (2**x - 1), 9) for x, d in enumerate(delays, start=1)}) > 1


def test_exponential_same_seed_same_delays() -> None:
    a = list(ExponentialRetry(rng=random.Random(3)).delays())
    b = list(ExponentialRetry(rng=random.Random(3)).delays())
    assert a == b


@pytest.mark.parametrize("attempts", [1, 2, 5, 9])
def test_attempt_counts(attempts: int) -> None:
    assert len(list(ExponentialRetry(max_attempts=attempts).delays())) == attempts - 1
    assert len(list(FixedRetry(max_attempts=attempts).delays())) == attempts - 1


def test_fixed_delays() -> None:
    assert list(FixedRetry(delay=0.25, max_attempts=4).delays()) == [0.25, 0.25, 0.25]
    assert list(FixedRetry().delays()) == [1.0] * 4


def test_no_retry_has_no_delays() -> None:
    assert list(NoRetry().delays()) == []


def test_delays_iterators_are_independent() -> None:
    policy = FixedRetry(delay=0.1, max_attempts=3)
    first = policy.delays()
    next(first)
    assert list(policy.delays()) == [0.1, 0.1]


def test_default_is_exponential_with_five_attempts() -> None:
    policy = default_policy()
    assert isinstance(policy, ExponentialRetry)
    assert policy.max_attempts == 5


@pytest.mark.parametrize(
    "make",
    [
        lambda: FixedRetry(delay=-1),
        lambda: FixedRetry(max_attempts=0),
        lambda: ExponentialRetry(max_attempts=0),
        lambda: ExponentialRetry(base=-1),
    ],
)
def test_invalid_policies(make) -> None:
    with pytest.raises(ValueError):
        make()


# --- the runner --------------------------------------------------------------------------------


def test_success_needs_no_retry() -> None:
    call = Flaky()
    assert run(call, FixedRetry(delay=0.5)) == ("done", [])
    assert call.calls == 1


@pytest.mark.parametrize("name", ["ServerBusy", "OperationTimedOut", "InternalError"])
def test_retriable_errors_are_retried(name: str) -> None:
    call = Flaky(TableError(name), TableError(name))
    result, slept = run(call, FixedRetry(delay=0.5, max_attempts=5))
    assert result == "done"
    assert call.calls == 3
    assert slept == [0.5, 0.5]


def test_503_is_retried_with_exponential_delays() -> None:
    call = Flaky(*[TableError("ServerBusy")] * 3)
    policy = ExponentialRetry(initial=0.1, base=0.2, max_delay=1.0, max_attempts=5, rng=random.Random(0))
    result, slept = run(call, policy)
    assert result == "done"
    expected = list(ExponentialRetry(0.1, 0.2, 1.0, 5, rng=random.Random(0)).delays())[:3]
    assert slept == expected


@pytest.mark.parametrize(
    "name",
    [
        "EntityNotFound",
        "ResourceNotFound",
        "TableAlreadyExists",
        "EntityAlreadyExists",
        "UpdateConditionNotSatisfied",
        "InvalidInput",
        "PropertiesNeedValue",
        "RequestBodyTooLarge",
        "AuthenticationFailed",
    ],
)
def test_4xx_errors_are_never_retried(name: str) -> None:
    err = TableError(name)
    assert 400 <= err.status_code < 500
    call = Flaky(err)
    with pytest.raises(TableError) as info:
        run(call, FixedRetry(delay=0.1, max_attempts=10))
    assert info.value is err
    assert call.calls == 1


def test_gives_up_after_max_attempts_with_last_error() -> None:
    errors = [TableError("ServerBusy", f"try {i}") for i in range(10)]
    call = Flaky(*errors)
    slept: list[float] = []
    with pytest.raises(TableError) as info:
        call_with_retry(call, FixedRetry(delay=0.2, max_attempts=4), sleep=slept.append)
    assert call.calls == 4
    assert info.value is errors[3]
    assert slept == [0.2, 0.2, 0.2]


def test_no_retry_raises_first_error() -> None:
    call = Flaky(TableError("ServerBusy"))
    with pytest.raises(TableError):
        run(call, NoRetry())
    assert call.calls == 1


def test_none_policy_means_no_retry() -> None:
    call = Flaky(TableError("ServerBusy"))
    with pytest.raises(TableError):
        run(call, None)
    assert call.calls == 1


def test_other_exceptions_propagate_unretried() -> None:
    call = Flaky(ValueError("bad"))
    with pytest.raises(ValueError):
        run(call, FixedRetry(delay=0.1))
    assert call.calls == 1


def test_retriable_then_fatal_stops_at_fatal() -> None:
    call = Flaky(TableError("ServerBusy"), TableError("EntityNotFound"))
    with pytest.raises(TableError) as info:
        run(call, FixedRetry(delay=0.1))
    assert info.value.error_code == "EntityNotFound"
    assert call.calls == 2
