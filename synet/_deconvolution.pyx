"""Deconvolution16b: BF16/FP32 transposed convolution (PyTorch's ConvTranspose2d), fused activation.

``dst[n, oc, oy, ox] = act(bias[oc] + Σ src[n, ic, iy, ix] · w[ic, oc, ky, kx])`` over the taps with
``oy = iy·stride_y − pad_y + ky·dilation_y`` (and likewise for x), ic in oc's group; src and w are
rounded to BF16 (nearest-even), the sum is accumulated in FP32.

Planning (checks, phase decomposition, tables) is synet/_deconvolution_plan.py; the kernels are
synet/src/deconvolution.c (PhaseGemm with an FP32, AVX-512 BF16 or AMX micro-kernel) and
deconvolution_depthwise.c, at the CPU level chosen at import. This module holds the parallel drivers,
the context and the functional form. Each output element is summed by one task in a fixed order, so
results do not depend on the thread count.
"""

cimport cython
cimport numpy as cnp
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int64_t, uint16_t
from libc.stdlib cimport calloc, free

from synet._csrc cimport (
    SYNET_ACT_COUNT, SYNET_ACT_IDENTITY, SYNET_ACT_RELU, SYNET_DECONV_DEPTHWISE, SYNET_DECONV_GEMM, SYNET_LANES_STRIP,
    SYNET_LANES_TAPS, SYNET_MICRO_AMX, SYNET_MICRO_BF16, SYNET_MICRO_FP32, SYNET_NOT_READY, SYNET_OK,
    SYNET_PLANAR_OUT_MAX, SYNET_VALUE_ERROR, synet_barrier, synet_deconv_exact_products_of,
    synet_deconv_kernels, synet_deconv_kernels_at, synet_deconv_plan, synet_deconv_products_exact,
    synet_deconv_source_exponents, synet_deconv_weights, synet_exponent_range,
)
from libc.string cimport memset

from synet._fastpath cimport (
    aligned, data_of, is_float32_array, is_operand, is_output, key_part, new_array, new_like, overlaps,
)
from synet._cache cimport PlanCache
from synet._kernels cimport amx_ready, bf16_dot_preferred, call_threads, kernel_level

import copy
import copyreg
import threading

import numpy as np

from . import _cache
from . import _deconvolution_plan as planning
from ._arrays import (UINT16, InternalError, as_array, check_buffer, check_out, internal_error, native, require_array,
                      round_from_float64)
from ._conv_params import ConvParams, ConvParams3d
from ._types import BFLOAT16, DataType

cnp.import_array()

cdef const synet_deconv_kernels* K = synet_deconv_kernels_at(kernel_level())
if K == NULL:
    raise ImportError("synet._deconvolution: this build has no kernels for this CPU (a native build elsewhere?)")
LEVEL = K.level.decode()
# the level without FMA instructions: its copy with float64 products, for the runs whose products may leave FP32's
# normal range (deconvolution.h: synet_deconv_products_exact); NULL at the FMA levels
cdef const synet_deconv_kernels* K_EXACT = synet_deconv_exact_products_of(K)
# whether plans off AMX run the vdpbf16ps micro-kernel (else the FP32 one: the same order and bits but for subnormals)
BF16_DOT = bool(K.micro_bf16 and bf16_dot_preferred())

cdef enum:
    PARALLEL_MIN = 1 << 18       # multiply-adds below which a call runs on one thread
    PACK_PARALLEL_MIN = 1 << 18  # packed weight elements below which packing runs on one thread
    NOGIL_MIN = 1 << 14          # multiply-adds below which a call keeps the GIL
    PLAN_TABLES = 20             # synet_deconv_plan's tables (planning.TABLES)

_FLOAT32 = np.dtype(np.float32)
_UINT8 = np.dtype(np.uint8)


def amx_available():
    """Whether this process runs AMX kernels: the CPU level allows them and Linux grants the tile state
    (asked once, on the first call of this or of an AMX-eligible plan)."""
    return bool(K.micro_amx and amx_ready())


# ---------------------------------------------------------------------------------------------
# The run


