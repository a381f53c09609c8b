"""synet's functional forms over dask arrays: one synet call per chunk, the same bits as one call.

::

    import dask.array as da
    import synet.dask

    x = da.random.default_rng(0).standard_normal((64, 64, 64, 128), chunks=(8, -1, -1, -1), dtype="float32")
    y = synet.dask.conv_transpose2d(x, w, stride=2, padding=1, layout="NHWC")   # w: [128, 4, 4, 64]
    y.compute()                                                                  # 8 tasks, one per chunk

- ``conv_transpose2d`` (and ``conv_transpose1d`` / ``conv_transpose3d``) chunk along
  the batch; the other axes are made one chunk. The weights travel once: a ``Deconvolution16b`` prepared
  here (which checks every argument now) is pickled — its init arguments and BF16-rounded weights, never
  the packed ones — into one graph key that every chunk task depends on. A worker fetches that key,
  unpickles it once (repacking for its own CPU) and keeps it while its tasks need it, and the context
  among its last four after that (should the scheduler send the key again, it is not repacked again); a
  chunk of another batch size gets a context derived from it, once per worker.
- ``gather_elements`` chunks along every axis but ``axis`` (data's ``axis`` is made one chunk);
  ``quantized_add`` along every axis but the one per-axis scales / zero points (and PRELU slopes) run
  along. A NumPy operand is one graph key too (sent once per worker; each task takes its block of it); a
  dask one is rechunked to line up with the other operand, with NumPy broadcasting.
- Results are dask arrays; BF16 results are ``ml_dtypes.bfloat16`` arrays (their ``meta`` too).
- ``n_threads`` (per task) defaults to `default_threads`: the worker's share of the CPUs, so that synet's
  threads times the worker's threads never exceed what the process may use.
- Arguments are checked when the graph is made, with the functional forms' own checks and messages; a
  dask array whose chunk sizes are unknown (NaN) along an axis that must be rechunked or lined up raises
  ValueError naming the axis.

Install with ``pip install "synet[dask]"``; without dask this module imports, and its functions raise
ImportError saying so.
"""

from __future__ import annotations

import collections
import math
import multiprocessing
import pickle
import re
import threading
import weakref

import numpy as np

import synet

from . import _cache, _deconvolution, _deconvolution_plan, _gather_plan, _quantized_add
from ._arrays import as_array, from_torch
from ._kernels import resolve_num_threads
from ._types import Activation, as_activation

_MISSING: ImportError | None = None   # the optional extra: the module imports, its functions say what is missing
try:
    import dask  # type: ignore[import-not-found]
    import dask.array as da  # type: ignore[import-not-found]
    from dask.base import tokenize  # type: ignore[import-not-found]
    from dask.delayed import Delayed  # type: ignore[import-not-found]
except ImportError as _error:
    _MISSING = _error

__all__ = ["conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "default_threads", "gather_elements",
           "quantized_add"]


# ---------------------------------------------------------------------------------------------
# Threads


def _worker_threads(worker) -> int:
    """Threads of the dask workers living in this process (several with ``processes=False``)."""
    try:
        from distributed.worker import Worker

        live = [w for w in list(Worker._instances) if getattr(getattr(w, "status", None), "name", "") == "running"]
        total = sum(int(w.state.nthreads) for w in live)
        if total:
            return total
    except Exception:  # noqa: BLE001 - private API: fall back to this worker's own count
        pass
    state = getattr(worker, "state", None)
    return int(getattr(state, "nthreads", None) or getattr(worker, "nthreads", 1) or 1)


