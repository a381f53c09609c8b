"""QuantizedAdd: element-wise add of UINT8 / INT8 / FLOAT32 tensors with dequantisation, activation and
requantisation, with NumPy broadcasting.

    a' = (a - a_zero) * a_scale   (UINT8 / INT8 a; a FLOAT32 a is used as is), b' likewise
    value = Activate(a' + b')
    dst = clamp(round_half_even(value / dst_scale) + dst_zero, lo, hi)   (UINT8 [0, 255], INT8 [-128, 127])
    dst = value                                                          (FLOAT32 dst)

Planning (checks, broadcast walk, constants, kernel choice) is synet/_quantized_add_plan.py; the
kernels are synet/src/quantized_add.c at the CPU level chosen at import; this module holds the
parallel driver, the context and the functional form.
"""

cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport copysign
from libc.stdint cimport uint8_t

from synet._csrc cimport (
    SYNET_ACT_COUNT, SYNET_NOT_READY, SYNET_OK, SYNET_QADD_F32, SYNET_QADD_FOLDED, SYNET_QADD_GENERIC,
    SYNET_QADD_I8, SYNET_QADD_LOOKUP, SYNET_QADD_U8, SYNET_VALUE_ERROR, synet_qadd_consts, synet_qadd_kernels,
    synet_qadd_kernels_at, synet_qadd_plan,
)
from synet._cache cimport PlanCache
from synet._fastpath cimport aligned, data_of, is_operand, is_output, new_array, new_like, overlaps, same_shape
from synet._kernels cimport call_threads, kernel_level

cdef extern from "quantized_add.h" nogil:
    ctypedef struct synet_qadd_lanes:
        Py_ssize_t period
        const double* a_scale
        const double* b_scale
        const float* fa_scale
        const float* fa_scale_low
        const float* fb_scale
        const float* fb_scale_low
        const int* a_zero
        const int* b_zero
        const float* q_pre
        const float* q_inv
        const float* q_zero
        const float* ka
        const float* kb
        const float* kc
        const float* lo
    void synet_qadd_plan_set_lanes(synet_qadd_plan* plan, const synet_qadd_lanes* lanes)
    bint synet_qadd_plan_lanes_ok(const synet_qadd_plan* plan)

import math

import numpy as np

from . import _cache
from . import _quantized_add_plan as planning
from ._arrays import (
    as_array, check_buffer, from_torch, internal_error, memory_order, mutable_array_like, require_array,
    run_in_memory_order)
from ._types import Activation, DataType

cnp.import_array()

cdef const synet_qadd_kernels* K = synet_qadd_kernels_at(kernel_level())
if K == NULL:
    raise ImportError("synet._quantized_add: this build has no kernels for this CPU (a native build elsewhere?)")
LEVEL = K.level.decode()

cdef enum:
    TILE = 1 << 14          # output elements per parallel task
    PARALLEL_MIN = 1 << 17  # output elements below which a call runs on one thread
    # output elements from which a call releases the GIL (below, that costs more than the add; the
    # slowest activation then holds it for ~30 us at most)
    NOGIL_MIN = 1 << 10

# How the functional form's operands pair up. In every pairing but SHAPED (with per-tensor quantisation) each
# call can work out the plan's walk from the operands' shapes, so one plan serves every shape of that pairing:
# the plan cache keys them without their shapes (only by whether the size reaches the planner's LUT_MIN).
cdef enum:
    SHAPED = 0       # any other broadcast: a plan per pair of shapes
    SAME_SHAPE = 1   # a and b of one shape
    A_ONE = 2        # a holds one element and has no more dimensions than b: the output has b's shape
    B_ONE = 3        # the same with a and b swapped
    A_ALONG = 4      # a varies along one axis of b (a per-channel bias): the output has b's shape (_along_axis)
    B_ALONG = 5      # the same with a and b swapped

cdef Py_ssize_t _LUT_MIN = planning.LUT_MIN, _STREAM_MIN = planning.STREAM_MIN


cdef bint _known_type(int t) noexcept nogil:
    return t == SYNET_QADD_F32 or t == SYNET_QADD_U8 or t == SYNET_QADD_I8


