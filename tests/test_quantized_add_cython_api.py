"""A downstream Cython extension runs a Python-prepared QuantizedAdd inside `with nogil`."""

import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import synet

SOURCE = textwrap.dedent('''
    # cython: boundscheck=False, wraparound=False
    from synet.status cimport SynetStatus
    from synet._quantized_add cimport QuantizedAdd, QuantizedAddPlan, quantized_add_run
    from synet.activations cimport activate, ACT_HSWISH

    def run(QuantizedAdd context, const unsigned char[::1] a, const unsigned char[::1] b,
            unsigned char[::1] dst, int n_threads=1):
        cdef QuantizedAddPlan plan = context.plan()
        cdef SynetStatus status
        with nogil:
            status = quantized_add_run(&plan, &a[0], &b[0], &dst[0], n_threads)
        return status

    def run_f32(QuantizedAdd context, const float[::1] a, const unsigned char[::1] b, float[::1] dst):
        cdef QuantizedAddPlan plan = context.plan()
        cdef SynetStatus status
        with nogil:
            status = quantized_add_run(&plan, &a[0], &b[0], &dst[0], 2)
        return status

    def bad_calls(QuantizedAdd context):
        cdef QuantizedAddPlan plan = context.plan()
        cdef unsigned char x = 0
        null_plan = quantized_add_run(NULL, &x, &x, &x, 1)
        null_ptr = quantized_add_run(&plan, NULL, &x, &x, 1)
        plan.a_type = 1
        bad_type = quantized_add_run(&plan, &x, &x, &x, 1)
        return null_plan, null_ptr, bad_type

    def hswish(float x):
        cdef float params[2]
        params[0] = 3.0
        params[1] = 1.0 / 6.0
        return activate(x, ACT_HSWISH, params, 0)
''')


@pytest.fixture(scope="module")
def downstream(tmp_path_factory):
    pytest.importorskip("Cython")
    build = tmp_path_factory.mktemp("qadd_downstream")
    (build / "qadd_downstream.pyx").write_text(SOURCE)
    (build / "setup.py").write_text(textwrap.dedent('''
        from Cython.Build import cythonize
        from setuptools import Extension, setup
        import synet
        ext = Extension("qadd_downstream", ["qadd_downstream.pyx"], include_dirs=[synet.get_include()],
                        extra_compile_args=["-O2"])
        setup(name="qadd-downstream", ext_modules=cythonize([ext], language_level=3))
    '''))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=build,
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sys.path.insert(0, str(build))
    try:
        yield importlib.import_module("qadd_downstream")
    finally:
        sys.path.remove(str(build))


def test_pxd_files_are_shipped():
    for name in ("_quantized_add.pxd", "activations.pxd", "status.pxd"):
        assert os.path.isfile(os.path.join(synet.get_include(), name)), name


@pytest.mark.parametrize("act, shapes, size", [
    ("identity", ((1, 16, 40, 40), (1, 16, 40, 40)), None),   # folded
    ("relu", ((1, 16, 40, 40), (1, 16, 1, 1)), None),         # folded, per-channel
    ("gelu", ((4, 64, 32, 32), (4, 64, 32, 32)), None),        # lookup
    ("hswish", ((2, 8, 9, 9), (9,)), None),                    # generic, broadcast
])
def test_plan_from_python_context_same_bits(downstream, act, shapes, size):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, shapes[0], dtype=np.uint8)
    b = rng.integers(0, 256, shapes[1], dtype=np.uint8)
    context = synet.QuantizedAdd(a.shape, "u8", 0.01, 47, b.shape, "u8", 0.02, 30, act, None, "u8", 0.015, 38)
    expected = context.forward(a, b)
    dst = np.zeros_like(expected)
    assert downstream.run(context, a.ravel(), b.ravel(), dst.ravel(), 2) == 0
    assert np.array_equal(dst, expected)


def test_plan_float_operand(downstream):
    rng = np.random.default_rng(4)
    a = rng.standard_normal(1000).astype(np.float32)
    b = rng.integers(0, 256, 1000, dtype=np.uint8)
    context = synet.QuantizedAdd([1000], "f32", None, None, [1000], "u8", 0.02, 30, "elu", None, "f32", None, None)
    dst = np.zeros(1000, np.float32)
    assert downstream.run_f32(context, a, b, dst) == 0
    assert np.array_equal(dst, context.forward(a, b))


def test_status_codes_and_not_ready(downstream):
    context = synet.QuantizedAdd([4], "u8", 0.1, 0, [4], "u8", 0.1, 0, "relu", None, "u8", 0.1, 0)
    assert downstream.bad_calls(context) == (1, 1, 1)  # SYNET_VALUE_ERROR
    with pytest.raises(RuntimeError, match="init"):
        downstream.run(synet.QuantizedAdd(), np.zeros(1, np.uint8), np.zeros(1, np.uint8), np.zeros(1, np.uint8))


def test_activation_inline_function(downstream):
    for x in (-4.0, -1.0, 0.5, 2.0, 5.0):
        expected = np.float32(max(min(x, 3.0) + 3.0, 0.0)) * np.float32(1 / 6) * np.float32(x)
        assert downstream.hswish(x) == pytest.approx(float(expected), rel=1e-6)