def default_threads() -> int:
    """The synet threads a chunk task uses when its ``n_threads`` is None.

    In a ``dask.distributed`` worker: ``synet.get_num_threads()`` (the CPUs this process may use, or
    ``OMP_NUM_THREADS``, which distributed's nanny sets to 1 in the worker processes it starts) divided
    by the worker threads living in this process, at least 1. In dask's synchronous scheduler (a task
    running in the main thread, one at a time): ``synet.get_num_threads()``. Elsewhere (the threaded and
    the processes schedulers, which already run one task per CPU): 1.

    Returns
    -------
    int
    """
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        worker = None
    if worker is not None:
        return max(1, synet.get_num_threads() // max(1, _worker_threads(worker)))
    if threading.current_thread() is threading.main_thread() and multiprocessing.parent_process() is None:
        return synet.get_num_threads()
    return 1


def _require() -> None:
    if _MISSING is not None:
        raise ImportError("synet.dask needs dask: pip install 'synet[dask]' (dask[array] and distributed)") \
            from _MISSING


def _threads(n_threads) -> int:
    return default_threads() if n_threads is None else n_threads


def _check_threads(n_threads) -> None:
    _require()
    if n_threads is not None:
        resolve_num_threads(n_threads)   # TypeError / ValueError as the functional forms give


# ---------------------------------------------------------------------------------------------
# One graph key for what every chunk needs

_BUILT: collections.Counter = collections.Counter()   # token -> times unpickled in this process (tests), for
_BUILT_TOKENS = 256                                     # the last _BUILT_TOKENS tokens (it grew with every call)
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()   # token -> the object, while in use here
_RECENT: collections.OrderedDict = collections.OrderedDict()   # token -> the last contexts built here, kept
_RECENT_CONTEXTS = 4
_LOCK = threading.Lock()


class _Shared:
    """What every chunk task of one call needs (a prepared context, a NumPy operand), as one graph key.

    It is the pickle of the object, made once, when the graph is made (a snapshot: a NumPy operand changed
    afterwards does not change the result): the scheduler only moves bytes; a worker fetches the key,
    keeps it while its tasks need it, and unpickles it on first use, once per process while it is
    in use there (copies of the same key share it, by token). With `keep`, the process also keeps the
    value among its last `_RECENT_CONTEXTS` ones after the key is gone: the scheduler's active memory
    manager drops a replica from a worker with no chunk task left, and work stealing may then send it
    another one, and the key with it; a prepared context is then not unpickled and repacked again."""

    def __init__(self, token: str, blob: bytes, keep: bool):
        self.token, self.blob, self.keep = token, blob, keep
        self._value = None
        self._lock = threading.Lock()

    def __reduce__(self):
        return _Shared, (self.token, self.blob, self.keep)

    @property
    def nbytes(self) -> int:
        return len(self.blob)

    @property
    def value(self):
        if self._value is None:
            with self._lock, _LOCK:
                if self._value is None:
                    value = _LIVE.get(self.token)
                    if value is None:
                        value = pickle.loads(self.blob)
                        _BUILT[self.token] = _BUILT.pop(self.token, 0) + 1   # (to the end: the most recent)
                        if len(_BUILT) > _BUILT_TOKENS:
                            del _BUILT[next(iter(_BUILT))]
                        _LIVE[self.token] = value
                    if self.keep:
                        _RECENT[self.token] = value
                        _RECENT.move_to_end(self.token)
                        while len(_RECENT) > _RECENT_CONTEXTS:
                            _RECENT.popitem(last=False)
                    self._value = value
        return self._value


class _Arrays:
    """Arrays shared by every chunk task (a plain holder: what `_Shared` keeps must be weakly referable)."""

    def __init__(self, *arrays):
        self.arrays = arrays

    def __reduce__(self):
        return _Arrays, self.arrays


def _exact(part):
    """A token part with its floats as their bits (dask's tokenize gives +NaN and -NaN one token: a graph of
    a NaN slope of one sign reused the other's results), inside lists, tuples and dicts too."""
    if isinstance(part, (float, np.floating)):
        return _cache.key_of(part)   # (its bits)
    if isinstance(part, tuple):   # (a named tuple's fields too: its constructor takes no iterable)
        return tuple(_exact(p) for p in part)
    if isinstance(part, list):
        return [_exact(p) for p in part]
    if isinstance(part, dict):
        return {k: _exact(v) for k, v in part.items()}
    return part


def _shared(value, *token_parts, keep: bool = False):
    """One graph key holding `value` (weakly referable: a context holder, an ndarray, `_Arrays`); `keep`:
    a worker process keeps it among its last few after use (for contexts, whose unpickling repacks)."""
    token = tokenize("synet.dask", *map(_exact, token_parts))
    shared = _Shared(token, pickle.dumps(value, pickle.HIGHEST_PROTOCOL), keep)
    return dask.delayed(shared, name=f"synet-shared-{token}", pure=True)


# ---------------------------------------------------------------------------------------------
# Arrays, chunks


def _as_dask(x, name: str):
    if isinstance(x, da.Array):
        return x
    if isinstance(x, Delayed):
        raise TypeError(f"{name}: expected a dask or NumPy array, got a dask Delayed")
    return da.from_array(as_array(x, name), chunks=-1)


def _known(x, axes, name: str, why: str) -> None:
    """ValueError naming the first of `axes` along which dask array x's chunk sizes are unknown."""
    for axis in axes:
        if any(math.isnan(c) for c in x.chunks[axis]):
            raise ValueError(f"{name}: the chunk sizes along axis {axis} are unknown (NaN); synet.dask needs them "
                             f"{why} (call {name}.compute_chunk_sizes() first)")


def _meta(dtype, ndim):
    return np.empty((0,) * ndim, dtype)


def _operands(args, shared):
    """The operands of a chunk task: map_blocks passes the dask blocks first, then the shared keys (each in
    operand order); `shared` flags which operands are shared."""
    blocks = [a for a in args if not isinstance(a, _Shared)]
    keys = [a for a in args if isinstance(a, _Shared)]
    return [keys.pop(0).value if flag else blocks.pop(0) for flag in shared]


def _location(block_info) -> tuple:
    """The output block's (start, stop) per axis."""
    return tuple(block_info[None]["array-location"])


def _block_of(array: np.ndarray, location, out_ndim: int) -> np.ndarray:
    """The block of a shared NumPy operand that an output block at `location` reads (NumPy broadcasting:
    an operand's axes align to the right; an axis of size 1 is read whole)."""
    offset = out_ndim - array.ndim
    return array[tuple(slice(None) if array.shape[d] == 1 else slice(*location[offset + d])
                       for d in range(array.ndim))]


def _map_blocks(function, name: str, args, kwargs, chunks, dtype, ndim):
    token = tokenize(function, *map(_exact, args), _exact(kwargs))
    # map_blocks lines the blocks up by position (no rechunking of its own): the callers made them line up
    return da.map_blocks(function, *args, **kwargs, chunks=tuple(chunks), dtype=dtype, meta=_meta(dtype, ndim),
                         name=f"synet-{name}-{token}")


# ---------------------------------------------------------------------------------------------
# Transposed convolution


class _Contexts:
    """A prepared context and, per process, the ones derived from it for other batch sizes (built on
    first use from its pickled state: init arguments and BF16-rounded weights, never packed ones)."""

    def __init__(self, context, batch: int):
        self.context, self.batch = context, batch
        self._others: dict = {}
        self._lock = threading.Lock()

    def __reduce__(self):
        return _Contexts, (self.context, self.batch)

    def for_batch(self, n: int):
        if n == self.batch:
            return self.context
        with self._lock:
            context = self._others.get(n)
            if context is None:
                restore, (version, key, data, cls) = self.context.__reduce__()
                context = self._others[n] = restore(version, (n, *key[1:]), data, cls)
            return context


def _conv_block(block, shared, image_shape, image_dtype, n_threads):
    if block.shape[0] == 0:   # an empty chunk (e.g. of a filtered array): a context needs a batch >= 1
        return np.empty((0, *image_shape), image_dtype)
    context = shared.value.for_batch(block.shape[0])
    return context.forward(np.ascontiguousarray(_operand(block)), n_threads=_threads(n_threads))


def _functional_block(block, shared, function, kwargs, n_threads):
    weight, bias = shared.value.arrays
    return function(block, weight, bias, **kwargs, n_threads=_threads(n_threads))


def _operand(x):
    """x as the transposed convolutions take it (float32 or bfloat16; ValueError for other dtypes), by the
    functional form's own rule."""
    return _deconvolution._as_operand(x, "x")


def _prepare_x(x, rank: int):
    """(x as a dask array of `rank`, unbatched): an unbatched x gets a batch of one; the non-batch axes must
    have known chunk sizes (they become one chunk)."""
    x = _as_dask(x, "x")
    _operand(np.zeros(0, x.dtype))   # the dtype check of the functional forms
    if x.ndim != rank - 1 and x.ndim != rank:
        return x, False   # the functional form's check gives the message
    unbatched = x.ndim == rank - 1
    if unbatched:
        x = x[None]
    _known(x, range(1, rank), "x", "to make the non-batch axes one chunk")
    return x, unbatched


def _batched(x, name: str, shared, block_function, image_shape, dtype, block_kwargs: dict):
    """One task per batch chunk of x (its other axes one chunk), each giving images of `image_shape`."""
    x = x.rechunk(dict.fromkeys(range(1, x.ndim), -1))
    chunks = (x.chunks[0], *((n,) for n in image_shape))
    return _map_blocks(block_function, name, (x, shared), block_kwargs, chunks, dtype, len(chunks))


def _conv_functional(x, function, weight, bias, kwargs: dict, name: str, n_threads):
    """A transposed convolution form (1-D, 2-D, 3-D) per batch chunk, weights and bias as one graph key;
    output shape and dtype (and the form's checks) from the form itself on an empty batch, now."""
    weight = as_array(weight, "weight")
    bias = None if bias is None else as_array(bias, "bias")
    probe = function(np.zeros((0, *x.shape[1:]), _operand(np.zeros(0, x.dtype)).dtype), weight, bias, **kwargs)
    shared = _shared(_Arrays(weight, bias), name, weight, bias)
    return _batched(x, name, shared, _functional_block, probe.shape[1:], probe.dtype,
                    dict(function=function, kwargs=kwargs, n_threads=n_threads))


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     layout="NCHW", activation="identity", activation_params=None, out_dtype=None, n_threads=None):
    """`synet.conv_transpose2d` over a dask array chunked along the batch: one synet call per chunk.

    The arguments are those of `synet.conv_transpose2d` but ``out``, and they are checked now. A
    ``Deconvolution16b`` is prepared here with the weights, bias and activation parameters and travels
    to each worker once, as one graph key (pickled: init arguments and BF16-rounded weights), where it is
    repacked for that worker's CPU.

    Parameters
    ----------
    x : dask.array.Array or array_like
        NCHW [N, C_in, H, W] or NHWC [N, H, W, C_in] (or unbatched 3-D). Its chunks along N are kept
        (their sizes may be unknown); its other axes become one chunk.
    weight, bias, stride, padding, output_padding, groups, dilation, layout, activation, \
activation_params, out_dtype
        As `synet.conv_transpose2d` (NumPy array-likes for the arrays).
    n_threads : int, optional
        synet threads per task; default `default_threads`.

    Returns
    -------
    dask.array.Array
        float32 or ``ml_dtypes.bfloat16``, chunked like x along the batch.

    Raises
    ------
    ValueError, TypeError
        As `synet.conv_transpose2d`, now; ValueError when x's chunk sizes along a non-batch axis are
        unknown.
    """
    _check_threads(n_threads)
    x, unbatched = _prepare_x(x, 4)
    w = _deconvolution_plan.check_reals(as_array(weight, "weight"), "weight")
    bias, activation_params = from_torch(bias, "bias"), from_torch(activation_params, "activation_params")
    batched = x.ndim == 4 and not math.isnan(x.shape[0])
    shape_x = (max(x.shape[0], 1), *x.shape[1:]) if batched else (1, *x.shape[1:]) if x.ndim == 4 else x.shape
    conv, _, _, shape, *kind = _deconvolution_plan.functional_conv(
        2, shape_x, _operand(np.zeros(0, x.dtype)).dtype, w.shape, stride, padding, output_padding, groups, dilation,
        layout, activation, out_dtype, None)
    kwargs = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation,
                  layout=layout, activation=activation, activation_params=activation_params, out_dtype=out_dtype)
    if kind and kind[0] != "run":   # an empty output, or act(bias) alone: the functional form per chunk
        result = _conv_functional(x, synet.conv_transpose2d, w, bias, kwargs, "conv_transpose2d", n_threads)
    else:
        sizes = collections.Counter(c for c in x.chunks[0] if not math.isnan(c) and c > 0)
        batch = sizes.most_common(1)[0][0] if sizes else 1
        context = synet.Deconvolution16b(batch, conv)
        # every check of weight, bias and params, now (the params under the functional form's name)
        context.set_params(w, bias, _deconvolution_plan.params_array(conv, activation_params, "activation_params"))
        shared = _shared(_Contexts(context, batch), "conv_transpose2d", conv, batch, w, bias, activation_params,
                         keep=True)
        dtype = np.dtype(_deconvolution_plan.BFLOAT16 if conv.dst_type == synet.DataType.BFLOAT16 else np.float32)
        result = _batched(x, "conv_transpose2d", shared, _conv_block, shape[1:], dtype,
                          dict(image_shape=shape[1:], image_dtype=dtype, n_threads=n_threads))
    return result[0] if unbatched else result


