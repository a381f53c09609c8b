"""SPEC §7's error kinds: synet.InternalError for impossible kernel statuses, RuntimeError only for a context
that is not ready (with the messages tests/outcomes.py accepts), and the outcome rule of the fuzz suite."""

import os
import pickle
import re

import numpy as np
import pytest
from outcomes import NOT_READY, allowed, failed, is_not_ready, outcome

import synet
from synet._arrays import internal_error

SOURCES = os.path.dirname(os.path.abspath(synet.__file__))


def test_internal_error_is_exported_and_a_runtime_error():
    assert "InternalError" in synet.__all__
    assert issubclass(synet.InternalError, RuntimeError)
    assert synet.InternalError is synet._arrays.InternalError


def test_internal_error_names_where_and_the_status():
    error = internal_error("Deconvolution16b.forward", 3)
    assert type(error) is synet.InternalError
    assert str(error).startswith("Deconvolution16b.forward: internal error, kernel status 3 ")
    assert "a bug in synet" in str(error)
    again = pickle.loads(pickle.dumps(error))   # crosses process boundaries (dask, multiprocessing) intact
    assert type(again) is synet.InternalError and str(again) == str(error)


def _pyx_sources():
    names = sorted(f for f in os.listdir(SOURCES) if f.endswith((".pyx", ".py")))
    if not any(name.endswith(".pyx") for name in names):
        pytest.skip("the .pyx sources are not installed next to the package")
    return {name: open(os.path.join(SOURCES, name), encoding="utf-8").read() for name in names}


def test_every_runtime_error_of_synet_says_not_ready():
    """Each RuntimeError synet raises (outside InternalError) has a not-ready message the outcome rule knows,
    and each message the rule accepts is still raised somewhere: the rule cannot drift from the code."""
    raised = []
    for name, text in _pyx_sources().items():
        for match in re.finditer(r"raise RuntimeError\(\s*(f?\"[^\"]*\")", text):
            raised.append((name, match.group(1)))
    assert raised
    for name, message in raised:
        assert any(fragment in message for fragment in NOT_READY), (name, message)
    for fragment in NOT_READY:
        assert any(fragment in message for _, message in raised), fragment


@pytest.mark.parametrize("error, expected", [
    (TypeError("x"), True), (ValueError("x"), True), (IndexError("x"), True), (MemoryError(), True),
    (OverflowError("x"), True),
    (RuntimeError("GatherElements: call init() before using the context"), True),
    (RuntimeError("Deconvolution16b.forward: call set_params() before forward()"), True),
    (RuntimeError("boom"), False),
    (synet.InternalError("Deconvolution16b: call init() before using the context"), False),   # even so worded
    (synet.InternalError("x: internal error, kernel status 1"), False),
    (NotImplementedError("call init() before"), True),   # a RuntimeError subclass: judged by its message
    (RecursionError("maximum recursion depth exceeded"), False),
    (SystemError("error return without exception set"), False),
    (KeyError("x"), False), (AttributeError("x"), False), (ZeroDivisionError(), False), (AssertionError(), False),
])
def test_the_outcome_rule(error, expected):
    assert allowed(error) is expected
    assert is_not_ready(error) is (isinstance(error, RuntimeError) and expected)

    def call():
        raise error

    if expected:
        assert outcome(call) is error and failed(error)
    else:
        with pytest.raises(type(error)):
            outcome(call)


def test_a_context_that_is_not_ready_is_an_allowed_outcome():
    for result in (outcome(synet.GatherElements().forward, np.zeros(1, np.float32), np.zeros(1, np.int32)),
                   outcome(synet.QuantizedAdd().forward, np.zeros(1, np.uint8), np.zeros(1, np.uint8)),
                   outcome(synet.Deconvolution16b().forward, np.zeros(1, np.float32)),
                   outcome(synet.Deconvolution16b(1, synet.ConvParams.deconvolution(1, 1, 1, 1, 1)).forward,
                           np.zeros(1, np.float32))):
        assert type(result) is RuntimeError and is_not_ready(result), result
    assert not failed(outcome(synet.gather_elements, np.zeros(3), np.zeros(2, np.int64)))