cdef int qadd_run(const synet_qadd_plan* p, const void* a, const void* b, void* dst, int n_threads) noexcept nogil:
    """Run a plan (see _quantized_add.pxd): the one entry point of the Python and C APIs. The output is
    split into tiles of TILE elements (not by thread count), each written by one task."""
    cdef Py_ssize_t t, tiles
    cdef bint one_byte
    if p == NULL:
        return SYNET_VALUE_ERROR
    if p.size <= 0:
        return SYNET_OK if p.size == 0 else SYNET_VALUE_ERROR
    if a == NULL or b == NULL or dst == NULL or p.act_params == NULL or p.consts == NULL or p.inner <= 0 or \
            p.rank < 0 or (p.rank > 0 and (p.outer_shape == NULL or p.a_strides == NULL or p.b_strides == NULL)):
        return SYNET_VALUE_ERROR
    if not (_known_type(p.a_type) and _known_type(p.b_type) and _known_type(p.dst_type)) or \
            p.act < 0 or p.act >= SYNET_ACT_COUNT or p.nchan < 1 or p.chan_inner < 1:
        return SYNET_VALUE_ERROR
    one_byte = p.a_type != SYNET_QADD_F32 and p.b_type != SYNET_QADD_F32 and p.dst_type != SYNET_QADD_F32
    if p.mode == SYNET_QADD_FOLDED and not (one_byte and p.a_type == p.b_type == p.dst_type):
        return SYNET_VALUE_ERROR
    if p.mode == SYNET_QADD_LOOKUP:
        if not one_byte or p.nchan != 1:
            return SYNET_VALUE_ERROR
        if p.lut == NULL:
            return SYNET_NOT_READY
    if p.line != NULL and not ((p.mode == SYNET_QADD_LOOKUP or p.mode == SYNET_QADD_FOLDED) and one_byte and
                               p.nchan == 1 and 1 <= p.line_wa <= 2 and 1 <= p.line_wb <= 2 and
                               p.line_wa + p.line_wb <= 3):
        return SYNET_VALUE_ERROR
    if p.mode < SYNET_QADD_GENERIC or p.mode > SYNET_QADD_LOOKUP or not synet_qadd_plan_lanes_ok(p):
        return SYNET_VALUE_ERROR
    tiles = (p.size + TILE - 1) // TILE
    if tiles == 1:  # no parallel region to open (its cost dominates small adds); the same bits
        K.tile(p, a, b, dst, 0, p.size)
        return SYNET_OK
    if n_threads <= 1 or p.size < PARALLEL_MIN:   # nor for one thread (its region costs two futex calls)
        for t in range(tiles):
            K.tile(p, a, b, dst, t * TILE, min(p.size, (t + 1) * TILE))
        return SYNET_OK
    for t in prange(tiles, schedule="static", num_threads=n_threads):
        K.tile(p, a, b, dst, t * TILE, min(p.size, (t + 1) * TILE))
    return SYNET_OK


@cython.final
@cython.no_gc
cdef class _QaddState:
    """An initialised context, immutable: the C plan and the arrays it points into."""

    cdef synet_qadd_plan plan
    cdef object planned            # planning.QuantizedAddPlan
    cdef tuple init_args           # init's arguments as given (arrays copied), for pickling
    cdef object act_params, table, consts, lut, line, lanes, lanes_arrays
    cdef object a_dtype, b_dtype, dst_dtype
    cdef Py_ssize_t a_size, b_size
    cdef tuple out_shape