def _conv_nd(name: str, rank: int):
    """The dask form of synet's `name` (conv_transpose1d, conv_transpose3d): its own arguments, x chunked
    along the batch, weights and bias as one graph key, the form's own checks on an empty batch, now."""
    function = getattr(synet, name)

    def form(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *, n_threads=None,
             **options):
        _check_threads(n_threads)
        if "out" in options:
            raise TypeError(f"{name}: out= is not supported over dask arrays")
        if "activation_params" in options:
            options["activation_params"] = from_torch(options["activation_params"], "activation_params")
        x, unbatched = _prepare_x(x, rank)
        kwargs = {key: _quantized_add._kept(value) for key, value in   # (copies: the graph is a snapshot)
                  dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups,
                       dilation=dilation, **options).items()}
        if x.ndim != rank:   # the form's own message for a wrong rank (on a stand-in of x's shape, no memory)
            shape = tuple(0 if math.isnan(n) else int(n) for n in x.shape)
            function(np.broadcast_to(np.zeros((), _operand(np.zeros(0, x.dtype)).dtype), shape), weight, bias,
                     **kwargs)
        result = _conv_functional(x, function, weight, bias, kwargs, name, n_threads)
        return result[0] if unbatched else result

    form.__name__ = form.__qualname__ = name
    form.__doc__ = (f"`synet.{name}` over a dask array chunked along the batch (as `conv_transpose2d`): the "
                    f"same arguments but ``out``, checked now on an empty batch; weights and bias travel once "
                    f"per worker, as one graph key.")
    return form