cdef int deconv_run(const synet_deconv_plan* p, const void* src, void* buf, void* dst, int n_threads) noexcept nogil:
    """Run a plan: pad / convert src into buf (aligned to 64 bytes inside p.buf_size), every output
    task, then with exact_borders the border outputs again over their in-range taps. The one entry
    point of the Python and C APIs."""
    cdef char* image = NULL
    cdef Py_ssize_t t, r
    cdef int* rows
    cdef int one_rows[16]
    cdef int one_range[2]
    cdef int* ranges
    cdef int nthreads
    cdef const synet_deconv_kernels* k = K
    if p == NULL or src == NULL or dst == NULL:
        return SYNET_VALUE_ERROR
    if (p.impl != SYNET_DECONV_GEMM and p.impl != SYNET_DECONV_DEPTHWISE) or p.act < 0 or p.act >= SYNET_ACT_COUNT:
        return SYNET_VALUE_ERROR
    if min(p.batch, p.src_c, p.src_d, p.src_h, p.src_w, p.dst_c, p.dst_d, p.dst_h, p.dst_w, p.group) < 1 or \
            min(p.stride_z, p.stride_y, p.stride_x, p.kernel_z, p.kernel_y, p.kernel_x) < 1 or \
            min(p.cg_in, p.cg_out, p.padded_d, p.padded_h, p.padded_w, p.nrows, p.ntasks, p.row_run) < 1 or \
            min(p.dilation_z, p.dilation_y, p.dilation_x) < 1 or p.buf_size < 0 or p.pad_rows < 0 or \
            p.dst_image != p.dst_d * p.dst_h * p.dst_w * p.dst_c or p.nrows != p.dst_d * p.dst_h or \
            min(p.pad_front, p.pad_top, p.pad_left) < 0:
        return SYNET_VALUE_ERROR
    if p.impl == SYNET_DECONV_DEPTHWISE and (
            p.ntasks != p.batch * (1 if p.nhwc and p.cg_in == p.cg_out == 1 else
                                   p.group * ((p.cg_out + SYNET_PLANAR_OUT_MAX - 1) // SYNET_PLANAR_OUT_MAX)) *
            ((p.nrows + p.row_run - 1) // p.row_run) or
            p.pad_rows != (p.batch * p.padded_d * p.padded_h if p.nhwc else
                           (0 if p.cg_in == p.cg_out == 1 else p.batch * p.src_c)) or
            (p.cg_out > 1 and p.stride_x > 2)):
        return SYNET_VALUE_ERROR   # the depthwise kernel's tasks and padded parts, a planar group's strides
    if p.phase_taps == NULL or p.phase_tap0 == NULL or p.tap_offsets == NULL or p.col_first == NULL or \
            p.col_count == NULL:
        return SYNET_VALUE_ERROR
    if p.impl == SYNET_DECONV_GEMM and (
            (p.direct and not (p.src_bf16 and p.nhwc and p.micro != SYNET_MICRO_FP32)) or
            (p.micro == SYNET_MICRO_FP32 and (p.weight_strip != K.fp32_strip or
                                              (p.wide_weights and p.wide_weights != K.fp32_unit))) or
            (p.micro != SYNET_MICRO_FP32 and p.wide_weights) or
            (p.micro != SYNET_MICRO_FP32 and not p.lanes and p.weight_strip < p.block_width) or
            (p.lanes and (p.micro != SYNET_MICRO_BF16 or p.nhwc or p.direct or p.stride_x > 2 or
                          p.kernel_z * p.kernel_y * p.kernel_x > SYNET_LANES_TAPS or
                          p.weight_strip != SYNET_LANES_STRIP or
                          (p.act != SYNET_ACT_IDENTITY and p.act != SYNET_ACT_RELU))) or
            (p.micro == SYNET_MICRO_BF16 and not K.micro_bf16) or
            (p.micro == SYNET_MICRO_AMX and (not K.micro_amx or not amx_ready() or p.nunits < 1 or p.amx_runs < 1 or
                                             p.unit_s0 == NULL or p.unit_s1 == NULL or p.unit_ob == NULL or
                                             p.run_unit0 == NULL or p.seg_aoff == NULL or p.seg_doff == NULL or
                                             p.seg_m == NULL or p.seg_phase == NULL)) or
            (p.micro != SYNET_MICRO_FP32 and p.micro != SYNET_MICRO_BF16 and p.micro != SYNET_MICRO_AMX)):
        return SYNET_VALUE_ERROR   # a kernel this build, CPU or process cannot run
    if p.exact_borders and (p.border_z == NULL or p.border_y == NULL or p.border_x == NULL or p.nborder_x < 0 or
                            p.nborder_x > p.dst_w):
        return SYNET_VALUE_ERROR
    if p.bias == NULL or p.params == NULL or \
            (p.weights == NULL or p.weight_offsets == NULL if p.impl == SYNET_DECONV_GEMM else p.depthwise == NULL) or \
            (p.exact_borders and p.exact_weights == NULL):
        return SYNET_NOT_READY
    if p.buf_size > 0:
        if buf == NULL:
            return SYNET_VALUE_ERROR
        image = <char*>buf + ((64 - (<size_t>buf) % 64) % 64)
    nthreads = max(n_threads, 1) if p.batch * p.dst_image * p.cg_in >= PARALLEL_MIN else 1
    one_rows[0] = 0
    # AMX: per thread, the tile rows configured (0: none); then 2 ints a thread for the source's exponent range
    rows = <int*>calloc(nthreads * 18, sizeof(int)) if nthreads > 1 else NULL
    if rows == NULL:   # one thread, or no memory for 18 ints a thread: no parallel region (its cost dominates
        if K_EXACT != NULL:   # small layers), the same tasks in order
            synet_deconv_source_exponents(p, src, 0, 1, one_range)
            k = _kernels_for(p, one_range, 1)
        _run_serial(k, p, src, image, dst, one_rows)
        return SYNET_OK
    ranges = rows + nthreads * 16
    with parallel(num_threads=nthreads):
        # (each prange is an `omp for nowait`: synet_barrier ends a pass the next one reads)
        k = K   # (private to each thread)
        if K_EXACT != NULL:   # the source's exponents, scanned by the threads together; each then picks the copy
            for r in prange(nthreads, schedule="static"):
                synet_deconv_source_exponents(p, src, r, nthreads, ranges + 2 * r)
            synet_barrier()
            k = _kernels_for(p, ranges, nthreads)
        for r in prange(p.pad_rows, schedule="static"):
            k.pad_row(p, src, image, r)
        synet_barrier()
        for t in prange(p.ntasks, schedule="guided"):
            k.task(p, src, image, dst, t, rows + 16 * threadid())
        if p.micro == SYNET_MICRO_AMX and p.impl == SYNET_DECONV_GEMM:
            k.amx_release()
        if p.exact_borders:   # after the main pass: overwrite its border outputs
            synet_barrier()
            for t in prange(p.batch * p.group * p.dst_d * p.dst_h, schedule="guided"):
                k.border_task(p, src, dst, t)
    free(rows)
    return SYNET_OK


cdef inline const synet_deconv_kernels* _kernels_for(const synet_deconv_plan* p, const int* ranges,
                                                     Py_ssize_t parts) noexcept nogil:
    """K, or K_EXACT where the source's exponent ranges (of `parts` parts) and the weights' say a product may
    leave FP32's normal range (synet_deconv_products_exact)."""
    return K if synet_deconv_products_exact(p, ranges, parts) else K_EXACT


cdef void _run_serial(const synet_deconv_kernels* k, const synet_deconv_plan* p, const void* src, char* image,
                      void* dst, int* rows) noexcept nogil:
    """deconv_run's passes on the calling thread, with the kernels k."""
    cdef Py_ssize_t t
    for t in range(p.pad_rows):
        k.pad_row(p, src, image, t)
    for t in range(p.ntasks):
        k.task(p, src, image, dst, t, rows)
    if p.micro == SYNET_MICRO_AMX and p.impl == SYNET_DECONV_GEMM:
        k.amx_release()
    if p.exact_borders:
        for t in range(p.batch * p.group * p.dst_d * p.dst_h):
            k.border_task(p, src, dst, t)


cdef int _pack(const synet_deconv_plan* p, const synet_deconv_weights* w, Py_ssize_t units, Py_ssize_t work,
               void* packed, int threads) noexcept nogil:
    """Pack every unit of the weights; returns how many units hold a NaN or inf rounded weight."""
    cdef Py_ssize_t u
    cdef int nonfinite = 0
    if threads == 1 or work < PACK_PARALLEL_MIN:   # no parallel region to open: even one thread's costs a
        for u in range(units):                       # futex wake a call (S1 best 4.6 -> 3.6 us)
            nonfinite += K.pack(p, w, u, packed)
        return nonfinite
    for u in prange(units, schedule="static", num_threads=threads):
        nonfinite += K.pack(p, w, u, packed)
    return nonfinite


# ---------------------------------------------------------------------------------------------
# Prepared geometry and weights (immutable: a running forward keeps the ones it read)


@cython.final
@cython.no_gc
cdef class _Geometry:
    """A planned geometry: the C plan without set_params' data, and the tables it points into."""

    cdef synet_deconv_plan plan
    cdef object planned            # planning.DeconvolutionPlan
    cdef object table_data         # the plan's tables, one int64 array
    cdef object src_dtype, src_alt, dst_dtype, dst_alt
    cdef Py_ssize_t src_size, dst_size, weight_size, packed_size, pack_units
    cdef Py_ssize_t weight_steps[5]
    cdef tuple dst_shape
    cdef object zero_bias          # read-only zeros: the bias of set_params(bias=None)


cdef inline Py_ssize_t _elements(tuple shape) except -1:
    """The product of a planned shape's sizes (each checked by the planner: the product fits)."""
    cdef Py_ssize_t n = 1
    for size in shape:
        n *= <Py_ssize_t>size
    return n


cdef _Geometry _new_geometry(planned):
    cdef _Geometry geo = _Geometry.__new__(_Geometry)
    cdef synet_deconv_plan* p = &geo.plan
    geo.planned = planned
    geo.table_data = planned.table_data
    cdef tuple src_dtypes = planned.src_dtypes, dst_dtypes = planned.dst_dtypes, steps = planned.weight_steps
    geo.src_dtype = src_dtypes[0]
    geo.src_alt = src_dtypes[1] if len(src_dtypes) > 1 else None
    geo.dst_dtype = dst_dtypes[0]
    geo.dst_alt = dst_dtypes[1] if len(dst_dtypes) > 1 else None
    geo.dst_shape = planned.dst_shape
    geo.src_size = _elements(planned.src_shape)
    geo.dst_size = _elements(geo.dst_shape)
    geo.weight_size = _elements(planned.weight_shape)
    geo.packed_size, geo.pack_units = planned.packed_size, planned.pack_units
    for i in range(5):
        geo.weight_steps[i] = steps[i]
    # (the orders of planning.FAMILY_SCALARS, SIZED_SCALARS and TABLES: test_deconvolution_plan_fields)
    (p.impl, p.micro, p.wide_weights, p.lanes, p.src_bf16, p.dst_bf16, p.nhwc, p.direct, p.act, p.src_c, p.dst_c,
     p.group, p.cg_in, p.cg_out, p.kernel_z, p.kernel_y, p.kernel_x, p.dilation_z, p.dilation_y, p.dilation_x,
     p.stride_z, p.stride_y, p.stride_x, p.pad_front, p.pad_top, p.pad_left, p.cg_padded, p.pixel_stride, p.kpairs,
     p.block_width, p.weight_strip, p.nblocks) = <tuple>planned.family_scalars
    (p.buf_size, p.batch, p.src_d, p.src_h, p.src_w, p.dst_d, p.dst_h, p.dst_w, p.padded_d, p.padded_h, p.padded_w,
     p.pad_low_z, p.pad_low_y, p.pad_low_x, p.padded_image, p.nrows, p.nunits, p.amx_runs, p.ntasks, p.row_run,
     p.stream, p.dst_image, p.pad_rows, p.nborder_x) = <tuple>planned.sized_scalars
    cdef const int64_t* tables = <const int64_t*>data_of(geo.table_data)
    cdef tuple bounds = planned.table_bounds
    cdef const int64_t** fields[PLAN_TABLES]
    fields[:] = [&p.phase_taps, &p.phase_tap0, &p.tap_kz, &p.tap_ky, &p.tap_kx, &p.weight_offsets, &p.tap_offsets,
                 &p.col_first, &p.col_count, &p.unit_s0, &p.unit_s1, &p.unit_ob, &p.run_unit0, &p.seg_aoff,
                 &p.seg_doff, &p.seg_m, &p.seg_phase, &p.border_z, &p.border_y, &p.border_x]
    if len(bounds) != PLAN_TABLES:
        raise InternalError(f"deconvolution plan: {len(bounds)} tables, expected {PLAN_TABLES} (a bug in synet)")
    for i in range(PLAN_TABLES):
        fields[i][0] = tables + <Py_ssize_t>(<tuple>bounds[i])[0]
    p.bias = p.params = p.depthwise = p.exact_weights = NULL
    p.weights = NULL
    p.exact_borders = 0
    return geo


def _plan(batch, conv, compatibility, dims=None):
    return planning.plan(batch, conv, compatibility, BF16_DOT, bool(K.micro_amx), K.fp32_strip, K.fp32_unit,
                         amx_available, dims)


@cython.final
@cython.no_gc
cdef class _Weights:
    """set_params' data for one geometry: packed weights, bias, activation parameters."""

    cdef object packed, bias, params, exact
    cdef int exp_lo, exp_hi   # the weights' exponent range (synet_exponent_range), where K_EXACT needs it


cdef _Weights _new_weights(_Geometry geo, weight, bias, params, int threads, bint own):
    """Round and pack `weight` for `geo` (with the GIL released for the packing). `own`: copy the bias
    (a context keeps it; a one-shot functional call need not)."""
    cdef _Weights ws = _Weights.__new__(_Weights)
    cdef synet_deconv_weights w
    cdef int nonfinite
    cdef cnp.npy_intp size = geo.packed_size
    cdef bint depthwise = geo.plan.impl == SYNET_DECONV_DEPTHWISE
    planned = geo.planned
    w32 = weight if is_float32_array(weight, geo.weight_size) else planning.weight_array(weight, planned)
    if bias is None:
        if geo.zero_bias is None:   # (made at the first use: a functional call with a bias never needs it)
            zeros = np.zeros(geo.plan.dst_c, np.float32)
            zeros.flags.writeable = False
            geo.zero_bias = zeros
        ws.bias = geo.zero_bias
    elif not own and is_float32_array(bias, geo.plan.dst_c):
        ws.bias = bias
    else:
        ws.bias = planning.bias_array(bias, planned.geometry.dst_c)
    ws.params = params
    ws.packed = new_array(_FLOAT32 if depthwise else UINT16, 1, &size)
    w.w = <const float*>data_of(w32)
    w.ci_step, w.co_step, w.kz_step = geo.weight_steps[0], geo.weight_steps[1], geo.weight_steps[2]
    w.ky_step, w.kx_step = geo.weight_steps[3], geo.weight_steps[4]
    cdef char* packed = <char*>data_of(ws.packed)
    ws.exp_lo, ws.exp_hi = 255, 0
    with nogil:
        nonfinite = _pack(&geo.plan, &w, geo.pack_units, size, packed, threads)
        if not depthwise:   # the tail the micro-kernels may read past the last block
            memset(packed + (size - 64) * 2, 0, 128)
        if K_EXACT != NULL:
            synet_exponent_range(w.w, geo.weight_size, 0, &ws.exp_lo, &ws.exp_hi)
    ws.exact = planning.exact_weights(w32, planned) if nonfinite and planning.has_borders(planned) else None
    return ws


cdef void _attach(synet_deconv_plan* p, _Weights ws) noexcept:
    """Points the plan at the weights."""
    p.bias = <const float*>data_of(ws.bias)
    p.params = <const float*>data_of(ws.params)
    if p.impl == SYNET_DECONV_DEPTHWISE:
        p.depthwise = <const float*>data_of(ws.packed)
    else:
        p.weights = <const uint16_t*>data_of(ws.packed)
    p.exact_borders = ws.exact is not None
    p.weight_exp_lo, p.weight_exp_hi = ws.exp_lo, ws.exp_hi
    p.exact_weights = <const float*>data_of(ws.exact) if ws.exact is not None else NULL


cdef object _run(_Geometry geo, _Weights ws, src, buf, dst, int threads, str where):
    """The checked run of a prepared geometry with its weights: forward's and the functional form's."""
    cdef synet_deconv_plan plan = geo.plan
    cdef int status
    cdef Py_ssize_t need = plan.buf_size
    _attach(&plan, ws)
    if not is_operand(src, geo.src_dtype, geo.src_alt, geo.src_size):
        check_buffer(src, "src", geo.planned.src_dtypes, geo.src_size)
    if dst is None:
        dst = new_like(geo.dst_dtype, geo.dst_shape)
    else:
        if not is_output(dst, geo.dst_dtype, geo.dst_alt, geo.dst_size):
            check_buffer(dst, "dst", geo.planned.dst_dtypes, geo.dst_size, writeable=True)
        if overlaps(dst, src):
            raise ValueError("dst: must not overlap src")
    if buf is not None:
        buf = require_array(buf, "buf")
        if buf.dtype != np.uint8:
            raise ValueError(f"buf: expected dtype uint8, got {buf.dtype}")
    cdef cnp.npy_intp need_dims = need
    if need:
        if buf is None:
            buf = new_array(_UINT8, 1, &need_dims)
        else:
            if not buf.flags.c_contiguous or not buf.flags.writeable:
                raise ValueError("buf: expected a writeable C-contiguous array")
            if buf.size < need:
                raise ValueError(f"buf: expected >= {need} bytes (external_buffer_size()), got {buf.size}")
            if overlaps(buf, dst) or overlaps(buf, src):
                raise ValueError("buf: must not overlap src or dst")
    result = dst
    if not (cnp.PyArray_ISALIGNED(<cnp.ndarray>src) and cnp.PyArray_ISALIGNED(<cnp.ndarray>dst)):
        src, result = aligned(src), aligned(dst)   # (off their element size: aligned copies, dst written back)
    cdef const void* ps = data_of(src)
    cdef void* pd = data_of(result)
    cdef void* pb = data_of(buf) if need else NULL
    if plan.batch * plan.dst_image * plan.cg_in < NOGIL_MIN:   # releasing the GIL costs more than the layer
        status = deconv_run(&plan, ps, pb, pd, threads)
    else:
        with nogil:
            status = deconv_run(&plan, ps, pb, pd, threads)
    if status != SYNET_OK:
        raise internal_error(where, status)
    if result is not dst:
        dst[...] = result
    return dst


# ---------------------------------------------------------------------------------------------
# The context


@cython.final
@cython.no_gc
cdef class _State:
    cdef _Geometry geometry
    cdef _Weights weights          # None before set_params
    cdef tuple key                 # init's arguments, normalised
    cdef synet_deconv_plan ready   # with weights: the plan attached to them (the C API's plan)


cdef inline _State _ready(Deconvolution16b context):
    if context._state is None:
        raise RuntimeError(f"{type(context).__name__}: call init() before using the context")
    return <_State>context._state


cdef class Deconvolution16b:
    """Context of a BF16/FP32 transposed convolution (Simd's SynetDeconvolution16b).

    ``dst = act(bias + conv_transpose(bf16(src), bf16(weight)))`` with FP32 accumulation.
    Layouts: NCHW src [N, srcC, H, W] with weight [srcC, dstC/group, kY, kX] (PyTorch's
    ConvTranspose2d); NHWC src [N, H, W, srcC] with weight [srcC, kY, kX, dstC/group].

    Examples
    --------
    >>> conv = ConvParams.deconvolution(4, 3, 3, 4, kernel=2, stride=2, format="NHWC")
    >>> d = Deconvolution16b()
    >>> d.init(1, conv)
    >>> d.set_params(np.ones(2 * 2 * 4 * 4, np.float32))
    >>> d.forward(np.ones((1, 3, 3, 4), np.float32)).shape
    (1, 6, 6, 4)
    """

    _conv_type = ConvParams

    def __cinit__(self):
        self._state = None
        self._lock = threading.Lock()

    def __init__(self, batch=None, conv=None, compatibility=0):
        if batch is not None or conv is not None:
            self.init(batch, conv, compatibility)

    def init(self, batch, conv, compatibility=0):
        """(Re)initialise for `batch` images of geometry `conv`.

        ``dst_h = stride_y·(src_h − 1) + dilation_y·(kernel_y − 1) + 1 − pad_y − pad_h`` (likewise
        x) must hold. Identical arguments keep the context (and its weights); others rebuild it.

        Parameters
        ----------
        batch : int
            Images per forward (>= 1).
        conv : ConvParams
            The geometry, types, formats, group and activation.
        compatibility : Compatibility or int
            ``Compatibility.BF16_SOFT`` picks the FP32 micro-kernel (same summation order).

        Raises
        ------
        ValueError
            An unsupported or inconsistent geometry (says what was expected).
        """
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)):
            raise TypeError(f"batch: expected an int, got {type(batch).__name__}")
        if batch < 1:
            raise ValueError(f"batch: expected an int >= 1, got {batch}")
        expected = type(self)._conv_type
        if type(conv) is not expected:
            raise TypeError(f"conv: expected a synet.{expected.__name__}, got {type(conv).__name__}")
        key = (int(batch), planning.validate(conv), int(planning.as_compatibility(compatibility)))
        cdef _State st
        with self._lock:
            if self._state is not None and (<_State>self._state).key == key:
                return
            planned = _plan(*key)
            st = _State.__new__(_State)
            st.geometry = _new_geometry(planned)
            st.weights = None
            st.key = key
            self._state = st

    def enable(self):
        """True when `init` has built the context."""
        return self._state is not None

    def external_buffer_size(self):
        """Bytes of scratch `forward` needs in `buf` (the padded source image); 0 if none."""
        return int(_ready(self).geometry.plan.buf_size)

    def internal_buffer_size(self):
        """Bytes held by the context: packed weights, bias, activation parameters, tables, and with
        non-finite weights the FP32 weight copy of the exact-border pass."""
        if self._state is None:
            return 0
        cdef _State st = <_State>self._state
        total = st.geometry.table_data.nbytes
        if st.weights is not None:
            for a in (st.weights.packed, st.weights.bias, st.weights.params, st.weights.exact):
                if a is not None:
                    total += a.nbytes
        return int(total)

    def info(self):
        """The implementation chosen by `init` and its CPU level, e.g. ``"PhaseGemm avx512bf16 [avx512_bf16]"``;
        ``" + exact borders"`` when the weights hold NaN or inf and the border outputs are summed again
        over their in-range taps."""
        cdef _State st = _ready(self)
        borders = " + exact borders" if st.weights is not None and st.weights.exact is not None else ""
        return f"{st.geometry.planned.info} [{LEVEL}]{borders}"

    def set_params(self, weight, bias=None, params=None):
        """Set weights (rounded to BF16 nearest-even and packed once), bias and activation params.

        Parameters
        ----------
        weight : array_like of float
            srcC·kY·kX·dstC/group values: NCHW ``[srcC, dstC/group, kY, kX]`` (PyTorch's layout) or
            NHWC ``[srcC, kY, kX, dstC/group]``. float32 or bfloat16 (uint16: raw bits); other reals are
            rounded to bfloat16 once, from float64.
        bias : array_like of float, optional
            dstC values; zeros when None.
        params : array_like of float, optional
            At least the values the activation uses (dstC slopes for PRELU; extras ignored);
            None takes the activation's defaults.
        """
        cdef _State st = _ready(self)
        cdef _State new
        prm = planning.params_array(st.geometry.planned.geometry, params)
        weights = _new_weights(st.geometry, weight, bias, prm, call_threads(None), True)
        with self._lock:
            if self._state is not st:   # init/clear ran meanwhile: these weights fit the old geometry
                raise RuntimeError(f"{type(self).__name__}.set_params: the context was re-initialised during the call")
            new = _State.__new__(_State)
            new.geometry, new.weights, new.key = st.geometry, weights, st.key
            new.ready = st.geometry.plan
            _attach(&new.ready, weights)
            self._state = new

    def forward(self, src, buf=None, dst=None, *, n_threads=None):
        """Run the deconvolution: ``dst = act(bias + conv_transpose(bf16(src), bf16(weight)))``.

        Parameters
        ----------
        src : ndarray
            C-contiguous, the context's type (FLOAT32, or BFLOAT16 as ml_dtypes.bfloat16 / uint16
            bits), batch·srcC·srcH·srcW elements.
        buf : ndarray of uint8, optional
            Scratch of >= ``external_buffer_size()`` bytes; None uses a temporary one.
        dst : ndarray, optional
            C-contiguous, the dst type, batch·dstC·dstH·dstW elements; allocated in the
            layout's shape when None.
        n_threads : int, optional

        Returns
        -------
        dst
        """
        cdef _State st = _ready(self)
        if st.weights is None:
            raise RuntimeError(f"{type(self).__name__}.forward: call set_params() before forward()")
        return _run(st.geometry, st.weights, src, buf, dst, call_threads(n_threads), "Deconvolution16b.forward")

    cdef const synet_deconv_plan* plan_of(self) except NULL:
        """The prepared context as a C plan (RuntimeError before init or set_params)."""
        cdef _State st = _ready(self)
        if st.weights is None:
            raise RuntimeError(f"{type(self).__name__}: call set_params() before deconvolution_plan()")
        return &st.ready

    def clear(self):
        """Release the context: geometry, packed weights, bias and parameters."""
        with self._lock:
            self._state = None

    @property
    def batch(self):
        """The batch size given to `init`, or None."""
        return None if self._state is None else (<_State>self._state).geometry.planned.batch

    @property
    def conv(self):
        """A copy of the (normalised) ConvParams given to `init`, or None (a copy: the context's own keys its
        re-initialisation and its pickle)."""
        return None if self._state is None else copy.copy((<_State>self._state).geometry.planned.conv)

    def __reduce__(self):
        """Pickles init's arguments and set_params' data: the weights (BF16-rounded, in the caller's
        layout, stored as bfloat16 — exact, half the bytes of float32), bias and activation parameters,
        never the packed buffers; unpickling re-runs init and set_params for the CPU it lands on. The class
        travels too, and a Python subclass's attributes (its ``__dict__``), as pickle does for any object:
        the copy is made by the class's ``__new__``, not its ``__init__``."""
        cls = type(self)
        attributes = getattr(self, "__dict__", None) or None
        if self._state is None:   # an uninitialised context of the same class
            reduced = (copyreg.__newobj__, (cls,))
            return reduced if attributes is None else reduced + (attributes,)
        cdef _State st = <_State>self._state
        data = None
        if st.weights is not None:
            w = planning.unpack_weights(st.weights.packed, st.geometry.planned)
            bits = w.view(np.uint32)
            if not (bits & 0xFFFF).any():   # bfloat16 values (NaN payloads included): the same bits as bfloat16
                w = (bits >> 16).astype(np.uint16).view(BFLOAT16)
            data = (w, st.weights.bias, st.weights.params)
        reduced = (_restore, (PICKLE_VERSION, st.key, data, cls))
        return reduced if attributes is None else reduced + (attributes,)


PICKLE_VERSION = 1
_EITHER_CLASS = "Deconvolution16b or Deconvolution3d16b"   # before the state says which


def _restore(version, key, data, cls=None):
    """Rebuilds a pickled Deconvolution16b (see Deconvolution16b.__reduce__) of class `cls` (None: the one
    its geometry says, as pickles without a class have it); ValueError / TypeError naming what does not
    fit for a state it did not make. init and set_params are the base class's (a subclass's overrides are
    not called: they would not get the data they were written for)."""
    if version != PICKLE_VERSION:
        raise ValueError(f"{_EITHER_CLASS} pickle: state version {version!r} is not {PICKLE_VERSION} "
                         f"(made by another synet version)")
    if key is not None and (not isinstance(key, tuple) or len(key) != 3):
        raise ValueError(f"{_EITHER_CLASS} pickle: expected (batch, conv, compatibility), got {key!r:.80}")
    base = Deconvolution3d16b if key is not None and isinstance(key[1], ConvParams3d) else Deconvolution16b
    if cls is None:
        cls = base
    elif not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{base.__name__} pickle: expected a {base.__name__} class, got {cls!r:.80}")
    context = cls.__new__(cls)
    if key is not None:
        base.init(context, *key)
        if data is not None:
            if not isinstance(data, tuple) or len(data) != 3:
                raise ValueError(f"{type(context).__name__} pickle: expected (weight, bias, params)")
            for name, value, dtypes in (("weight", data[0], (_FLOAT32, BFLOAT16)), ("bias", data[1], (_FLOAT32,)),
                                        ("params", data[2], (_FLOAT32,))):
                if (value is not None or name == "weight") and \
                        (not isinstance(value, np.ndarray) or value.dtype not in dtypes):
                    raise TypeError(f"{type(context).__name__} pickle: {name}: expected a "
                                    f"{' or '.join(map(str, dtypes))} array, got {type(value).__name__}"
                                    f"{'' if not isinstance(value, np.ndarray) else ' of ' + str(value.dtype)}")
            base.set_params(context, *data)
    elif data is not None:
        raise ValueError(f"{_EITHER_CLASS} pickle: weights without a geometry")
    return context


@cython.final
cdef class Deconvolution3d16b(Deconvolution16b):
    """Context of a BF16/FP32 3-D transposed convolution: `Deconvolution16b` for volumes.

    ``dst = act(bias + conv_transpose(bf16(src), bf16(weight)))`` with FP32 accumulation, geometry from a
    `ConvParams3d`. Channels first: src [N, srcC, D, H, W] with weight [srcC, dstC/group, kD, kH, kW]
    (PyTorch's ConvTranspose3d); channels last: src [N, D, H, W, srcC] with weight [srcC, kD, kH, kW,
    dstC/group]. The kernels split the output into stride_d·stride_h·stride_w phases, each a stride-1
    implicit GEMM (or depthwise pass) over its taps: not a loop of 2-D calls over depth.

    Examples
    --------
    >>> conv = ConvParams3d.deconvolution(2, 2, 2, 2, 3, kernel=2, stride=2)
    >>> d = Deconvolution3d16b(1, conv)
    >>> d.set_params(np.ones(2 * 3 * 8, np.float32))
    >>> d.forward(np.ones((1, 2, 2, 2, 2), np.float32)).shape
    (1, 3, 4, 4, 4)
    """

    _conv_type = ConvParams3d


# ---------------------------------------------------------------------------------------------
# The functional forms

_CACHES = {dims: _cache.cache(f"conv_transpose{dims}d") for dims in (1, 2, 3)}
# the functional forms' checked arguments (planning.FunctionalCall) by their plan cache key with x's shape
# replaced by its rank (a pure function's memo: emptied when full)
_CALLS = {}
_CALLS_MAX = 1024
_cache.CLEARED_WITH.append(_CALLS.clear)   # (synet.clear_plan_cache empties it too)


def _as_operand(x, str name):
    """x as an array of float32 or bfloat16 (uint16: raw BF16 bits), in the machine's byte order; other reals
    become float32 values that bfloat16 holds, rounded once from float64 (as the kernel rounds float32)."""
    array = native(as_array(x, name))
    if array.dtype == _FLOAT32 or array.dtype == BFLOAT16:
        return array
    if array.dtype == UINT16:
        return array.view(BFLOAT16)
    if array.dtype.kind in "biuf":
        return round_from_float64(array)
    raise ValueError(f"{name}: expected real numbers (float32, bfloat16, float64, ...), got dtype {array.dtype}")


cdef dict _inputs(x, bias):
    """The functional form's arrays its `out` must not overlap, by name (the bias is read as the kernels
    store: an out over it gave other sums)."""
    return {"x": x} if bias is None else {"x": x, "bias": bias}


cdef object _conv_transpose(int dims, x, weight, bias, stride, padding, output_padding, groups, dilation, layout,
                            activation, activation_params, out_dtype, out, n_threads):
    """conv_transpose{dims}d: the plan of the geometry from the cache (or planned and cached), the weights
    packed for this call, one run."""
    cdef int threads = call_threads(n_threads)
    cdef _Geometry geo
    cdef PlanCache cache = <PlanCache?>_CACHES[dims]
    if not (cnp.PyArray_Check(x) and (<cnp.ndarray>x).dtype is _FLOAT32):
        x = _as_operand(x, "x")
    w = weight if cnp.PyArray_Check(weight) else as_array(weight, "weight")
    if bias is not None and not cnp.PyArray_Check(bias):   # (an array for out's overlap checks)
        bias = as_array(bias, "bias")
    if out is not None:
        out = require_array(out, "out")
    slow = _cache.key_of
    try:   # an FP32 out for an FP32 x asks for what no out does: the same plan; out's dtype keys by itself, its
        # byte order too (a byte-swapped out, refused, planned an FP32 output that the native one then met)
        key = (x.shape, x.dtype.num, w.shape, key_part(stride, slow), key_part(padding, slow),
               key_part(output_padding, slow), key_part(groups, slow), key_part(dilation, slow),
               key_part(layout, slow), key_part(activation, slow), key_part(activation_params, slow),
               key_part(out_dtype, slow),
               None if out is None or (out.dtype is _FLOAT32 and x.dtype is _FLOAT32) else out.dtype)
    except TypeError:
        key = None
    entry = cache.get(key) if key is not None else None
    if entry is None:
        if w.dtype.kind not in "biuf" and w.dtype != BFLOAT16:
            raise ValueError(f"weight: expected real numbers, got dtype {w.dtype}")
        # the arguments but x's sizes, checked once for every x of this rank (a new shape plans from here)
        call_key = None if key is None else (dims, len(x.shape), *key[1:])   # (dims: the 1-D, 2-D and 3-D forms
        # share this memo, and a 1-D call's layout "NCL" or weight rank are not a 2-D call's)
        checked = _CALLS.get(call_key) if key is not None else None
        if checked is None:
            call = planning.functional_arguments(dims, x.shape, x.dtype, w.shape, stride, padding, output_padding,
                                                 groups, dilation, layout, activation, out_dtype, out)
            act_params = planning.params_array(call, activation_params, "activation_params")
            act_params.flags.writeable = False   # (every plan of these arguments shares it)
            checked = call, act_params
            if key is not None:
                if len(_CALLS) >= _CALLS_MAX:
                    _CALLS.clear()
                _CALLS[call_key] = checked
        call, act_params = checked
        conv, n, _, shape, kind = planning.functional_geometry(call, x.shape, w.shape)
        dst_dtypes = (BFLOAT16, UINT16) if call.dst_type == DataType.BFLOAT16 else (_FLOAT32,)
        if kind == "empty":   # (no geometry: the weights and bias are checked against dst_c at each call)
            entry = (None, call.dst_c, shape, dst_dtypes)
            if n == 0 and len(x.shape) == dims + 2:   # an empty batch: the geometry of a batch of one, so that its
                one, _, _, _, one_kind = planning.functional_geometry(call, (1, *x.shape[1:]), w.shape)
                if one_kind == "run":   # arguments are checked as that batch's (the plan's size now, the weights
                    entry = (_new_geometry(_plan(1, one, 0)), act_params, shape, dst_dtypes)   # at each call)
        else:
            planned = _plan(n, conv, 0)
            if kind == "bias":   # the zero source and weights of a 1x1 deconvolution give act(bias)
                if out is not None:
                    out = check_out(out, shape, dst_dtypes, _inputs(x, bias))
                geo = _new_geometry(planned)
                w = np.zeros(planned.weight_shape, np.float32)
                x = np.zeros(planned.src_shape, np.float32)
                weights = _new_weights(geo, w, bias, act_params, threads, False)
                result = _run(geo, weights, x, None, out.reshape(planned.dst_shape) if out is not None else None,
                              threads, cache.name)
                return out if out is not None else result.reshape(shape)
            entry = (_new_geometry(planned), act_params, shape, dst_dtypes)
        if key is not None:
            cache.put(key, entry)
    geometry, prm, shape, dst_dtypes = entry
    if out is not None and not (
            cnp.PyArray_Check(out) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x) and
            is_output(out, dst_dtypes[0], dst_dtypes[len(dst_dtypes) - 1], cnp.PyArray_SIZE(<cnp.ndarray>out)) and
            out.shape == shape and not overlaps(out, x) and
            not (cnp.PyArray_Check(bias) and overlaps(out, bias))):
        out = check_out(out, shape, dst_dtypes, _inputs(x, bias))   # raises the message
    if geometry is None:   # an empty output: the right shape, no kernel
        planning.check_without_geometry(w, bias, prm)
        return out if out is not None else np.empty(shape, dst_dtypes[0])
    geo = <_Geometry>geometry
    weights = _new_weights(geo, w, bias, prm, threads, False)
    if cnp.PyArray_SIZE(<cnp.ndarray>x) == 0:   # an empty batch: its weights and bias checked, nothing to compute
        return out if out is not None else np.empty(shape, dst_dtypes[0])
    result = _run(geo, weights, np.ascontiguousarray(x), None,
                  out if out is not None else new_like(geo.dst_dtype, shape), threads, cache.name)
    return result


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     layout="NCHW", activation="identity", activation_params=None, out_dtype=None, out=None,
                     n_threads=None):
    """Transposed 2-D convolution with PyTorch's ``conv_transpose2d`` arguments, BF16 inputs, FP32 sums.

    ``out = act(bias + conv_transpose(bf16(x), bf16(weight)))``; see `Deconvolution16b`. The plan of a
    geometry is cached (``synet.plan_cache_info()``); the weights are rounded and packed on every call.

    Parameters
    ----------
    x : array_like
        NCHW [N, C_in, H, W] (or [C_in, H, W]); with ``layout="NHWC"`` [N, H, W, C_in] (or [H, W, C_in]).
        float32 or bfloat16 (ml_dtypes, or uint16 raw bits); other reals are rounded to bfloat16 once, from float64.
        N may be 0 (an empty result).
    weight : array_like
        NCHW: [C_in, C_out/groups, kH, kW] (PyTorch's); NHWC: [C_in, kH, kW, C_out/groups].
    bias : array_like of C_out, optional
    stride, dilation : int or (sH, sW)
    padding : int, (pH, pW) or (top, left, bottom, right)
        Rows/columns removed from each border of the full output.
    output_padding : int or (oH, oW)
        Rows/columns added at the bottom/right, each < max(stride, dilation) of its axis.
    groups : int
    layout : {"NCHW", "NHWC"}
    activation : Activation or name
        One of the 11 of ``synet.Activation`` (default identity).
    activation_params : sequence of float, optional
        Its parameters; the defaults when None (PRELU: C_out slopes).
    out_dtype : float32 or bfloat16, optional
        Default: out's dtype if given, else bfloat16 for a bfloat16 x, else float32.
    out : ndarray, optional
        C-contiguous, the output shape; float32, ml_dtypes.bfloat16 or uint16 (raw bits).
    n_threads : int, optional

    Returns
    -------
    ndarray
        ``H_out = (H − 1)·sH − top − bottom + dH·(kH − 1) + oH + 1`` (likewise W).

    Examples
    --------
    >>> y = conv_transpose2d(np.ones((1, 2, 2, 2), np.float32), np.ones((2, 1, 3, 3), np.float32), stride=2,
    ...                      padding=1)
    >>> y[0, 0]
    array([[2., 4., 2.],
           [4., 8., 4.],
           [2., 4., 2.]], dtype=float32)
    """
    return _conv_transpose(2, x, weight, bias, stride, padding, output_padding, groups, dilation, layout,
                           activation, activation_params, out_dtype, out, n_threads)


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     layout="NCL", activation="identity", activation_params=None, out_dtype=None, out=None,
                     n_threads=None):
    """Transposed 1-D convolution with PyTorch's ``conv_transpose1d`` arguments, BF16 inputs, FP32 sums.

    ``out = act(bias + conv_transpose(bf16(x), bf16(weight)))``: the 2-D kernels with height 1 (the
    arrays are used as they are, no copy). Plans are cached like `conv_transpose2d`'s.

    Parameters
    ----------
    x : array_like
        NCL [N, C_in, L] (or [C_in, L]); with ``layout="NLC"`` [N, L, C_in] (or [L, C_in]).
        float32 or bfloat16 (ml_dtypes, or uint16 raw bits); other reals are rounded to bfloat16 once, from float64.
    weight : array_like
        NCL: [C_in, C_out/groups, kL] (PyTorch's); NLC: [C_in, kL, C_out/groups].
    bias : array_like of C_out, optional
    stride, dilation, output_padding : int or (int,)
    padding : int, (p,) or (begin, end)
    groups : int
    layout : {"NCL", "NLC"}
    activation : Activation or name
        One of the 11 of ``synet.Activation`` (default identity).
    activation_params : sequence of float, optional
        Its parameters; the defaults when None (PRELU: C_out slopes).
    out_dtype : float32 or bfloat16, optional
    out : ndarray, optional
    n_threads : int, optional

    Returns
    -------
    ndarray
        ``L_out = (L − 1)·s − begin − end + d·(k − 1) + output_padding + 1``.

    Examples
    --------
    >>> conv_transpose1d(np.ones((1, 2, 3), np.float32), np.ones((2, 1, 2), np.float32), stride=2)
    array([[[2., 2., 2., 2., 2., 2.]]], dtype=float32)
    """
    return _conv_transpose(1, x, weight, bias, stride, padding, output_padding, groups, dilation, layout,
                           activation, activation_params, out_dtype, out, n_threads)