cdef _QaddState _new_state(planned):
    cdef _QaddState st = _QaddState.__new__(_QaddState)
    cdef synet_qadd_plan* p = &st.plan
    cdef synet_qadd_consts* k
    cdef synet_qadd_lanes* lanes
    cdef Py_ssize_t c, width
    st.planned = planned
    st.a_dtype = planning.IO_DTYPES[planned.a_type]
    st.b_dtype = planning.IO_DTYPES[planned.b_type]
    st.dst_dtype = planning.IO_DTYPES[planned.dst_type]
    st.a_size, st.b_size = math.prod(planned.a_shape), math.prod(planned.b_shape)
    st.out_shape = planned.out_shape
    st.act_params = planned.act_params
    st.table = planned.table
    st.consts = np.zeros(planned.nchan * sizeof(synet_qadd_consts), np.uint8)
    k = <synet_qadd_consts*>data_of(st.consts)
    f = planned.consts
    for c in range(planned.nchan):
        k[c].a_scale, k[c].b_scale = f["a_scale"][c], f["b_scale"][c]
        k[c].fa_scale, k[c].fa_scale_low = f["fa_scale"][c], f["fa_scale_low"][c]
        k[c].fb_scale, k[c].fb_scale_low = f["fb_scale"][c], f["fb_scale_low"][c]
        k[c].a_zero, k[c].b_zero = f["a_zero"][c], f["b_zero"][c]
        k[c].q_pre, k[c].q_inv, k[c].q_zero = f["q_pre"][c], f["q_inv"][c], f["q_zero"][c]
        k[c].ka, k[c].kb, k[c].kc, k[c].lo = f["ka"][c], f["kb"][c], f["kc"][c], f["lo"][c]
        k[c].folded_in_doubles = f["folded_in_doubles"][c]
    p.a_type, p.b_type, p.dst_type = int(planned.a_type), int(planned.b_type), int(planned.dst_type)
    p.float_values = planned.float_values
    p.act = int(planned.act)
    p.act_params = <const float*>data_of(st.act_params)
    p.prelu_inner, p.prelu_channels = planned.prelu_inner, planned.prelu_channels
    p.consts = k
    p.nchan, p.chan_inner = planned.nchan, planned.chan_inner
    p.size, p.inner, p.rank = planned.size, planned.inner, planned.rank
    width = planned.table.shape[1]
    p.outer_shape = <const Py_ssize_t*>data_of(st.table)
    p.a_strides = p.outer_shape + width
    p.b_strides = p.outer_shape + 2 * width
    p.a_scalar, p.b_scalar = planned.a_scalar, planned.b_scalar
    p.stream = planned.size >= _STREAM_MIN
    synet_qadd_plan_set_lanes(p, NULL)
    if planned.lanes is not None:
        st.lanes_arrays = planned.lanes
        st.lanes = np.zeros(sizeof(synet_qadd_lanes), np.uint8)
        lanes = <synet_qadd_lanes*>data_of(st.lanes)
        f = planned.lanes
        lanes.period = planned.nchan * planned.chan_inner
        lanes.a_scale, lanes.b_scale = <const double*>data_of(f["a_scale"]), <const double*>data_of(f["b_scale"])
        lanes.fa_scale = <const float*>data_of(f["fa_scale"])
        lanes.fa_scale_low = <const float*>data_of(f["fa_scale_low"])
        lanes.fb_scale = <const float*>data_of(f["fb_scale"])
        lanes.fb_scale_low = <const float*>data_of(f["fb_scale_low"])
        lanes.a_zero, lanes.b_zero = <const int*>data_of(f["a_zero"]), <const int*>data_of(f["b_zero"])
        lanes.q_pre, lanes.q_inv = <const float*>data_of(f["q_pre"]), <const float*>data_of(f["q_inv"])
        lanes.q_zero, lanes.ka = <const float*>data_of(f["q_zero"]), <const float*>data_of(f["ka"])
        lanes.kb, lanes.kc = <const float*>data_of(f["kb"]), <const float*>data_of(f["kc"])
        lanes.lo = <const float*>data_of(f["lo"])
        synet_qadd_plan_set_lanes(p, lanes)
    p.lut = p.line = NULL
    p.line_wa = p.line_wb = 0
    p.mode = SYNET_QADD_GENERIC
    # the lookup kernel's table (by the generic kernel); from LUT_MIN outputs on at the avx512 level, the folded
    # kernel's table too, for its line: where the line exists, its byte permutes replace the folded arithmetic
    # (the same bits: the line reproduces the folded kernel's table)
    lined = LEVEL == "avx512" and planned.mode == planning.FOLDED and planned.nchan == 1 and \
        planned.lanes is None and planned.size >= _LUT_MIN   # (per-axis constants follow the position)
    # a folded plan whose rows have one operand constant keeps its table too: each row's 256 outputs are a row
    # of it (or of its transposed half), not computed again for every row of every call
    kept = planned.mode == planning.LOOKUP or (lined and planned.a_scalar != planned.b_scalar)
    if planned.mode == planning.LOOKUP or lined:
        lut = _build_lut(p, st.a_dtype, st.b_dtype, planned.mode, kept)
        if kept:
            st.lut = lut
            p.lut = <const uint8_t*>data_of(st.lut)
        found = planning.line_table(lut, st.a_dtype == np.int8, st.b_dtype == np.int8) \
            if LEVEL == "avx512" else None   # (the lower levels have no line kernel)
        if found is not None:
            p.line_wa, p.line_wb, st.line = found
            p.line = <const uint8_t*>data_of(st.line)
    p.mode = planned.mode
    return st


cdef object _build_lut(synet_qadd_plan* plan, a_dtype, b_dtype, int mode, bint transposed):
    """dst of the `mode` kernel (GENERIC for LOOKUP plans) for every pair of operand bytes, at
    (a_byte << 8) | b_byte (its bits); when `transposed`, then the same transposed, at
    65536 + ((b_byte << 8) | a_byte): a row with a constant b reads a row of it."""
    cdef synet_qadd_plan flat = plan[0]
    cdef int status
    flat.mode = SYNET_QADD_GENERIC if mode == planning.LOOKUP else mode
    flat.size = flat.inner = 65536
    flat.rank = 0
    flat.a_scalar = flat.b_scalar = False
    flat.prelu_inner = flat.prelu_channels = 1
    flat.stream = False
    pairs = np.arange(65536, dtype=np.uint16)
    a = (pairs >> 8).astype(np.uint8).view(a_dtype)
    b = (pairs & 0xFF).astype(np.uint8).view(b_dtype)
    lut = np.zeros(2 * 65536 + 64, dtype=np.uint8)  # padded for the AVX-512 kernel's 4-byte gathers
    cdef int threads = call_threads(None)
    cdef const void* pa = data_of(a)
    cdef const void* pb = data_of(b)
    cdef void* pd = data_of(lut)
    with nogil:
        status = qadd_run(&flat, pa, pb, pd, threads)
    if status != SYNET_OK:
        raise internal_error("QuantizedAdd lookup table", status)
    if transposed:
        lut[65536:2 * 65536] = lut[:65536].reshape(256, 256).T.ravel()
    return lut