conv_transpose1d = _conv_nd("conv_transpose1d", 3)
conv_transpose3d = _conv_nd("conv_transpose3d", 5)


# ---------------------------------------------------------------------------------------------
# GatherElements


def _index_error(indices, src_count: int, axis: int, start=None) -> IndexError:
    """The functional form's message, at the position in the whole array (`start`: the block's origin)."""
    position = _gather_plan.first_bad(_gather_plan.as_indices(indices), src_count)[0]
    where = np.unravel_index(position, indices.shape)
    value = np.asarray(indices)[where]   # the caller's value (as_indices clamps uint64 past int64's range)
    place = [int(i) + (0 if start is None else start[d]) for d, i in enumerate(where)]
    return IndexError(f"indices[{', '.join(map(str, place))}] = {value} is out of range for axis {axis} "
                      f"with size {src_count}")


def _gather_block(*args, axis, shared, src_count, n_threads, block_info=None):
    location = _location(block_info)
    data, indices = _operands(args, shared)
    if shared[0]:
        data = data[tuple(slice(*location[d]) if d != axis else slice(None) for d in range(data.ndim))]
    if shared[1]:
        indices = indices[tuple(slice(*loc) for loc in location)]
    try:
        return synet.gather_elements(data, indices, axis, n_threads=_threads(n_threads))
    except IndexError:   # name the position in the whole array, not in the block
        raise _index_error(indices, src_count, axis, [start for start, _ in location]) from None