def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     layout="NCDHW", activation="identity", activation_params=None, out_dtype=None, out=None,
                     n_threads=None):
    """Transposed 3-D convolution with PyTorch's ``conv_transpose3d`` arguments, BF16 inputs, FP32 sums.

    ``out = act(bias + conv_transpose(bf16(x), bf16(weight)))``; see `Deconvolution3d16b`. Plans are
    cached like `conv_transpose2d`'s.

    Parameters
    ----------
    x : array_like
        NCDHW [N, C_in, D, H, W] (or [C_in, D, H, W]); with ``layout="NDHWC"`` [N, D, H, W, C_in].
        float32 or bfloat16 (ml_dtypes, or uint16 raw bits); other reals are rounded to bfloat16 once, from float64.
    weight : array_like
        NCDHW: [C_in, C_out/groups, kD, kH, kW] (PyTorch's); NDHWC: [C_in, kD, kH, kW, C_out/groups].
    bias : array_like of C_out, optional
    stride, dilation, output_padding : int or (d, h, w)
    padding : int, (d, h, w) or (front, top, left, back, bottom, right)
    groups : int
    layout : {"NCDHW", "NDHWC"}
    activation : Activation or name
        One of the 11 of ``synet.Activation`` (default identity).
    activation_params : sequence of float, optional
        Its parameters; the defaults when None (PRELU: C_out slopes).
    out_dtype : float32 or bfloat16, optional
    out : ndarray, optional
    n_threads : int, optional

    Returns
    -------
    ndarray
        Each of D, H, W: ``(size − 1)·s − begin − end + d·(k − 1) + output_padding + 1``.

    Examples
    --------
    >>> conv_transpose3d(np.ones((1, 2, 1, 1, 1), np.float32), np.ones((2, 3, 2, 2, 2), np.float32)).shape
    (1, 3, 2, 2, 2)
    """
    return _conv_transpose(3, x, weight, bias, stride, padding, output_padding, groups, dilation, layout,
                           activation, activation_params, out_dtype, out, n_threads)
