# cython: language_level=3
"""Private: Cython's view of the C sources in synet/src/ (their headers are the reference)."""

from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t


cdef extern from "common.h" nogil:
    void synet_barrier()
    enum:
        SYNET_OK
        SYNET_VALUE_ERROR
        SYNET_INDEX_ERROR
        SYNET_NOT_READY
    enum:
        SYNET_MAX_THREADS
    enum:
        SYNET_LEVEL_BASELINE
        SYNET_LEVEL_AVX2
        SYNET_LEVEL_AVX512
        SYNET_LEVEL_AVX512_BF16
        SYNET_LEVEL_AMX
        SYNET_LEVEL_COUNT


cdef extern from "cpu.h" nogil:
    int synet_cpu_level()
    int synet_amx_permission()
    int synet_cpu_bf16_dot_fast()
    int synet_cpu_vector_gather_fast()


cdef extern from "activations.h" nogil:
    enum:
        SYNET_ACT_IDENTITY
        SYNET_ACT_RELU
        SYNET_ACT_PRELU
        SYNET_ACT_COUNT


cdef extern from "bf16.h" nogil:
    ctypedef struct synet_bf16_kernels:
        const char* level
        void (*round_f32)(const uint32_t* src, void* dst, Py_ssize_t n, Py_ssize_t avail, int truncate, int wide,
                          int stream) noexcept nogil
        void (*round_f64)(const double* src, void* dst, Py_ssize_t n, int truncate, int wide) noexcept nogil
        void (*widen)(const uint16_t* src, uint32_t* dst, Py_ssize_t n, Py_ssize_t avail, int stream) noexcept nogil
    const synet_bf16_kernels* synet_bf16_kernels_at(int level)


cdef extern from "peak.h" nogil:
    ctypedef struct synet_peak_kernels:
        const char* level
        double (*fp32_fma)(int64_t iterations) noexcept nogil
        double (*bf16_dot)(int64_t iterations) noexcept nogil
        double (*amx_bf16)(int64_t iterations) noexcept nogil
    const synet_peak_kernels* synet_peak_kernels_at(int level)


cdef extern from "gather.h" nogil:
    ctypedef struct synet_gather_job:
        const void* src
        const void* idx
        void* dst
        Py_ssize_t outer, src_count, inner, idx_count, period
        int elem_size, index_size, offsets, vector_gather
        Py_ssize_t ntasks, tasks_per_outer, slices_per_task, rows_per_task, nstrips
        int strips, whole_slices, prefetch_next
    ctypedef struct synet_gather_kernels:
        const char* level
        void (*prepare)(synet_gather_job* job) noexcept nogil
        Py_ssize_t (*task)(const synet_gather_job* job, Py_ssize_t t) noexcept nogil
    const synet_gather_kernels* synet_gather_kernels_at(int level)


cdef extern from "quantized_add.h" nogil:
    enum:
        SYNET_QADD_F32
        SYNET_QADD_I8
        SYNET_QADD_U8
        SYNET_QADD_GENERIC
        SYNET_QADD_FOLDED
        SYNET_QADD_LOOKUP
    ctypedef struct synet_qadd_consts:
        double a_scale, b_scale
        float fa_scale, fa_scale_low, fb_scale, fb_scale_low
        int a_zero, b_zero
        float q_pre, q_inv, q_zero
        float ka, kb, kc, lo
        int folded_in_doubles
    ctypedef struct synet_qadd_plan:
        int a_type, b_type, dst_type, mode, float_values, act
        const float* act_params
        Py_ssize_t prelu_inner, prelu_channels
        const uint8_t* lut
        const uint8_t* line
        int line_wa, line_wb
        const synet_qadd_consts* consts
        Py_ssize_t nchan, chan_inner
        Py_ssize_t size, inner, rank
        const Py_ssize_t* outer_shape
        const Py_ssize_t* a_strides
        const Py_ssize_t* b_strides
        int a_scalar, b_scalar, stream
    ctypedef struct synet_qadd_kernels:
        const char* level
        void (*tile)(const synet_qadd_plan* plan, const void* a, const void* b, void* dst, Py_ssize_t start,
                     Py_ssize_t stop) noexcept nogil
    const synet_qadd_kernels* synet_qadd_kernels_at(int level)


