"""What synet may raise for bad input (SPEC §7), shared by the fuzz files and the hostile-input tests.

- TypeError, ValueError, IndexError: bad arrays, parameters, indices.
- MemoryError, OverflowError: NumPy refusing an absurd allocation or size.
- RuntimeError only for a context that is not ready, with one of the documented messages of
  synet/_gather.pyx, _quantized_add.pyx and _deconvolution.pyx (NOT_READY).
- synet.InternalError (a RuntimeError: a kernel status the checks should have made impossible) never.
"""

from __future__ import annotations

import synet

# The not-ready messages of the contexts (a fragment of each).
NOT_READY = (
    "call init() before",                  # GatherElements, QuantizedAdd, Deconvolution16b
    "call set_params() before",            # Deconvolution16b.forward / plan
    "idx is None but no index was set",    # GatherElements.forward
    "made with index_const=False",         # GatherElements.set_index
    "re-initialised during the call",      # Deconvolution16b.set_params racing init
)

PYTHON_ERRORS = (TypeError, ValueError, IndexError)
ACCEPTED = PYTHON_ERRORS + (MemoryError, OverflowError)


def is_not_ready(error: BaseException) -> bool:
    """A RuntimeError that says a context is not ready (never an InternalError)."""
    return (isinstance(error, RuntimeError) and not isinstance(error, synet.InternalError)
            and any(message in str(error) for message in NOT_READY))


def allowed(error: BaseException, accepted: tuple = ACCEPTED) -> bool:
    """Whether `error` is an acceptable outcome of a call with hostile input: one of `accepted`, or a
    not-ready RuntimeError; never an InternalError."""
    if isinstance(error, synet.InternalError):
        return False
    if isinstance(error, RuntimeError):
        return is_not_ready(error)
    return isinstance(error, accepted)


def outcome(call, *args, _accepted: tuple = ACCEPTED, **kwargs):
    """The result of `call`, or the allowed exception it raised (returned, not raised); anything else
    (an InternalError, a RuntimeError of another kind, a SystemError, ...) propagates and fails the test."""
    try:
        return call(*args, **kwargs)
    except BaseException as error:
        if allowed(error, _accepted):
            return error
        raise


def failed(result) -> bool:
    """Whether an ``outcome`` is an exception (an allowed one: the others were raised)."""
    return isinstance(result, BaseException)
