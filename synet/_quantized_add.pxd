# cython: language_level=3
"""Public C-level API of QuantizedAdd: ``from synet._quantized_add cimport ...``.

A `QuantizedAddPlan` is everything one quantized add needs: the dequantisation and
quantisation constants, the activation, the kernel chosen and the broadcast walk. Take the
prepared plan of a Python-made context with ``(<QuantizedAdd>context).plan()`` and run it with
`quantized_add_run` inside ``with nogil``: the same bits as ``context.forward``. The plan points
into the context's arrays (activation parameters, broadcast table, lookup table): keep the
context alive and do not re-init or clear it while the plan runs.
"""

from libc.stdint cimport uint8_t

from synet.status cimport SynetStatus


ctypedef struct QuantizedAddPlan:
    int a_type, b_type, dst_type   # DataType values: FLOAT32 = 0 or UINT8 = 3
    # u8 operand: x' = x * scale + offset in float64 (x * scale is exact there); with
    # float_values, float32(x - zero) * (fa_scale + fa_scale_low) and a float32 sum
    double a_scale, a_offset, b_scale, b_offset
    int a_zero, b_zero
    bint float_values
    float fa_scale, fa_scale_low, fb_scale, fb_scale_low
    # u8 output: q = fma(value * q_pre, q_inv, q_zero), clamped to [0, 255], rounded half to even
    float q_pre, q_inv, q_zero
    # folded u8 + u8 -> u8 (mode 1): q = fma(a, ka, fma(b, kb, kc)) clamped to [lo, 255]
    float ka, kb, kc, lo
    int act                        # synet.activations ACT_* value
    int mode                       # 0 generic, 1 folded, 2 lookup
    const float* act_params        # the activation's parameters (PRELU: slopes)
    Py_ssize_t prelu_inner, prelu_channels
    const uint8_t* lut             # mode 2: 65536 (+ 64 padding) bytes, dst of (a << 8) | b
    # geometry: `size` outputs in rows of `inner`; row r's operand offsets unravel r over
    # `rank` outer dimensions; a_scalar / b_scalar: that operand is constant along a row
    Py_ssize_t size, inner, rank
    const Py_ssize_t* outer_shape
    const Py_ssize_t* a_strides
    const Py_ssize_t* b_strides
    bint a_scalar, b_scalar


cdef SynetStatus quantized_add_run(const QuantizedAddPlan* plan, const void* a, const void* b, void* dst,
                                   int n_threads) noexcept nogil
    # dst = Quantize(Activate(a' + b')) over plan.size outputs; a, b, dst hold the plan's types.
    # SYNET_VALUE_ERROR: a NULL plan or pointer, bad types, mode or geometry;
    # SYNET_NOT_READY: a lookup plan without its table.


cdef class QuantizedAdd:
    cdef QuantizedAddPlan _plan
    cdef tuple _key                 # init's arguments, normalised
    cdef tuple _a_dtypes, _b_dtypes, _dst_dtypes
    cdef Py_ssize_t _a_size, _b_size
    cdef tuple _out_shape
    cdef object _act_params         # float32 array the plan points into
    cdef object _table              # intp [3, rank]: outer shape, a strides, b strides
    cdef object _lut                # uint8 lookup table, or None

    cdef QuantizedAddPlan plan(self) except *