def _kept(value):
    """A copy of an init argument that later changes to the caller's arrays, lists, tensors or other array-likes
    do not reach (those two as ndarrays)."""
    value = from_torch(value, "value")
    if isinstance(value, np.ndarray):
        return value.copy()
    if mutable_array_like(value):
        return np.array(value)
    if isinstance(value, list):
        return [_kept(v) for v in value]
    if isinstance(value, tuple):   # (a plain one: a named tuple's constructor takes its fields one by one)
        return tuple(_kept(v) for v in value)
    return value


cdef inline _QaddState _ready(QuantizedAdd context):
    if context._state is None:
        raise RuntimeError("QuantizedAdd: call init() before forward()")
    return <_QaddState>context._state


cdef _check_alias(dst, operand, str name, str dst_name):
    """dst may be `operand` itself (in-place: same data, dtype and size), never a partial overlap."""
    if overlaps(dst, operand):
        if not (data_of(dst) == data_of(operand) and dst.dtype == operand.dtype and dst.size == operand.size):
            raise ValueError(f"{dst_name}: overlaps {name} without being {name} itself (in-place needs the "
                             f"same data, dtype {dst.dtype} and {dst.size} elements; got {name} "
                             f"with dtype {operand.dtype} and {operand.size} elements)")


cdef object _forward(_QaddState st, a, b, dst, int threads, shaped_like=None, str dst_name="dst"):
    """The checked run of one prepared add: the fast path of forward and of the functional form (its `dst` named
    `dst_name`: "out"). With `shaped_like` (functional form only: the operand whose shape the output has, when
    the walk follows from the shapes), the plan runs on this call's sizes: one row of the output, or the walk
    of an operand that varies along one axis of the other (_along_walk)."""
    cdef int status
    cdef synet_qadd_plan flat
    cdef Py_ssize_t walk[6]
    cdef const synet_qadd_plan* p = &st.plan
    cdef Py_ssize_t a_size = st.a_size, b_size = st.b_size
    if shaped_like is not None:
        a_size, b_size = cnp.PyArray_SIZE(<cnp.ndarray>a), cnp.PyArray_SIZE(<cnp.ndarray>b)
        flat = st.plan   # a copy: the cached plan stays shared and unchanged
        flat.size = flat.inner = cnp.PyArray_SIZE(<cnp.ndarray>shaped_like)
        flat.rank = 0
        flat.a_scalar = a_size == 1 and flat.size > 1
        flat.b_scalar = b_size == 1 and flat.size > 1
        flat.stream = flat.size >= _STREAM_MIN
        if a_size != b_size and a_size > 1 and b_size > 1 and flat.size > 0:
            _along_walk(&flat, walk, shaped_like, b if shaped_like is a else a, shaped_like is a)
        p = &flat
    if not is_operand(a, st.a_dtype, None, a_size):
        check_buffer(a, "a", (st.a_dtype,), a_size)
    if not is_operand(b, st.b_dtype, None, b_size):
        check_buffer(b, "b", (st.b_dtype,), b_size)
    if dst is None:
        dst = new_like(st.dst_dtype, st.out_shape) if shaped_like is None else \
            new_array(st.dst_dtype, cnp.PyArray_NDIM(<cnp.ndarray>shaped_like),
                      cnp.PyArray_DIMS(<cnp.ndarray>shaped_like))
    else:
        if not is_output(dst, st.dst_dtype, None, p.size):
            check_buffer(dst, dst_name, (st.dst_dtype,), p.size, writeable=True)
        _check_alias(dst, a, "a", dst_name)
        _check_alias(dst, b, "b", dst_name)
    if p.size == 0:
        return dst
    result = dst
    if not (cnp.PyArray_ISALIGNED(<cnp.ndarray>a) and cnp.PyArray_ISALIGNED(<cnp.ndarray>b) and
            cnp.PyArray_ISALIGNED(<cnp.ndarray>dst)):   # (operands off their element size: aligned copies, and an
        a, b, result = aligned(a), aligned(b), aligned(dst)   # in-place dst written back after the run)
    cdef const void* pa = data_of(a)
    cdef const void* pb = data_of(b)
    cdef void* pd = data_of(result)
    if p.size < NOGIL_MIN:
        status = qadd_run(p, pa, pb, pd, threads)
    else:
        with nogil:
            status = qadd_run(p, pa, pb, pd, threads)
    if status != SYNET_OK:
        raise internal_error("QuantizedAdd.forward", status)
    if result is not dst:
        dst[...] = result
    return dst


