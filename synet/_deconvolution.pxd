# cython: language_level=3
"""Public C-level API of Deconvolution16b: ``from synet._deconvolution cimport ...``.

A `DeconvolutionPlan` is one prepared transposed convolution: the geometry (as the kernels
see it: a 1x1 stride-1 deconvolution is one long row), the types, the implementation chosen by
``init`` and pointers to the packed weights, bias, activation parameters and task tables held by
the context. Take it from a Python-made context with ``(<Deconvolution16b>context).plan()``
(RuntimeError before ``init`` or ``set_params``) and run it with `deconvolution_run` inside
``with nogil``: the same bits as ``context.forward``, which runs the very same function. The plan
points into the context's arrays: keep the context alive and do not re-init, set_params or clear it
while the plan runs.

Scratch: `deconvolution_run` allocates nothing. When ``plan.buf_size > 0`` (the context's
``external_buffer_size()``) the caller passes ``buf`` of at least ``plan.buf_size`` bytes, any
alignment (the kernel aligns it to 64 bytes inside that size), not overlapping src or dst; a NULL
``buf`` then gives SYNET_VALUE_ERROR. With ``buf_size == 0`` ``buf`` is ignored and may be NULL.
"""

from libc.stdint cimport int64_t, uint16_t

from synet.status cimport SynetStatus


cdef enum:
    SYNET_DECONV_GEMM = 1        # PhaseGemm: implicit GEMM per output phase (packed BF16 weights)
    SYNET_DECONV_DEPTHWISE = 2   # Depthwise: FP32 multiply-adds of BF16-rounded values


ctypedef struct DeconvolutionPlan:
    int impl                     # SYNET_DECONV_GEMM or SYNET_DECONV_DEPTHWISE
    bint src_bf16, dst_bf16      # BF16 (raw bits) or FP32 src / dst
    bint nhwc                    # NHWC (else NCHW) src and dst
    bint soft                    # portable FP32 micro-kernel (else AVX-512 BF16)
    bint amx                     # PhaseGemm on AMX tiles: tasks are (unit of <= 2 segments, bw-channel block)
    bint direct                  # BF16 NHWC src read in place (no padded copy)
    int act                      # synet.activations ACT_* value
    Py_ssize_t buf_size          # bytes of scratch `buf` must hold (0: none)
    Py_ssize_t batch, src_c, src_h, src_w, dst_c, dst_h, dst_w, group, cg_in, cg_out
    Py_ssize_t sy, sx, pt, pl    # stride, top / left pad
    Py_ssize_t hp, wp, ply, plx, cgp, cpt, a_img   # the padded source image
    Py_ssize_t kpairs, nblocks, nrows, ntasks
    Py_ssize_t bw, nunits, dst_img
    const float* bias            # [dst_c]
    const float* params          # activation parameters (PRELU: dst_c slopes)
    const uint16_t* weights      # PhaseGemm: packed BF16 weights
    const float* wdw             # Depthwise: FP32 weights by (channel, tap) or (tap, channel)
    const int64_t* wofs          # PhaseGemm: [group][phase][block] offsets into weights
    const int64_t* ph_ntaps      # [phase]
    const int64_t* ph_tap0       # [phase]: first tap in toffs / tap index tables
    const int64_t* toffs         # tap offsets in the padded source (elements)
    const int64_t* row_ry        # [nrows]: phase row of each task row
    const int64_t* row_j
    const int64_t* col_i0        # [sx]: first phase column
    const int64_t* col_n         # [sx]: phase columns
    const int64_t* unit_s0       # AMX [nunits]: first segment
    const int64_t* unit_s1       # AMX [nunits]: second segment (full ones only) or -1
    const int64_t* seg_aoff      # AMX [segments]: offset of the first pixel in the padded source image
    const int64_t* seg_doff      # AMX [segments]: offset of the first pixel in the dst image (channel 0)
    const int64_t* seg_m         # AMX [segments]: pixels (<= 16)
    const int64_t* seg_phase     # AMX [segments]
    # Exact borders. A border output (some tap of its phase falls outside src, into the zero padding the
    # kernels read) gets NaN from a NaN or inf weight times that zero. When the BF16-rounded weights hold
    # a non-finite value and the geometry has border outputs, set_params sets exact_borders and wexact;
    # deconvolution_run then recomputes every border output over its in-range taps only (PyTorch's sum).
    # With finite weights exact_borders is 0 and wexact NULL: 0·w = 0 makes the fast pass exact.
    bint exact_borders           # run the border pass after the main one
    Py_ssize_t kernel_y, kernel_x, dilation_y, dilation_x   # as the kernels see the geometry
    Py_ssize_t nborder_x         # entries of border_x
    const int64_t* border_y      # [dst_h]: 1 for a border row (every output of it is a border output)
    const int64_t* border_x      # [nborder_x]: the border columns (ascending)
    const float* wexact          # exact_borders: BF16-rounded FP32 weights [group][kernel_y][kernel_x][cg_in][cg_out]


cdef SynetStatus deconvolution_run(const DeconvolutionPlan* plan, const void* src, void* buf, void* dst,
                                   int n_threads) noexcept nogil
    # dst = act(bias + conv_transpose(bf16(src), bf16(weight))) for plan.batch images; src and dst
    # C-contiguous in the plan's layout and types (BF16 as raw uint16 bits).
    # SYNET_VALUE_ERROR: a NULL plan, src or dst, a NULL buf when plan.buf_size > 0, a bad
    # implementation, activation, size or table, or a kernel this CPU / process cannot run;
    # SYNET_NOT_READY: no weights, bias or activation parameters (set_params not called), or
    # exact_borders without wexact.


cdef class Deconvolution16b:
    cdef object _conv
    cdef tuple _key                 # init's arguments, normalised
    cdef Py_ssize_t _batch
    cdef object _compat
    cdef bint _ready                # set_params has installed weights
    cdef DeconvolutionPlan _plan    # pointers into _keep and the set_params arrays
    cdef object _keep               # arrays the plan points into
    cdef object _weights, _bias, _params, _wofs
    cdef object _wexact             # exact_borders: the FP32 weights of the border pass, else None
    cdef object _src_dtypes, _dst_dtypes, _dst_dtype, _src_shape, _dst_shape
    cdef Py_ssize_t _src_size, _dst_size
    cdef object _lock
    cdef object _tap_k

    cdef DeconvolutionPlan plan(self) except *
    cdef _require_init(self)
    cdef _clear(self)