cdef extern from "deconvolution.h" nogil:
    enum:
        SYNET_DECONV_GEMM
        SYNET_DECONV_DEPTHWISE
        SYNET_MICRO_FP32
        SYNET_MICRO_BF16
        SYNET_MICRO_AMX
        SYNET_PLANAR_OUT_MAX
        SYNET_LANES_STRIP
        SYNET_LANES_TAPS
    ctypedef struct synet_deconv_plan:
        int impl, micro, wide_weights, lanes, src_bf16, dst_bf16, nhwc, direct, act
        Py_ssize_t buf_size
        Py_ssize_t batch, src_c, src_d, src_h, src_w, dst_c, dst_d, dst_h, dst_w, group, cg_in, cg_out
        Py_ssize_t kernel_z, kernel_y, kernel_x, dilation_z, dilation_y, dilation_x, stride_z, stride_y, stride_x
        Py_ssize_t pad_front, pad_top, pad_left
        Py_ssize_t padded_d, padded_h, padded_w, pad_low_z, pad_low_y, pad_low_x, cg_padded, pixel_stride
        Py_ssize_t padded_image
        Py_ssize_t kpairs, block_width, weight_strip, nblocks, nrows, nunits, ntasks, dst_image, pad_rows
        Py_ssize_t row_run
        int stream
        const int64_t* phase_taps
        const int64_t* phase_tap0
        const int64_t* tap_offsets
        const int64_t* tap_kz
        const int64_t* tap_ky
        const int64_t* tap_kx
        const int64_t* col_first
        const int64_t* col_count
        Py_ssize_t amx_runs
        const int64_t* unit_s0
        const int64_t* unit_s1
        const int64_t* unit_ob
        const int64_t* run_unit0
        const int64_t* seg_aoff
        const int64_t* seg_doff
        const int64_t* seg_m
        const int64_t* seg_phase
        const float* bias
        const float* params
        const uint16_t* weights
        const int64_t* weight_offsets
        const float* depthwise
        int exact_borders
        Py_ssize_t nborder_x
        const int64_t* border_z
        const int64_t* border_y
        const int64_t* border_x
        const float* exact_weights
        int weight_exp_lo, weight_exp_hi
    ctypedef struct synet_deconv_weights:
        const float* w
        Py_ssize_t ci_step, co_step, kz_step, ky_step, kx_step
    ctypedef struct synet_deconv_kernels:
        const char* level
        int micro_bf16, micro_amx, fp32_strip, fp32_unit
        void (*pad_row)(const synet_deconv_plan* p, const void* src, void* image, Py_ssize_t r) noexcept nogil
        void (*task)(const synet_deconv_plan* p, const void* src, void* image, void* dst, Py_ssize_t t,
                     int* rows) noexcept nogil
        void (*amx_release)() noexcept nogil
        void (*border_task)(const synet_deconv_plan* p, const void* src, void* dst, Py_ssize_t t) noexcept nogil
        int (*pack)(const synet_deconv_plan* p, const synet_deconv_weights* w, Py_ssize_t u,
                    void* packed) noexcept nogil
    const synet_deconv_kernels* synet_deconv_kernels_at(int level)
    const synet_deconv_kernels* synet_deconv_exact_products_of(const synet_deconv_kernels* k)
    void synet_exponent_range(const void* values, Py_ssize_t n, int bf16, int* lo, int* hi)
    void synet_deconv_source_exponents(const synet_deconv_plan* p, const void* src, Py_ssize_t part,
                                       Py_ssize_t parts, int* range)
    int synet_deconv_products_exact(const synet_deconv_plan* p, const int* ranges, Py_ssize_t parts)