@cython.final
cdef class QuantizedAdd:
    """Context of Simd's SynetQuantizedAdd, extended to INT8, per-axis quantisation, broadcasting and
    every activation.

    ``value = Activate((a - a_zero)*a_scale + (b - b_zero)*b_scale)`` (a FLOAT32 operand is used
    as is); a quantised output ``clamp(round_half_even(value / dst_scale) + dst_zero, lo, hi)``,
    FLOAT32 output ``value``. The constructor takes `init`'s keywords and calls it when a shape
    or type is given.

    Examples
    --------
    >>> add = QuantizedAdd([64], "u8", 0.010, 47, [64], "u8", 0.020, 30, "identity", None,
    ...                    "u8", 0.015, 38)
    >>> add.forward(np.full(64, 50, np.uint8), np.full(64, 80, np.uint8))[:4]
    array([107, 107, 107, 107], dtype=uint8)
    """

    def __init__(self, a_shape=None, a_type=None, a_scale=1.0, a_zero=0, b_shape=None, b_type=None,
                 b_scale=1.0, b_zero=0, act_type=Activation.IDENTITY, act_params=None, dst_type=None,
                 dst_scale=1.0, dst_zero=0, *, axis=1):
        self._state = None
        if a_shape is not None or a_type is not None or b_shape is not None or b_type is not None \
                or dst_type is not None:
            self.init(a_shape, a_type, a_scale, a_zero, b_shape, b_type, b_scale, b_zero, act_type,
                      act_params, dst_type, dst_scale, dst_zero, axis=axis)

    def init(self, a_shape, a_type, a_scale, a_zero, b_shape, b_type, b_scale, b_zero, act_type,
             act_params, dst_type, dst_scale, dst_zero, *, axis=1):
        """(Re)initialise the context.

        Parameters
        ----------
        a_shape, b_shape : sequence of int
            The operands' shapes; they broadcast with NumPy's rules to the output shape.
        a_type, b_type, dst_type : DataType, name or dtype
            FLOAT32, UINT8 or INT8 each.
        a_scale, b_scale, dst_scale : float or 1-D array
            Quantisation scales (finite, > 0) of quantised tensors; ignored for FLOAT32 ones. A 1-D
            array gives one scale per index along `axis` of that tensor.
        a_zero, b_zero, dst_zero : int or 1-D array
            Zero points (UINT8: [0, 255], INT8: [-128, 127]); ignored for FLOAT32 tensors.
        act_type : Activation or name
            Applied to a' + b'.
        act_params : sequence of float, optional
            The activation's parameters (defaults when None; extra values ignored). PRELU:
            one slope per channel of the output's axis 1, or a single slope (required).
        axis : int
            The axis of each tensor along which per-axis scales and zero points run (default 1,
            negative counts from the end); all of them must meet on one output axis.

        Identical arguments keep the context; others rebuild it.

        Raises
        ------
        ValueError
            Shapes that do not broadcast, types other than FLOAT32 / UINT8 / INT8, bad scales, zero
            points, per-axis lengths or activation parameters; the message names the parameter.
        """
        planned = planning.plan(a_shape, a_type, a_scale, a_zero, b_shape, b_type, b_scale, b_zero, act_type,
                                act_params, dst_type, dst_scale, dst_zero, axis)
        state = self._state
        if state is not None and (<_QaddState>state).planned.key == planned.key:
            return
        state = _new_state(planned)
        # what pickling keeps: the arguments as given (arrays and lists copied), those of a FLOAT32 tensor
        # (ignored, and maybe not picklable) as 1.0 and 0
        if planned.a_type == DataType.FLOAT32:
            a_scale, a_zero = 1.0, 0
        if planned.b_type == DataType.FLOAT32:
            b_scale, b_zero = 1.0, 0
        if planned.dst_type == DataType.FLOAT32:
            dst_scale, dst_zero = 1.0, 0
        (<_QaddState>state).init_args = tuple(_kept(v) for v in (a_shape, a_type, a_scale, a_zero, b_shape, b_type,
                                                                 b_scale, b_zero, act_type, act_params, dst_type,
                                                                 dst_scale, dst_zero, axis))
        self._state = state

    def enable(self):
        """True when `init` has built the context and `forward` may be called."""
        return self._state is not None

    @property
    def shape(self):
        """The output (broadcast) shape, or None before `init`."""
        return None if self._state is None else (<_QaddState>self._state).out_shape

    @property
    def kernel(self):
        """The kernel `init` chose and its CPU level, e.g. ``"folded avx512"``; ``"lookup line avx512"``: the lookup
        kernel's outputs depend on one line index (see the docs' design page). None before `init`."""
        if self._state is None:
            return None
        cdef _QaddState st = <_QaddState>self._state
        return f"{st.planned.kernel}{' line' if st.line is not None else ''} {LEVEL}"

    def forward(self, a, b, dst=None, *, n_threads=None):
        """dst = Quantize(Activate(a' + b')), broadcast to the output shape.

        Parameters
        ----------
        a, b : ndarray
            C-contiguous, the context's dtype (uint8 / int8 / float32) and element count (any shape).
        dst : ndarray, optional
            C-contiguous, writeable, the output dtype and element count; may be `a` or `b`
            itself (in-place) when dtype and size match. Allocated with the broadcast shape
            when None.
        n_threads : int, optional
            Threads for this call (default ``synet.get_num_threads()``).

        Returns
        -------
        dst
        """
        cdef _QaddState st = _ready(self)
        return _forward(st, a, b, dst, call_threads(n_threads))

    cdef const synet_qadd_plan* plan_of(self) except NULL:
        """The context as a C-level plan for `qadd_run` (points into the context's state)."""
        return &_ready(self).plan

    def clear(self):
        """Release the context."""
        self._state = None

    def __reduce__(self):
        """Pickles init's arguments; unpickling re-runs init (and rebuilds any lookup table)."""
        if self._state is None:
            return _restore, (PICKLE_VERSION, None)
        cdef _QaddState st = <_QaddState>self._state
        args = [_kept(v) for v in st.init_args]   # copies: the caller may change what it is handed
        args[0], args[4] = st.planned.a_shape, st.planned.b_shape   # normalised: the shapes given may be iterators
        return _restore, (PICKLE_VERSION, tuple(args))