def gather_elements(data, indices, axis=0, *, n_threads=None):
    """`synet.gather_elements` (ONNX GatherElements) over dask arrays: one synet call per chunk.

    Parameters
    ----------
    data, indices : dask.array.Array or array_like
        As `synet.gather_elements`. A NumPy operand is one graph key (sent once per worker; each task
        takes its block of it); a NumPy ``indices`` is checked now.
    axis : int
        The gathered axis; data's is made one chunk, and so is the result's.
    n_threads : int, optional
        synet threads per task; default `default_threads`.

    Returns
    -------
    dask.array.Array
        Of indices' shape and data's dtype, chunked like a dask ``indices`` (else like ``data``) along
        every other axis.

    Raises
    ------
    IndexError
        An index out of range: now for a NumPy ``indices``, at compute time for a dask one, naming its
        position in the whole array.
    ValueError, TypeError
        As `synet.gather_elements`, now; ValueError when a dask operand's chunk sizes are unknown.
    """
    _check_threads(n_threads)
    shared = [not isinstance(data, da.Array), not isinstance(indices, da.Array)]
    if all(shared):
        data, shared[0] = da.from_array(as_array(data, "data"), chunks=-1), False
    if shared[0]:
        data = as_array(data, "data")
    if shared[1]:
        indices = _gather_plan.as_indices(indices)
    else:
        _gather_plan.as_indices(np.zeros(0, indices.dtype))   # the functional form's dtype check
    for x, name, flag in ((data, "data", shared[0]), (indices, "indices", shared[1])):
        if not flag:
            _known(x, range(x.ndim), name, "to line data and indices up")
    axis, block = _gather_plan.functional_geometry(np.broadcast_to(np.zeros((), data.dtype), data.shape),
                                                   np.broadcast_to(np.zeros((), indices.dtype), indices.shape), axis)
    src_count, ndim = data.shape[axis], indices.ndim
    if shared[1] and indices.size and ((indices < -src_count) | (indices >= src_count)).any():
        raise _index_error(indices, src_count, axis)
    if shared[1]:   # the result chunked like data off the axis
        data_chunks = data.rechunk({axis: -1})[block].chunks
        chunks = [data_chunks[d] for d in range(ndim)]
    else:
        chunks = list(indices.chunks)
    chunks[axis] = (indices.shape[axis],)
    args = []
    if not shared[0]:
        args.append(data[block].rechunk({d: chunks[d] if d != axis else -1 for d in range(ndim)}))
    if not shared[1]:
        args.append(indices.rechunk(tuple(chunks)))
    if shared[0]:
        args.append(_shared(data, "gather_elements data", data))
    if shared[1]:
        args.append(_shared(indices, "gather_elements indices", indices))
    kwargs = dict(axis=axis, shared=tuple(shared), src_count=src_count, n_threads=n_threads)
    return _map_blocks(_gather_block, "gather_elements", args, kwargs, chunks, data.dtype, ndim)


