# cython: language_level=3
"""Private: argument checks and allocation of the per-call fast paths, on the NumPy C API.

Each check answers yes or no without raising; on a no, the caller runs the Python-level check of
synet/_arrays.py, which raises the error with its message. So the fast path costs a few pointer
compares, and the messages live in one place.
"""

cimport numpy as cnp
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF

cdef extern from "numpy/arrayobject.h":
    PyTypeObject PyArray_Type
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.PyArray_Descr* descr, int nd, cnp.npy_intp* dims,
                                cnp.npy_intp* strides, void* data, int flags, PyObject* obj)
    int PyArray_SetBaseObject(cnp.ndarray arr, PyObject* obj) except -1   # steals the reference to obj


cdef enum:
    HUGE_OUTPUT_MIN = 32 << 20   # bytes (synet._arrays.HUGE_OUTPUT_MIN)
    ALIGNED_OUTPUT_MIN = 16 << 10   # bytes from which an output starts on a cache line (see new_array)
    CACHE_LINE = 64


cdef inline bint is_operand(object x, object dtype, object alt, Py_ssize_t size) noexcept:
    """x is an ndarray, C-contiguous, of dtype `dtype` or `alt` (the same descr objects), `size` elements."""
    if not cnp.PyArray_Check(x):
        return False
    cdef cnp.ndarray a = <cnp.ndarray>x
    cdef object descr = <object>cnp.PyArray_DESCR(a)
    return (descr is dtype or descr is alt) and cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_SIZE(a) == size


cdef inline bint is_output(object x, object dtype, object alt, Py_ssize_t size) noexcept:
    """is_operand, and writeable."""
    return is_operand(x, dtype, alt, size) and cnp.PyArray_ISWRITEABLE(<cnp.ndarray>x)


cdef inline bint same_shape(object x, object y) noexcept:
    """Two ndarrays of the same shape."""
    cdef int i, ndim = cnp.PyArray_NDIM(<cnp.ndarray>x)
    if ndim != cnp.PyArray_NDIM(<cnp.ndarray>y):
        return False
    for i in range(ndim):
        if cnp.PyArray_DIMS(<cnp.ndarray>x)[i] != cnp.PyArray_DIMS(<cnp.ndarray>y)[i]:
            return False
    return True


cdef inline bint overlaps(object x, object y) noexcept:
    """Whether two C-contiguous arrays share a byte (None never does)."""
    if x is None or y is None:
        return False
    cdef char* a = <char*>cnp.PyArray_DATA(<cnp.ndarray>x)
    cdef char* b = <char*>cnp.PyArray_DATA(<cnp.ndarray>y)
    cdef Py_ssize_t na = cnp.PyArray_NBYTES(<cnp.ndarray>x), nb = cnp.PyArray_NBYTES(<cnp.ndarray>y)
    return na > 0 and nb > 0 and a < b + nb and b < a + na


cdef inline object new_huge(object dtype, int ndim, cnp.npy_intp* dims):
    """synet._arrays.empty_huge(dtype, dims) when that is HUGE_OUTPUT_MIN bytes or more, else None."""
    cdef double nbytes = (<cnp.dtype>dtype).itemsize
    cdef int i
    for i in range(ndim):
        nbytes *= dims[i]
    if nbytes < HUGE_OUTPUT_MIN:
        return None
    from synet._arrays import empty_huge
    return empty_huge(dtype, tuple([dims[i] for i in range(ndim)]))


cdef inline cnp.ndarray new_array(object dtype, int ndim, cnp.npy_intp* dims):
    """np.empty(dims, dtype) on the C API (any dtype, bfloat16 included), starting on a 64-byte cache line
    from ALIGNED_OUTPUT_MIN bytes on (its memory is its base, a uint8 array): NumPy's own buffers start 16
    bytes into a line, so a kernel's rows of whole lines straddle two, written by two tasks (NHWC
    deconvolution outputs 4-10 % slower). From HUGE_OUTPUT_MIN bytes on, synet._arrays.empty_huge (2 MiB
    aligned, transparent huge pages)."""
    cdef cnp.npy_intp count = 1, nbytes
    cdef int i
    for i in range(ndim):
        count *= dims[i]
    if count >= HUGE_OUTPUT_MIN // 8:   # (no dtype is wider than 8 bytes: below this, none is that large)
        huge = new_huge(dtype, ndim, dims)
        if huge is not None:
            return <cnp.ndarray>huge
    nbytes = count * (<cnp.dtype>dtype).itemsize
    if nbytes < ALIGNED_OUTPUT_MIN:
        Py_INCREF(dtype)  # PyArray_NewFromDescr steals a reference
        return <cnp.ndarray>PyArray_NewFromDescr(&PyArray_Type, <cnp.PyArray_Descr*>dtype, ndim, dims, NULL, NULL, 0,
                                                 NULL)
    cdef cnp.npy_intp raw_size = nbytes + CACHE_LINE
    cdef cnp.ndarray raw = cnp.PyArray_SimpleNew(1, &raw_size, cnp.NPY_UINT8)
    cdef char* data = <char*>cnp.PyArray_DATA(raw)
    data += (CACHE_LINE - <size_t>data % CACHE_LINE) % CACHE_LINE
    Py_INCREF(dtype)
    cdef cnp.ndarray out = <cnp.ndarray>PyArray_NewFromDescr(&PyArray_Type, <cnp.PyArray_Descr*>dtype, ndim, dims,
                                                             NULL, data, cnp.NPY_ARRAY_CARRAY, NULL)
    Py_INCREF(raw)    # PyArray_SetBaseObject steals it
    PyArray_SetBaseObject(out, <PyObject*>raw)
    return out


cdef inline cnp.ndarray new_like(object dtype, tuple shape):
    """np.empty(shape, dtype) (NumPy allows at most 64 dimensions)."""
    cdef cnp.npy_intp dims[64]
    cdef int i, ndim = len(shape)
    for i in range(ndim):
        dims[i] = shape[i]
    return new_array(dtype, ndim, dims)


cdef inline void* data_of(object x) noexcept:
    return cnp.PyArray_DATA(<cnp.ndarray>x)


cdef inline object key_part(object value, object slow):
    """A plan-cache key of one argument: ints, strings, None and tuples of ints as they are (no other
    value equals them: True, 1.0 and [1] are keyed by `slow`, synet._cache.key_of)."""
    cdef type t = type(value)
    cdef Py_ssize_t i
    if t is int or t is str or value is None:
        return value
    if t is tuple:
        for i in range(len(<tuple>value)):
            if type((<tuple>value)[i]) is not int:
                return slow(value)
        return value
    return slow(value)


cdef inline bint is_float32_array(object x, Py_ssize_t size) noexcept:
    """x is an aligned C-contiguous float32 ndarray of `size` elements in the machine's byte order (a
    big-endian float32 has the same type number)."""
    return cnp.PyArray_Check(x) and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_FLOAT32 and \
        cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x) and \
        cnp.PyArray_ISALIGNED(<cnp.ndarray>x) and cnp.PyArray_SIZE(<cnp.ndarray>x) == size


cdef inline object aligned(object array):
    """`array` (an ndarray), or where its data lies off its element size (np.frombuffer at an odd offset) a
    copy in its layout: the kernels load and store whole elements (NumPy's own loops copy such arrays too)."""
    if cnp.PyArray_ISALIGNED(<cnp.ndarray>array):
        return array
    return cnp.PyArray_NewCopy(<cnp.ndarray>array, cnp.NPY_KEEPORDER)