PICKLE_VERSION = 1


def _restore(version, args):
    """Rebuilds a pickled QuantizedAdd (see QuantizedAdd.__reduce__)."""
    if version != PICKLE_VERSION:
        raise ValueError(f"QuantizedAdd pickle: state version {version!r} is not {PICKLE_VERSION} "
                         f"(made by another synet version)")
    context = QuantizedAdd()
    if args is not None:
        if not isinstance(args, tuple) or len(args) != 14:
            raise ValueError(f"QuantizedAdd pickle: expected 14 init arguments, got {args!r:.80}")
        context.init(*args[:13], axis=args[13])
    return context


cdef PlanCache _CACHE = _cache.cache("quantized_add")
cdef object _U8 = np.dtype(np.uint8), _I8 = np.dtype(np.int8), _F32 = np.dtype(np.float32)


cdef inline object _operand(object x, str name):
    """The functional form's operand: a C-contiguous uint8 / int8 / float32 array as it is (a few pointer
    compares), anything else through planning.operand (conversions and errors)."""
    cdef object descr
    if cnp.PyArray_Check(x) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x):
        descr = <object>cnp.PyArray_DESCR(<cnp.ndarray>x)
        if descr is _U8 or descr is _I8 or descr is _F32:
            return x
    return planning.operand(x, name)


cdef inline object _key_of(object value, unsigned long long* kinds):
    """One argument's part of the plan key: the plain scalars (the usual arguments) as they are, their type
    in 3 more bits of *kinds (so that 1, 1.0 and True key apart, and -0.0 from 0.0); anything else by
    _cache.key_of."""
    cdef object kind = type(value)
    cdef unsigned long long code
    if value is None:
        code = 1
    elif kind is float:
        code = 2 if value != 0.0 or copysign(1.0, value) > 0 else 6   # (-0.0 == 0.0: keyed apart)
    elif kind is int:
        code = 3
    elif kind is str:
        code = 4
    elif kind is type:
        code = 5
    else:
        code = 0
        value = _cache.key_of(value)
    kinds[0] = kinds[0] << 3 | code
    return value


cdef int _pairing(object a, object b) noexcept:
    """SAME_SHAPE, A_ONE, B_ONE, A_ALONG or B_ALONG when the operands (ndarrays) pair up so, else SHAPED."""
    cdef cnp.ndarray x = <cnp.ndarray>a, y = <cnp.ndarray>b
    if same_shape(x, y):
        return SAME_SHAPE
    if cnp.PyArray_SIZE(x) == 1 and cnp.PyArray_NDIM(x) <= cnp.PyArray_NDIM(y):
        return A_ONE
    if cnp.PyArray_SIZE(y) == 1 and cnp.PyArray_NDIM(y) <= cnp.PyArray_NDIM(x):
        return B_ONE
    if _along_axis(y, x) >= 0:
        return A_ALONG
    if _along_axis(x, y) >= 0:
        return B_ALONG
    return SHAPED


cdef int _along_axis(cnp.ndarray full, cnp.ndarray part) noexcept:
    """The axis k of `full` along which `part` (no more dimensions, aligned to full's last ones) varies, with
    full's extent there, being 1 along every other; -1 when there is no such axis."""
    cdef int nfull = cnp.PyArray_NDIM(full), npart = cnp.PyArray_NDIM(part), j, k = -1
    cdef cnp.npy_intp* full_dims = cnp.PyArray_DIMS(full)
    cdef cnp.npy_intp* part_dims = cnp.PyArray_DIMS(part)
    if npart > nfull:
        return -1
    for j in range(npart):
        if part_dims[j] != 1:
            if k >= 0 or part_dims[j] != full_dims[nfull - npart + j]:
                return -1
            k = nfull - npart + j
    return k