# ---------------------------------------------------------------------------------------------
# QuantizedAdd


def _qadd_block(*args, shared, kwargs, n_threads, block_info=None):
    location = _location(block_info)
    values = [_block_of(v, location, len(location)) if flag else v for v, flag in zip(_operands(args, shared), shared)]
    return synet.quantized_add(*values, **kwargs, n_threads=_threads(n_threads))


def _per_axis_dims(pairs, ranks, axis, out_ndim: int) -> set:
    """Output axes along which per-axis scales / zero points run (each tensor's `axis`, right-aligned)."""
    dims: set[int] = set()
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        return dims   # the functional form's check gives the message
    for (scale, zero), rank in zip(pairs, ranks):
        if (np.ndim(scale) > 0 or np.ndim(zero) > 0) and -rank <= axis < rank:
            dims.add(out_ndim - rank + int(axis) % rank)
    return dims


def quantized_add(a, b, *, a_scale=1.0, a_zero=0, b_scale=1.0, b_zero=0, dst_scale=1.0, dst_zero=0,
                  dst_dtype=np.uint8, activation="identity", activation_params=None, axis=1, n_threads=None):
    """`synet.quantized_add` over dask arrays with NumPy broadcasting: one synet call per chunk.

    The arguments are those of `synet.quantized_add` but ``out``, and they are checked now, on the shapes.

    Parameters
    ----------
    a, b : dask.array.Array or array_like
        The operands. A dask ``b`` is rechunked to line up with ``a``; a NumPy operand is one graph key
        (sent once per worker; each task takes its block of it).
    a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero, dst_dtype, activation, activation_params, axis
        As `synet.quantized_add`.
    n_threads : int, optional
        synet threads per task; default `default_threads`.

    Returns
    -------
    dask.array.Array
        Of the broadcast shape, chunked like the dask operands (``a`` first) along every axis but the
        one per-axis scales / zero points run along and, for PRELU with one slope per channel, axis 1:
        those are one chunk.

    Raises
    ------
    ValueError, TypeError
        As `synet.quantized_add`, now; ValueError when a dask operand's chunk sizes are unknown along an
        axis that must be lined up with the other operand or made one chunk.
    """
    _check_threads(n_threads)
    operands = [x if isinstance(x, da.Array) else as_array(x, name) for x, name in ((a, "a"), (b, "b"))]
    a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero, activation_params = (   # (copies of arrays and lists:
        _quantized_add._kept(from_torch(value, name))                            # the tasks read them, checked now)
        for value, name in ((a_scale, "a_scale"), (a_zero, "a_zero"), (b_scale, "b_scale"), (b_zero, "b_zero"),
                            (dst_scale, "dst_scale"), (dst_zero, "dst_zero"), (activation_params, "activation_params")))
    shared = [not isinstance(x, da.Array) for x in operands]
    if all(shared):
        operands[0], shared[0] = da.from_array(operands[0], chunks=-1), False
    out_ndim = max(x.ndim for x in operands)

    def extent(x, dim):   # x's size along output axis dim (1 where it broadcasts; NaN: unknown)
        offset = out_ndim - x.ndim
        return 1 if dim < offset else x.shape[dim - offset]

    out_shape = []
    for dim in range(out_ndim):
        sizes = [extent(x, dim) for x in operands if extent(x, dim) != 1]
        known = {n for n in sizes if not math.isnan(n)}
        if len(known) > 1:
            raise ValueError(f"b: expected a shape that broadcasts with a's {operands[0].shape} (NumPy rules), "
                             f"got {operands[1].shape}")
        out_shape.append(known.pop() if known else sizes[0] if sizes else 1)
    whole = _per_axis_dims(((a_scale, a_zero), (b_scale, b_zero)), [x.ndim for x in operands], axis, out_ndim)
    whole |= _per_axis_dims(((dst_scale, dst_zero),), [out_ndim], axis, out_ndim)
    try:
        prelu = as_activation(activation, "activation") == Activation.PRELU
    except (TypeError, ValueError):
        prelu = False   # the functional form's check gives the message
    if prelu and np.size(activation_params) > 1 and out_ndim >= 2:
        whole.add(1)
    for x, name, flag in zip(operands, "ab", shared):   # the axes that are rechunked or lined up
        if not flag:
            offset = out_ndim - x.ndim
            others = [y for y in operands if y is not x]
            _known(x, [dim - offset for dim in range(offset, out_ndim) if extent(x, dim) != 1 and
                       (dim in whole or any(extent(y, dim) != 1 for y in others))],
                   name, "to line a and b up (or to make a per-axis axis one chunk)")
    kwargs = dict(a_scale=a_scale, a_zero=a_zero, b_scale=b_scale, b_zero=b_zero, dst_scale=dst_scale,
                  dst_zero=dst_zero, dst_dtype=dst_dtype, activation=activation,
                  activation_params=activation_params, axis=axis)
    # the functional form's checks and result dtype, on a probe: full size along the per-axis axes (and a PRELU's
    # channel axis, whose size its message on missing slopes gives), else <= 1
    probed = whole | ({1} if prelu and out_ndim >= 2 else set())
    probe = [np.zeros(tuple(int(n) if out_ndim - x.ndim + d in probed and not math.isnan(n) else
                            min(1, 1 if math.isnan(n) else int(n)) for d, n in enumerate(x.shape)), x.dtype)
             for x in operands]
    try:
        dtype = synet.quantized_add(*probe, **kwargs).dtype
    except ValueError as error:   # named with the caller's shapes, not the probe's
        message = str(error)
        dst_shape = tuple(n if math.isnan(n) else int(n) for n in out_shape)
        for name, shape, probe_shape in (*zip("ab", (x.shape for x in operands), (p.shape for p in probe)),
                                         ("dst", dst_shape, np.broadcast_shapes(*(p.shape for p in probe)))):
            message = re.sub(rf"({name}'s (?:shape|size along axis \d+ of) ){re.escape(str(probe_shape))}",
                             lambda found, shape=shape: f"{found.group(1)}{shape}", message)
        raise ValueError(message) from None
    chunks = []
    for dim in range(out_ndim):
        providers = [x for x, flag in zip(operands, shared) if not flag and extent(x, dim) != 1]
        if dim in whole or not providers:
            chunks.append((out_shape[dim],))
        else:
            chunks.append(providers[0].chunks[dim - (out_ndim - providers[0].ndim)])
    args = []
    for x, flag in zip(operands, shared):
        if not flag:
            offset = out_ndim - x.ndim
            target = {k: (-1 if x.shape[k] == 1 else chunks[offset + k]) for k in range(x.ndim)}
            args.append(x.rechunk({k: c for k, c in target.items() if c == -1 or c != x.chunks[k]}))
    for x, flag in zip(operands, shared):
        if flag:
            args.append(_shared(x, "quantized_add operand", x))
    block_kwargs = dict(shared=tuple(shared), kwargs=kwargs, n_threads=n_threads)
    return _map_blocks(_qadd_block, "quantized_add", args, block_kwargs, chunks, dtype, out_ndim)