cdef void _along_walk(synet_qadd_plan* p, Py_ssize_t* walk, cnp.ndarray full, cnp.ndarray part,
                      bint a_is_full) noexcept:
    """p's walk (p.size > 0 set) for `part` broadcast into `full` along full's axis k (_along_axis), in
    walk[6] (outer shape, a's steps, b's steps; outermost first): rows of full's extent after k, along which
    part is one value, in (before k, k) outer dimensions; or, when k is the last axis, rows of the channels
    (both operands contiguous) in one outer dimension."""
    cdef int k = _along_axis(full, part), d
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(full)
    cdef Py_ssize_t channels = dims[k], inner = 1
    cdef Py_ssize_t* full_steps = walk + (2 if a_is_full else 4)
    cdef Py_ssize_t* part_steps = walk + (4 if a_is_full else 2)
    for d in range(k + 1, cnp.PyArray_NDIM(full)):
        inner *= dims[d]
    walk[0] = p.size // (channels * inner)
    p.outer_shape, p.a_strides, p.b_strides = walk, walk + 2, walk + 4
    if inner > 1:
        p.rank, p.inner = 2, inner
        walk[1] = channels
        full_steps[0], full_steps[1] = channels * inner, inner
        part_steps[0], part_steps[1] = 0, 1
        p.a_scalar, p.b_scalar = not a_is_full, a_is_full
    else:
        p.rank, p.inner = 1, channels
        full_steps[0], part_steps[0] = channels, 0


cdef bint _plain_numbers(a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero, bint numpy_too=False) noexcept:
    """Whether every quantisation argument is a Python float or int (so per tensor: one channel); with
    `numpy_too`, a NumPy integer or floating scalar or a 0-d array also counts."""
    cdef object x
    for x in (a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero):
        if type(x) is float or type(x) is int:
            continue
        if not numpy_too or not (isinstance(x, (np.integer, np.floating)) or
                                 cnp.PyArray_Check(x) and cnp.PyArray_NDIM(<cnp.ndarray>x) == 0):
            return False
    return True


cdef inline object _as_ndarray(x, str name):
    """An operand as an ndarray: an ndarray as it is, any other array-like (a number, a list, a tensor)
    through as_array, so that it broadcasts against the other operand in that operand's layout."""
    return x if cnp.PyArray_Check(x) else as_array(x, name)


cdef object _with_rank(x, int rank):
    """`x` with leading axes of 1 up to `rank` dimensions (itself when it has them)."""
    return x if x.ndim == rank else x.reshape((1,) * (rank - x.ndim) + x.shape)


cdef object _shared_memory_order(a, b, activation, axis, bint per_tensor):
    """The order of the axes (see memory_order) in which both ndarrays, `b` broadcast to `a`'s rank or the
    other way round, lie densely in memory when one is transposed (an NHWC tensor seen as NCHW); None if
    they lie otherwise, if they do not broadcast, or if the call refers to an axis of the result that the
    order would move (PRELU's slopes along axis 1; per-axis quantisation, when the ranks differ)."""
    cdef int rank = max(a.ndim, b.ndim)
    big, small = (a, b) if a.size >= b.size else (b, a)
    if big.ndim != rank or big.flags.c_contiguous:
        big, small = small, big
    if big.ndim != rank:
        return None
    order = memory_order(big)
    if order is None:
        return None
    if not _with_rank(small, rank).transpose(order).flags.c_contiguous:
        return None
    try:
        if a.shape != b.shape:   # (1.2 us)
            planning.broadcast_shapes(a.shape, b.shape, "a", "b")
        if planning.as_activation(activation, "activation") == Activation.PRELU:
            return None
    except ValueError:
        return None
    if type(axis) is not int or (a.ndim != b.ndim and not per_tensor):   # axis counts in each operand's shape
        return None
    return order


def quantized_add(a, b, *, a_scale=1.0, a_zero=0, b_scale=1.0, b_zero=0, dst_scale=1.0, dst_zero=0,
                  dst_dtype=np.uint8, activation="identity", activation_params=None, axis=1, out=None,
                  n_threads=None):
    """Quantized add with NumPy broadcasting: ``Quantize(Activate(a' + b'))``.

    ``x' = (x - x_zero) * x_scale`` for a uint8 / int8 operand, ``x`` itself for a float32 one;
    ``value = Activate(a' + b')``; a uint8 / int8 result is
    ``clamp(round_half_even(value / dst_scale) + dst_zero, lo, hi)`` (NaN -> lo, +-inf and values
    beyond the range saturate), a float32 result is ``value``. Plans are cached by their arguments
    (``synet.plan_cache_info()``), so a repeated call does no planning; operands of one shape, or one of
    a single element or varying along one axis of the other (a per-channel bias), with number-valued
    quantisation and no `activation_params`, share one plan across shapes.

    Parameters
    ----------
    a, b : array_like
        uint8, int8 or float32 (float64 is converted to float32); they broadcast with NumPy's rules.
    a_scale, a_zero, b_scale, b_zero : float, int, or 1-D arrays along `axis`
        Quantisation of quantised operands (scale finite > 0, zero in the type's range); ignored for
        float32 ones.
    dst_scale, dst_zero : float, int, or 1-D arrays along `axis`
        Quantisation of a uint8 / int8 result; ignored for float32.
    dst_dtype : dtype or name
        uint8 (default), int8 or float32.
    activation : Activation or name
        One of the 11 of ``synet.Activation`` (default identity).
    activation_params : sequence of float, optional
        Its parameters (defaults when None); PRELU: slopes along axis 1 of the result, or one.
    axis : int
        The axis of per-axis scales and zero points (default 1).
    out : ndarray, optional
        Writeable, the result's shape and `dst_dtype`, C-contiguous or laid out as transposed operands
        are; may be `a` or `b`.
    n_threads : int, optional

    Returns
    -------
    ndarray of the broadcast shape and `dst_dtype` (or `out`), laid out as operands that lie in the same
    other order of their axes (channels-last seen as NCHW), else C-ordered

    Examples
    --------
    >>> quantized_add(np.array([50], np.uint8), np.array([80], np.uint8), a_scale=0.01,
    ...               a_zero=47, b_scale=0.02, b_zero=30, dst_scale=0.015, dst_zero=38)
    array([107], dtype=uint8)
    """
    cdef int threads = call_threads(n_threads)
    cdef _QaddState st
    if out is not None:
        require_array(out, "out")
    a = _as_ndarray(a, "a")
    b = _as_ndarray(b, "b")
    if not (
            cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>b)):
        # a transposed pair runs on its C-ordered views, the result laid out alike (as NumPy's a + b does);
        # copying it to C order first cost 360x the add (u8 NHWC [1, 56, 56, 256] seen as NCHW: 7.2 ms)
        order = _shared_memory_order(a, b, activation, axis,
                                     _plain_numbers(a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero, True))
        if order is not None:
            rank = len(order)
            try:
                result = run_in_memory_order(
                    order, lambda x, y, o: quantized_add(
                        x, y, a_scale=a_scale, a_zero=a_zero, b_scale=b_scale, b_zero=b_zero, dst_scale=dst_scale,
                        dst_zero=dst_zero, dst_dtype=dst_dtype, activation=activation,
                        activation_params=activation_params, out=o, n_threads=n_threads,
                        axis=order.index(axis % rank) if -rank <= axis < rank else axis),
                    (_with_rank(a, rank), _with_rank(b, rank)),
                    out, None if out is None else planning.broadcast_shapes(a.shape, b.shape, "a", "b"))
            except ValueError:
                result = None   # checked again below, where the message names the caller's shapes
            if result is not None:
                return result
    a = _operand(a, "a")
    b = _operand(b, "b")
    cdef int pairing = _pairing(a, b) if activation_params is None and _plain_numbers(
        a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero) else SHAPED
    # the operand whose shape the output has, when the walk follows from the shapes
    shaped_like = None if pairing == SHAPED else (b if pairing == A_ONE or pairing == A_ALONG else a)
    geometry = (a.shape, b.shape) if shaped_like is None else \
        (pairing, cnp.PyArray_SIZE(<cnp.ndarray>shaped_like) >= _LUT_MIN)
    cdef unsigned long long kinds = 0
    try:
        key = (geometry, cnp.PyArray_TYPE(<cnp.ndarray>a), cnp.PyArray_TYPE(<cnp.ndarray>b),
               _key_of(a_scale, &kinds), _key_of(a_zero, &kinds), _key_of(b_scale, &kinds),
               _key_of(b_zero, &kinds), _key_of(dst_scale, &kinds), _key_of(dst_zero, &kinds),
               _key_of(dst_dtype, &kinds), _key_of(activation, &kinds), _key_of(activation_params, &kinds),
               _key_of(axis, &kinds), kinds)
    except TypeError:
        key = None
    state = _CACHE.get(key) if key is not None else None
    if state is None:
        dst_type = planning.io_type(dst_dtype, "dst_dtype")
        out_shape = planning.broadcast_shapes(a.shape, b.shape, "a", "b")
        act = Activation(planning.as_activation(activation, "activation"))
        params = planning.activation_params(act, activation_params, out_shape[1] if len(out_shape) >= 2 else 1,
                                            "activation_params")
        state = _new_state(planning.plan(a.shape, a.dtype, a_scale, a_zero, b.shape, b.dtype, b_scale, b_zero,
                                         act, params, dst_type, dst_scale, dst_zero, axis))
        if key is not None:
            _CACHE.put(key, state)
    st = <_QaddState>state
    expected = st.out_shape if shaped_like is None else shaped_like.shape
    if out is not None and (out.shape != expected or out.dtype != st.dst_dtype):
        raise ValueError(f"out: expected shape {expected} and dtype {st.dst_dtype}, got shape {out.shape} "
                         f"and dtype {out.dtype}")
    if out is not None and (not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError("out: expected a writeable C-contiguous array")
    return _forward(st, a, b, out, threads, shaped_like, "out")
