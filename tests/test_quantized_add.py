"""QuantizedAdd against a float64 NumPy evaluation of SPEC section 5 (tests/reference.py), independent of synet."""

import copy
import os
import pickle
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from reference import DEFAULTS, RANGES, activate, laid_out
from reference import check_add as check

import synet
from synet import Activation, QuantizedAdd, quantized_add
from synet import _quantized_add_plan as planning

ACTIVATIONS = list(Activation)
U8, I8, F32 = np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32)
TYPES = [U8, I8, F32]
QTYPES = (U8, I8)
RANGE = RANGES  # quantised output range (and zero-point range)
COMBOS = [(a, b, d) for a in TYPES for b in TYPES for d in TYPES]  # all 27
SEED_Q = dict(a_scale=0.010, a_zero=47, b_scale=0.020, b_zero=30, dst_scale=0.015, dst_zero=38)


def combo_id(combo):
    return "+".join(t.name for t in combo[:2]) + "->" + combo[2].name


# ---------------------------------------------------------------------------------------------
# The reference: tests/reference.py (add_value, check_add, ...)


def default_params(act, channels):
    """SPEC §2's defaults, and PRELU slopes for `channels` channels."""
    if act == Activation.PRELU:
        return list(np.linspace(-0.5, 1.5, channels))
    return DEFAULTS.get(act)


def make(dtype, shape, rng, spread=3.0):
    dtype = np.dtype(dtype)
    if dtype in QTYPES:
        lo, hi = RANGE[dtype]
        return rng.integers(lo, hi + 1, shape).astype(dtype)
    return (rng.standard_normal(shape) * spread).astype(np.float32)


def context(a, b, dst_dtype, q, act=Activation.IDENTITY, params=None, axis=1):
    return QuantizedAdd(a.shape, a.dtype, q["a_scale"], q["a_zero"], b.shape, b.dtype, q["b_scale"],
                        q["b_zero"], act, params, dst_dtype, q["dst_scale"], q["dst_zero"], axis=axis)


def kernel_of(add):
    return add.kernel.split()[0]


# ---------------------------------------------------------------------------------------------
# The seed, all combinations, all activations


def test_seed_example():
    a = np.full(64, 50, np.uint8)
    b = np.full(64, 80, np.uint8)
    add = QuantizedAdd([64], "8u", 0.010, 47, [64], "8u", 0.020, 30, "identity", None, "8u", 0.015, 38)
    assert add.enable()
    dst = np.zeros(64, np.uint8)
    assert add.forward(a, b, dst) is dst
    assert (dst == 107).all()  # round((0.03 + 1.0) / 0.015) + 38
    add.clear()
    assert not add.enable()


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.name)
@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_combinations_and_activations(combo, act):
    a_dtype, b_dtype, d_dtype = combo
    rng = np.random.default_rng(int(act) * 8 + COMBOS.index(combo))
    shape = (2, 5, 7, 9)
    a, b = make(a_dtype, shape, rng), make(b_dtype, shape, rng)
    params = default_params(act, shape[1])
    add = context(a, b, d_dtype, SEED_Q, act, params)
    check(add.forward(a, b), a, b, SEED_Q, act, params)
    got = quantized_add(a, b, **SEED_Q, dst_dtype=d_dtype, activation=act.name.lower(), activation_params=params)
    check(got, a, b, SEED_Q, act, params)


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.name)
def test_activation_params_custom(act):
    rng = np.random.default_rng(7)
    params = {Activation.LEAKY_RELU: [0.3], Activation.RESTRICT_RANGE: [-1.0, 0.5, 99],
              Activation.PRELU: [0.25], Activation.ELU: [0.7], Activation.HSWISH: [2.0, 0.25],
              Activation.MISH: [1.0], Activation.HARD_SIGMOID: [0.2, 0.4], Activation.SWISH: [1.7]}.get(act)
    for qtype in QTYPES:
        a, b = make(qtype, (3, 4, 50), rng), make(F32, (3, 4, 50), rng)
        for dtype in TYPES:
            check(quantized_add(a, b, **SEED_Q, dst_dtype=dtype, activation=act, activation_params=params),
                  a, b, SEED_Q, act, params)
            check(quantized_add(a, a, **SEED_Q, dst_dtype=dtype, activation=act, activation_params=params),
                  a, a, SEED_Q, act, params)


def test_activation_defaults_match_spec():
    rng = np.random.default_rng(3)
    a, b = make(F32, 1000, rng), make(F32, 1000, rng)
    for act in ACTIVATIONS:
        if act == Activation.PRELU:
            continue
        got = quantized_add(a, b, dst_dtype=np.float32, activation=act)
        check(got, a, b, SEED_Q, act, default_params(act, 1))


def test_activation_names():
    a = np.array([100, 10], np.uint8)
    b = np.array([0, 0], np.uint8)
    ref = quantized_add(a, b, a_zero=50, dst_dtype="f32", activation=Activation.LEAKY_RELU)
    for name in ("leaky_relu", "LeakyRelu", "LEAKYRELU", 2):
        assert np.array_equal(quantized_add(a, b, a_zero=50, dst_dtype="f32", activation=name), ref)
    assert ref[1] == np.float32(0.01) * np.float32(-40)


# ---------------------------------------------------------------------------------------------
# Exhaustive 1-byte sweeps, exact ties, every 1-byte kernel

SWEEP_SETS = {
    U8: [
        SEED_Q,
        dict(a_scale=1 / 3, a_zero=128, b_scale=0.25, b_zero=0, dst_scale=0.1, dst_zero=0),
        dict(a_scale=0.05, a_zero=0, b_scale=0.005, b_zero=255, dst_scale=0.2, dst_zero=255),
        dict(a_scale=0.0123, a_zero=100, b_scale=0.0456, b_zero=200, dst_scale=0.0789, dst_zero=128),
    ],
    I8: [
        SEED_Q,
        dict(a_scale=1 / 3, a_zero=0, b_scale=0.25, b_zero=-128, dst_scale=0.1, dst_zero=-128),
        dict(a_scale=0.05, a_zero=-128, b_scale=0.005, b_zero=127, dst_scale=0.2, dst_zero=127),
        dict(a_scale=0.0123, a_zero=-28, b_scale=0.0456, b_zero=72, dst_scale=0.0789, dst_zero=0),
    ],
}
# zero points valid for UINT8 and INT8 alike (mixed 1-byte types)
MIXED_SETS = [SEED_Q, dict(a_scale=0.0123, a_zero=100, b_scale=0.0456, b_zero=0, dst_scale=0.0789, dst_zero=120)]


def all_pairs(repeat=1, a_dtype=U8, b_dtype=U8):
    """Every pair of bytes (as a_dtype, b_dtype), `repeat` times."""
    pairs = np.arange(65536)
    a = (pairs >> 8).astype(np.uint8).view(a_dtype)
    b = (pairs & 255).astype(np.uint8).view(b_dtype)
    return np.tile(a, repeat), np.tile(b, repeat)


@pytest.mark.parametrize("qtype", QTYPES, ids=str)
@pytest.mark.parametrize("qi", range(4))
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.HSWISH, Activation.GELU,
                                 Activation.RESTRICT_RANGE], ids=lambda a: a.name)
@pytest.mark.parametrize("repeat", [1, 3], ids=["65536", "3x65536"])
def test_exhaustive_same_type_pairs(qtype, qi, act, repeat):
    # u8 + u8 -> u8 and i8 + i8 -> i8: folded (identity, relu), lookup (large), generic (small)
    q = SWEEP_SETS[qtype][qi]
    a, b = all_pairs(repeat, qtype, qtype)
    params = default_params(act, 1)
    add = context(a, b, qtype, q, act, params)
    expected_kernel = "folded" if act in (Activation.IDENTITY, Activation.RELU) else \
        ("lookup" if repeat > 1 else "generic")
    assert kernel_of(add) == expected_kernel
    got = add.forward(a, b)
    check(got, a, b, q, act, params)
    assert add.forward(a, b, n_threads=2).tobytes() == got.tobytes()


@pytest.mark.parametrize("combo", [c for c in COMBOS if F32 not in c and len(set(c)) > 1], ids=combo_id)
@pytest.mark.parametrize("q", MIXED_SETS, ids=range(len(MIXED_SETS)))
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.GELU], ids=lambda a: a.name)
def test_exhaustive_mixed_one_byte_pairs(combo, q, act):
    # u8 + i8 -> u8 and the other mixes: generic on small outputs, lookup on large ones, the same bits
    a, b = all_pairs(1, combo[0], combo[1])
    a3, b3 = all_pairs(3, combo[0], combo[1])
    small, large = context(a, b, combo[2], q, act), context(a3, b3, combo[2], q, act)
    assert (kernel_of(small), kernel_of(large)) == ("generic", "lookup")
    got = small.forward(a, b)
    check(got, a, b, q, act)
    assert large.forward(a3, b3).tobytes() == np.tile(got, 3).tobytes()


@pytest.mark.parametrize("qtype", QTYPES, ids=str)
@pytest.mark.parametrize("qi", range(4))
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.LEAKY_RELU,
                                 Activation.RESTRICT_RANGE, Activation.ELU], ids=lambda a: a.name)
def test_exhaustive_mixed_float(qtype, qi, act):
    # float32 + 1-byte and 1-byte + float32 -> 1-byte over every pair (float32 sums where their bound allows)
    q = SWEEP_SETS[qtype][qi]
    a, b = all_pairs(1, qtype, qtype)
    fb = ((b.astype(np.float64) - 30) * 0.02).astype(np.float32)
    params = default_params(act, 1)
    for x, y in ((a, fb), (fb, a)):
        for out in QTYPES:
            qo = dict(q, dst_zero=int(np.clip(q["dst_zero"], *RANGE[out])))
            check(context(x, y, out, qo, act, params).forward(x, y), x, y, qo, act, params)


@pytest.mark.parametrize("qtype, q", [(t, q) for t in QTYPES for q in SWEEP_SETS[t]] + [
    # float32 sums, at the bound
    (U8, dict(a_scale=0.02, a_zero=0, b_scale=0.0125, b_zero=255, dst_scale=1, dst_zero=0)),
    (U8, dict(a_scale=0.02, a_zero=0, b_scale=0.0135, b_zero=255, dst_scale=1, dst_zero=0)),  # float64 sums, past it
    (I8, dict(a_scale=0.02, a_zero=-128, b_scale=0.0125, b_zero=127, dst_scale=1, dst_zero=0)),
    (I8, dict(a_scale=0.02, a_zero=127, b_scale=0.0135, b_zero=-128, dst_scale=1, dst_zero=0)),
], ids=str)
def test_exhaustive_to_f32(qtype, q):
    a, b = all_pairs(1, qtype, qtype)
    for act in (Activation.IDENTITY, Activation.RELU, Activation.RESTRICT_RANGE, Activation.ELU):
        params = default_params(act, 1)
        check(quantized_add(a, b, **q, dst_dtype=np.float32, activation=act, activation_params=params), a, b, q,
              act, params)
        fa = ((a.astype(np.float64) - 100) * 0.03).astype(np.float32)
        check(quantized_add(fa, b, **q, dst_dtype=np.float32, activation=act, activation_params=params), fa, b, q,
              act, params)


@pytest.mark.parametrize("qtype, zero, dst_zero", [(U8, 100, 64), (I8, -20, -10), (I8, 3, 0)], ids=str)
@pytest.mark.parametrize("repeat", [1, 3])
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.LEAKY_RELU])
def test_exact_ties_round_half_to_even(qtype, zero, dst_zero, repeat, act):
    # value / dst_scale = (a - zero + b - zero) / 2: every odd sum is an exact tie
    a, b = all_pairs(repeat, qtype, qtype)
    q = dict(a_scale=1.0, a_zero=zero, b_scale=1.0, b_zero=zero, dst_scale=2.0, dst_zero=dst_zero)
    params = [0.5] if act == Activation.LEAKY_RELU else None
    lo, hi = RANGE[qtype]
    got = context(a, b, qtype, q, act, params).forward(a, b)
    value = activate(a.astype(np.float64) + b - 2 * zero, act, params) / 2.0
    expected = np.clip(np.rint(value) + dst_zero, lo, hi)  # np.rint rounds half to even
    assert np.array_equal(got, expected.astype(qtype))


@pytest.mark.parametrize("qtype, q", [
    (U8, dict(a_scale=1.0, a_zero=0, b_scale=1.0, b_zero=255, dst_scale=1e-3, dst_zero=0)),
    (I8, dict(a_scale=1.0, a_zero=-128, b_scale=1.0, b_zero=127, dst_scale=1e-3, dst_zero=0)),
    # exact enough, but a_scale / dst_scale * 2**-24 (a vector kernel's constant) would be subnormal
    (U8, dict(a_scale=1e-35, a_zero=3, b_scale=0.02, b_zero=30, dst_scale=0.015, dst_zero=38)),
    (I8, dict(a_scale=0.02, a_zero=3, b_scale=1e-35, b_zero=30, dst_scale=0.015, dst_zero=38)),
], ids=str)
def test_folded_kernel_refused_when_inexact(qtype, q):
    a, b = all_pairs(1, qtype, qtype)
    add = context(a, b, qtype, q)
    assert kernel_of(add) == "generic"
    check(add.forward(a, b), a, b, q)
    a3, b3 = all_pairs(3, qtype, qtype)
    add = context(a3, b3, qtype, q)
    assert kernel_of(add) == "lookup"
    check(add.forward(a3, b3), a3, b3, q)


@pytest.mark.parametrize("qtype", QTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4097])
def test_folded_tails(qtype, n):
    rng = np.random.default_rng(n)
    a, b = make(qtype, n, rng), make(qtype, n, rng)
    for act in (Activation.IDENTITY, Activation.RELU):
        for bb in (b, b[:1], b[:1].reshape(())):
            add = context(a, bb, qtype, SEED_Q, act)
            assert kernel_of(add) == "folded"
            check(add.forward(a, bb), a, bb, SEED_Q, act)
            check(context(bb, a, qtype, SEED_Q, act).forward(bb, a), bb, a, SEED_Q, act)


@pytest.mark.parametrize("qtype, offset", [(U8, 0), (U8, 3), (I8, 5)], ids=str)
def test_folded_streaming_stores_large_unaligned(qtype, offset):
    # outputs of 4 Mi elements or more are written with non-temporal stores after an aligning head
    rng = np.random.default_rng(offset)
    n = (1 << 22) + 77
    a, b = make(qtype, n, rng), make(qtype, n, rng)
    buffer = np.zeros(n + 64, qtype)
    dst = buffer[offset:offset + n]
    add = context(a, b, qtype, SEED_Q, Activation.RELU)
    assert kernel_of(add) == "folded"
    add.forward(a, b, dst, n_threads=2)
    check(dst, a, b, SEED_Q, Activation.RELU)
    assert not buffer[:offset].any() and not buffer[offset + n:].any()
    assert add.forward(a, b, n_threads=1).tobytes() == dst.tobytes()
    c = make(qtype, 1, rng)
    assert np.array_equal(context(a, c, qtype, SEED_Q).forward(a, c), context(a, np.repeat(c, n), qtype, SEED_Q)
                          .forward(a, np.repeat(c, n)))


def _at_page_offset(n, offset, dtype):
    """n elements starting `offset` bytes into a page of their own buffer (returned too, for guards)."""
    buffer = np.zeros(n + 3 * 4096, dtype)
    start = -buffer.ctypes.data % 4096 + 4096 + offset
    return buffer[start:start + n], buffer, start


@pytest.mark.parametrize("qtype", QTYPES, ids=str)
@pytest.mark.parametrize("n", [100, 1000, 5000])
@pytest.mark.parametrize("offsets", [(0, 0, 0), (16, 16, 16), (32, 32, 16), (5, 9, 0), (16, 32, 48), (16, 16, 200),
                                     (3, 70, 400), (48, 48, 0), (60, 60, 1)], ids=str)
def test_folded_alignments(qtype, n, offsets):
    # the vector kernels align the streams most of them share (dst on a tie) and load an operand that trails
    # dst by < 512 bytes modulo 4 KiB in halves: the same bits at every offset, nothing outside dst written
    rng = np.random.default_rng(n)
    values = make(qtype, n, rng), make(qtype, n, rng)
    a, _, _ = _at_page_offset(n, offsets[0], qtype)
    b, _, _ = _at_page_offset(n, offsets[1], qtype)
    dst, buffer, start = _at_page_offset(n, offsets[2], qtype)
    a[:], b[:] = values
    for act in (Activation.IDENTITY, Activation.RELU):
        for x, y in ((a, b), (a, b[:1]), (a[:1], b)):
            add = context(x, y, qtype, SEED_Q, act)
            assert kernel_of(add) == "folded"
            buffer[:] = 7
            add.forward(x, y, dst)
            check(dst, x, y, SEED_Q, act)
            assert dst.tobytes() == add.forward(x.copy(), y.copy()).tobytes()
            assert (buffer[:start] == 7).all() and (buffer[start + n:] == 7).all()


@pytest.mark.parametrize("varying, scalar, dst", [(U8, U8, U8), (I8, I8, I8), (U8, F32, I8), (I8, U8, U8),
                                                   (U8, I8, U8)], ids=lambda t: t.name)
@pytest.mark.parametrize("act", [a for a in ACTIVATIONS if a != Activation.PRELU], ids=lambda a: a.name)
def test_row_tables(varying, scalar, dst, act):
    # rows where one operand is one value along the row and the other 1-byte (a 1-byte output, any activation
    # but PRELU) are looked up in a table of that row's 256 outputs (AVX512-VBMI) from 320 (generic kernel)
    # or 640 outputs (folded; the lookup kernel's from 32, test_row_tables_per_channel_operand); every byte
    # value, both sides, rows around those lengths, outputs off a vector boundary
    rng = np.random.default_rng(1024)
    params = default_params(act, 1)
    for n in (319, 320, 639, 640, 1023, 1024, 1090, 4097):
        x = np.resize(np.arange(256, dtype=np.uint8).view(varying), n)
        rng.shuffle(x)
        for c in make(scalar, 3, rng):
            c = np.array([c], scalar)
            for a, b in ((x, c), (c, x)):
                add = context(a, b, dst, SEED_Q, act, params)
                buffer = np.full(n + 64, 7, dst)
                out = buffer[5:5 + n]
                add.forward(a, b, out)
                check(out, a, b, SEED_Q, act, params)
                assert (buffer[:5] == 7).all() and (buffer[5 + n:] == 7).all()
                assert add.forward(a, b, n_threads=2).tobytes() == out.tobytes()


@pytest.mark.parametrize("qtype", QTYPES, ids=str)
def test_row_tables_per_channel_operand(qtype):
    # Q6's shape: [1, C, H, W] + [1, C, 1, 1], per-tensor and per-axis constants, streamed and not; GELU on
    # all but the first (per tensor) runs the lookup kernel, whose rows of 32 or more read a row of its table
    rng = np.random.default_rng(6)
    for shape in ((1, 16, 56, 56), (1, 4300, 1, 31), (1, 4100, 1, 32), (1, 1024, 14, 14), (1, 4, 1100, 1000)):
        a, b = make(qtype, shape, rng), make(qtype, (1, shape[1], 1, 1), rng)
        q = dict(SEED_Q, b_scale=rng.uniform(0.01, 0.03, shape[1]), dst_zero=rng.integers(0, 60, shape[1]))
        for qq in (SEED_Q, q):
            for act in (Activation.RELU, Activation.GELU):
                add = context(a, b, qtype, qq, act)
                got = add.forward(a, b)
                check(got, a, b, qq, act)
                swapped = dict(qq, a_scale=qq["b_scale"], a_zero=qq["b_zero"], b_scale=qq["a_scale"],
                               b_zero=qq["a_zero"])
                check(context(b, a, qtype, swapped, act).forward(b, a), b, a, swapped, act)


LINE_CASES = [  # (b_scale over a_scale, the kernel's name): b's scale 1, 2 or 1/2 times a's is a line table
    (1.0, "lookup line"), (2.0, "lookup line"), (0.5, "lookup line"), (1.7, "lookup"), (4.0, "lookup")]


@pytest.mark.parametrize("ratio, kernel", LINE_CASES, ids=[str(r) for r, _ in LINE_CASES])
@pytest.mark.parametrize("types", [(U8, U8, U8), (I8, I8, I8), (U8, I8, U8), (I8, U8, I8)], ids=combo_id)
def test_line_tables(types, ratio, kernel):
    # the lookup kernel's outputs are a function of wa * a' + wb * b' when b's scale is wb / wa times a's: at the
    # avx512 level a line of 768 bytes looked up by permutes (AVX512-VBMI) or L1-resident gathers; every
    # pair of bytes (twice, shuffled: 131072 outputs), outputs off a vector boundary, 1 and 2 threads, activations
    # of several shapes (GELU's dip below 0 included)
    a_type, b_type, dst = types
    rng = np.random.default_rng(int(ratio * 10))
    pairs = np.tile(np.arange(65536, dtype=np.uint16), 2)
    rng.shuffle(pairs)
    a, b = (pairs >> 8).astype(np.uint8).view(a_type), (pairs & 0xFF).astype(np.uint8).view(b_type)
    n = a.size
    for act, q in ((Activation.GELU, dict(SEED_Q, a_scale=0.01, b_scale=0.01 * ratio)),
                   (Activation.HSWISH, dict(SEED_Q, a_scale=0.03, a_zero=-20 if a_type == I8 else 100,
                                            b_scale=0.03 * ratio, dst_scale=0.02, dst_zero=5)),
                   (Activation.MISH, dict(SEED_Q, a_scale=0.25, b_scale=0.25 * ratio, dst_scale=0.004,
                                             dst_zero=-128 if dst == I8 else 0))):
        add = context(a, b, dst, q, act, default_params(act, 1))
        assert add.kernel.rsplit(" ", 1)[0] == (kernel if add.kernel.endswith("avx512") else "lookup")
        buffer = np.full(n + 64, 7, dst)
        out = buffer[5:5 + n]
        add.forward(a, b, out)
        check(out, a, b, q, act, default_params(act, 1))
        assert (buffer[:5] == 7).all() and (buffer[5 + n:] == 7).all()
        assert add.forward(a, b, n_threads=2).tobytes() == out.tobytes()


def _line_by_definition(table, a_signed, b_signed):
    """(wa, wb, line) of the first weights whose every class {(a, b): wa * a' + wb * b' = n} holds one value."""
    a = np.arange(256) ^ (0x80 if a_signed else 0)
    b = np.arange(256) ^ (0x80 if b_signed else 0)
    for wa, wb in planning.LINE_WEIGHTS:
        n = (wa * a[:, None] + wb * b[None, :]).ravel()
        low = np.full(planning.LINE_BYTES, 255)
        high = np.zeros(planning.LINE_BYTES, int)
        np.minimum.at(low, n, table.ravel())
        np.maximum.at(high, n, table.ravel())
        reached = np.zeros(planning.LINE_BYTES, bool)
        reached[n] = True
        if (low[reached] == high[reached]).all():
            return wa, wb, np.where(reached, low, 0).astype(np.uint8)
    return None


@given(weights=st.sampled_from([(1, 1), (1, 2), (2, 1), None]), a_signed=st.booleans(), b_signed=st.booleans(),
       values=st.integers(1, 256), flips=st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255)), max_size=2),
       seed=st.integers(0, 2**32 - 1))
def test_line_table_finds_exactly_the_lines_of_the_definition(weights, a_signed, b_signed, values, flips, seed):
    # line_table compares each entry with its neighbour along the class (a shifted view), not class by class:
    # the same answer as the definition, for tables that are lines, lines with an entry or two changed
    # (a corner's class has one member), and tables of few values
    rng = np.random.default_rng(seed)
    if weights is None:
        table = rng.integers(0, values, (256, 256)).astype(np.uint8)
    else:
        wa, wb = weights
        a = np.arange(256) ^ (0x80 if a_signed else 0)
        b = np.arange(256) ^ (0x80 if b_signed else 0)
        table = rng.integers(0, values, planning.LINE_BYTES)[wa * a[:, None] + wb * b[None, :]].astype(np.uint8)
    for i, j in flips:
        table[i, j] ^= 0x5A
    lut = np.concatenate([table.ravel(), np.zeros(65536 + 64, np.uint8)])
    found = planning.line_table(lut, a_signed, b_signed)
    expected = _line_by_definition(table, a_signed, b_signed)
    assert (found is None) == (expected is None)
    if found is not None:
        assert found[:2] == expected[:2] and found[2].tobytes() == expected[2].tobytes()


@pytest.mark.parametrize("ratio", [1.0, 2.0, 0.5, 1.7], ids=str)
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU], ids=lambda a: a.name)
@pytest.mark.parametrize("qtype", QTYPES, ids=str)
def test_folded_line(qtype, act, ratio):
    # from LUT_MIN outputs on, at the avx512 level, a folded plan whose outputs are a function of
    # wa * a' + wb * b' runs by that line (byte permutes), built from the folded kernel's own table: the bits of
    # the folded kernel (a plan below LUT_MIN, chunk by chunk), on every pair of bytes, off a vector boundary
    rng = np.random.default_rng(int(ratio * 10) + 3)
    pairs = np.tile(np.arange(65536, dtype=np.uint16), 2)
    rng.shuffle(pairs)
    a, b = (pairs >> 8).astype(np.uint8).view(qtype), (pairs & 0xFF).astype(np.uint8).view(qtype)
    n = a.size   # LUT_MIN
    q = dict(SEED_Q, a_scale=0.03, a_zero=-20 if qtype == I8 else 100, b_scale=0.03 * ratio, dst_scale=0.02,
             dst_zero=5)
    add = context(a, b, qtype, q, act)
    level = add.kernel.split()[-1]
    assert add.kernel == ("folded line avx512" if level == "avx512" and ratio != 1.7 else f"folded {level}")
    buffer = np.full(n + 64, 7, qtype)
    out = buffer[5:5 + n]
    add.forward(a, b, out)
    check(out, a, b, q, act)
    assert (buffer[:5] == 7).all() and (buffer[5 + n:] == 7).all()
    small = QuantizedAdd([4096], qtype, q["a_scale"], q["a_zero"], [4096], qtype, q["b_scale"], q["b_zero"], act,
                         None, qtype, q["dst_scale"], q["dst_zero"])
    assert small.kernel == f"folded {level}"
    expected = np.concatenate([small.forward(a[i:i + 4096], b[i:i + 4096]) for i in range(0, n, 4096)])
    assert out.tobytes() == expected.tobytes()
    assert add.forward(a, b, n_threads=2).tobytes() == out.tobytes()


@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU], ids=lambda a: a.name)
@pytest.mark.parametrize("qtype", QTYPES, ids=str)
def test_folded_row_tables_from_the_plans_table(qtype, act):
    # from LUT_MIN outputs on, at the avx512 level, a folded plan whose rows have one operand constant (Q6's
    # [1, C, H, W] + [1, C, 1, 1]) keeps the folded kernel's table of every pair of bytes and its transpose, and
    # each row of 640 or more reads its 256 outputs from there: the bits of the folded kernel computing each
    # row's table (the same rows in plans below LUT_MIN), every byte in every row, all 256 constants, both sides,
    # per tensor, 1 and 2 threads
    rng = np.random.default_rng(61)
    rows = np.stack([rng.permutation(np.resize(np.arange(256, dtype=np.uint8), 768)) for _ in range(256)])
    x = rows.view(qtype).reshape(1, 256, 1, 768)   # 196608 outputs: above LUT_MIN
    c = rng.permutation(np.arange(256, dtype=np.uint8)).view(qtype).reshape(1, 256, 1, 1)
    q = dict(SEED_Q, a_scale=0.03, a_zero=-20 if qtype == I8 else 100, b_scale=0.017, dst_scale=0.02, dst_zero=5)
    for a, b in ((x, c), (c, x)):
        add = context(a, b, qtype, q, act)
        assert add.kernel.startswith("folded")
        out = add.forward(a, b)
        check(out, a, b, q, act)
        half = [context(a[:, i:i + 128], b[:, i:i + 128], qtype, q, act) for i in (0, 128)]  # below LUT_MIN
        expected = np.concatenate([h.forward(a[:, i:i + 128], b[:, i:i + 128]) for h, i in zip(half, (0, 128))], 1)
        assert out.tobytes() == expected.tobytes()
        assert add.forward(a, b, n_threads=2).tobytes() == out.tobytes()


def test_per_axis_folded_plans_keep_their_arithmetic():
    # per-axis constants follow the position, so no line stands for the plan (even where every channel has the
    # same values and a table over 65536 positions would look like one)
    rng = np.random.default_rng(9)
    shape = (1, 64, 64, 64)   # above LUT_MIN
    a, b = (rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(2))
    same = dict(a_scale=[0.01] * 64, a_zero=[47] * 64, b_scale=[0.02] * 64, b_zero=[30] * 64, dst_scale=[0.015] * 64,
                dst_zero=[38] * 64)
    add = context(a, b, U8, same)
    assert kernel_of(add) == "folded" and "line" not in add.kernel
    assert add.forward(a, b).tobytes() == context(a, b, U8, SEED_Q).forward(a, b).tobytes()


def test_line_tables_streamed():
    # outputs of 4 Mi and more stream their stores past the caches, from a dst cache line on
    rng = np.random.default_rng(22)
    n = (1 << 22) + 37
    a, b = make(U8, n, rng), make(U8, n, rng)
    q = dict(SEED_Q, a_scale=0.02, b_scale=0.01)
    add = context(a, b, U8, q, Activation.GELU)
    buffer = np.full(n + 64, 7, U8)
    out = buffer[3:3 + n]
    add.forward(a, b, out)
    check(out, a, b, q, Activation.GELU)
    assert (buffer[:3] == 7).all() and (buffer[3 + n:] == 7).all()


# ---------------------------------------------------------------------------------------------
# Saturation


SPECIALS = [np.inf, -np.inf, np.nan, 1e30, -1e30, 3e38, -3e38, 1e10, -1e10, 0.0, 1e-30, 2**31, -2**31]
SATURATED = {U8: [255, 0, 0, 255, 0, 255, 0, 255, 0, 38, 38, 255, 0],
             I8: [127, -128, -128, 127, -128, 127, -128, 127, -128, 38, 38, 127, -128]}  # NaN -> lo


@pytest.mark.parametrize("dst_dtype", QTYPES, ids=str)
@pytest.mark.parametrize("b_dtype", TYPES, ids=str)
def test_saturation_special_values(b_dtype, dst_dtype):
    a = np.array(SPECIALS, np.float32)
    b = np.full(a.shape, 30 if b_dtype in QTYPES else 0, b_dtype)  # b' = 0
    lo, hi = RANGE[dst_dtype]
    for got in (quantized_add(a, b, b_scale=0.02, b_zero=30, dst_scale=0.015, dst_zero=38, dst_dtype=dst_dtype),
                quantized_add(b, a, a_scale=0.02, a_zero=30, dst_scale=0.015, dst_zero=38, dst_dtype=dst_dtype),
                QuantizedAdd(a.shape, "f32", 1, 0, b.shape, b_dtype, 0.02, 30, "identity", None, dst_dtype, 0.015, 38)
                .forward(a, b)):
        assert got.dtype == dst_dtype
        assert got.tolist() == SATURATED[dst_dtype]
        check(got, a, b, dict(SEED_Q, a_scale=1, a_zero=0, b_zero=30))
    # 3e38 + 3e38 overflows float32: still hi
    big = np.array([3e38, -3e38], np.float32)
    assert quantized_add(big, big, dst_dtype=dst_dtype).tolist() == [hi, lo]
    f = quantized_add(big, big, dst_dtype=np.float32)
    assert f.tolist() == [np.inf, -np.inf]
    n = quantized_add(a, np.zeros_like(a), dst_dtype=np.float32)
    assert np.isnan(n[2]) and n[0] == np.inf and n[1] == -np.inf


@pytest.mark.parametrize("dst_dtype", QTYPES, ids=str)
@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.name)
def test_saturation_every_activation(act, dst_dtype):
    a = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 0.5, -0.5], np.float32)
    b = np.zeros(7, np.float32)
    params = default_params(act, 1)
    got = quantized_add(a, b, dst_scale=0.01, dst_zero=10, dst_dtype=dst_dtype, activation=act,
                        activation_params=params)
    check(got, a, b, dict(SEED_Q, dst_scale=0.01, dst_zero=10), act, params)
    assert got[2] == RANGE[dst_dtype][0]  # NaN -> lo (0 for UINT8, -128 for INT8)


def test_saturation_huge_scales():
    a = np.array([0, 255, 128, 127], np.uint8)
    b = np.array([255, 0, 128, 128], np.uint8)
    got = quantized_add(a, b, a_scale=3e38, a_zero=128, b_scale=3e38, b_zero=128, dst_scale=1e-30)
    assert got.tolist() == [0, 0, 0, 0]  # -3e38 / 1e-30 -> -inf; 0 -> dst_zero
    check(got, a, b, dict(a_scale=3e38, a_zero=128, b_scale=3e38, b_zero=128, dst_scale=1e-30, dst_zero=0))
    c = np.array([200, 0, 128, 129], np.uint8)
    tiny = quantized_add(c, np.full(4, 128, np.uint8), a_zero=128, b_zero=128, dst_scale=1e-40, dst_zero=7)
    assert tiny.tolist() == [255, 0, 7, 255]  # a subnormal dst_scale: 0 stays dst_zero, not NaN
    large = quantized_add(a, b, a_scale=1e38, a_zero=128, b_scale=1e38, b_zero=128, dst_scale=3e38, dst_zero=7)
    check(large, a, b, dict(a_scale=1e38, a_zero=128, b_scale=1e38, b_zero=128, dst_scale=3e38, dst_zero=7))


def test_saturation_huge_scales_int8():
    a = np.array([-128, 127, 0, -1, 127], np.int8)
    b = np.array([127, -128, 0, 0, 127], np.int8)
    q = dict(a_scale=3e38, a_zero=0, b_scale=3e38, b_zero=0, dst_scale=1e-30, dst_zero=5)
    got = quantized_add(a, b, **q, dst_dtype=np.int8)
    assert got.tolist() == [-128, -128, 5, -128, 127]  # +-3e38 / 1e-30 -> +-inf; 6e38 overflows to inf
    check(got, a, b, q)
    c = np.array([72, -128, 0, 1], np.int8)
    tiny = quantized_add(c, np.zeros(4, np.int8), dst_scale=1e-40, dst_zero=-7, dst_dtype="i8")
    assert tiny.tolist() == [127, -128, -7, 127]  # a subnormal dst_scale: 0 stays dst_zero, not NaN
    q = dict(a_scale=1e38, a_zero=-128, b_scale=1e38, b_zero=127, dst_scale=3e38, dst_zero=-7)
    check(quantized_add(a, b, **q, dst_dtype=np.int8), a, b, q)
    # u8 operands to an i8 output and back
    u = np.array([0, 255], np.uint8)
    assert quantized_add(u, u, a_scale=100.0, b_scale=100.0, a_zero=128, b_zero=128, dst_dtype=np.int8).tolist() == \
        [-128, 127]
    assert quantized_add(a, b, a_scale=100.0, b_scale=100.0).tolist() == [0, 0, 0, 0, 255]


@pytest.mark.parametrize("n", [64, 200, 1027])
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU], ids=lambda a: a.name)
def test_float32_outputs_keep_nan_and_negative_zero(act, n):
    """A float32 output of IDENTITY / RELU runs in one pass of vectors (then the generic tail): the sum as
    it is, RELU as synet_act_relu (x < 0 ? 0 : x), so NaN and -0 pass through, bit for bit, 1 and 2 threads."""
    values = np.array([np.nan, -0.0, 0.0, -1.5, 2.25, -np.inf, np.inf, 1e-45, -1e-45, 3e38], np.float32)
    a = np.resize(values, n)
    b = np.full(n, -0.0, np.float32)   # -0 + -0 is -0; x + -0 is x
    total = a + b
    expected = np.where(total < 0, np.float32(0), total) if act == Activation.RELU else total
    bytes_u8 = np.arange(n, dtype=np.uint8)
    expected_u8 = (bytes_u8.astype(np.float32) - 7) * np.float32(0.5) + b   # exact: multiples of 0.5
    expected_u8 = np.where(expected_u8 < 0, np.float32(0), expected_u8) if act == Activation.RELU else expected_u8
    for threads in (1, 2):
        got = quantized_add(a, b, dst_dtype=np.float32, activation=act, n_threads=threads)
        assert got.view(np.uint32).tolist() == expected.view(np.uint32).tolist()
        got = quantized_add(bytes_u8, b, a_scale=0.5, a_zero=7, dst_dtype=np.float32, activation=act,
                            n_threads=threads)
        assert got.view(np.uint32).tolist() == expected_u8.astype(np.float32).view(np.uint32).tolist()


# ---------------------------------------------------------------------------------------------
# Broadcasting, in-place


BROADCAST_CASES = [
    ((1, 256, 7, 7), (1, 256, 1, 1)),
    ((2, 6, 5, 5), (1, 6, 1, 1)),
    ((2, 6, 5, 5), ()),
    ((3, 1), (1, 4)),
    ((4, 5, 6), (6,)),
    ((4, 5, 6), (5, 1)),
    ((1, 1, 1), (1,)),
    ((7,), (3, 1, 7)),
    ((2, 1, 3, 1), (1, 4, 1, 5)),
    ((2, 3, 0), (3, 1)),
    ((0,), ()),
]


@pytest.mark.parametrize("shapes", BROADCAST_CASES, ids=str)
@pytest.mark.parametrize("combo", [(U8, U8, U8), (F32, U8, U8), (U8, F32, F32), (U8, U8, F32), (I8, I8, I8),
                                   (F32, I8, I8), (I8, U8, F32), (U8, I8, I8), (I8, F32, U8)],
                         ids=combo_id)
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.PRELU, Activation.SWISH],
                         ids=lambda a: a.name)
def test_broadcasting(shapes, combo, act):
    rng = np.random.default_rng(len(shapes[0]) + len(shapes[1]))
    for sa, sb in (shapes, shapes[::-1]):
        a, b = make(combo[0], sa, rng), make(combo[1], sb, rng)
        out_shape = np.broadcast_shapes(sa, sb)
        channels = out_shape[1] if len(out_shape) >= 2 else 1
        params = default_params(act, channels)
        got = quantized_add(a, b, **SEED_Q, dst_dtype=combo[2], activation=act, activation_params=params)
        assert got.shape == out_shape
        check(got, a, b, SEED_Q, act, params)


def test_broadcast_shape_of_context():
    add = QuantizedAdd([2, 1, 5], "u8", 0.1, 0, [3, 1], "u8", 0.1, 0, "relu", None, "f32", 1, 0)
    assert add.shape == (2, 3, 5)
    a = np.arange(10, dtype=np.uint8).reshape(2, 1, 5)
    b = np.arange(3, dtype=np.uint8).reshape(3, 1)
    dst = add.forward(a, b)
    assert dst.shape == (2, 3, 5)
    np.testing.assert_allclose(dst, (a * 0.1 + b * 0.1).astype(np.float32), rtol=1e-6)


def test_prelu_single_slope_and_low_rank():
    rng = np.random.default_rng(5)
    a = make(F32, (3, 4, 5), rng)
    b = np.zeros((3, 4, 5), np.float32)
    got = quantized_add(a, b, dst_dtype=np.float32, activation="prelu", activation_params=[0.5])
    np.testing.assert_array_equal(got, np.where(a > 0, a, a * np.float32(0.5)))
    v = make(F32, 9, rng)
    got = quantized_add(v, np.float32(0), dst_dtype=np.float32, activation="prelu", activation_params=[0.25])
    np.testing.assert_array_equal(got, np.where(v > 0, v, v * np.float32(0.25)))


@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_in_place(combo):
    rng = np.random.default_rng(11)
    shape = (2, 3, 40, 41)
    a, b = make(combo[0], shape, rng), make(combo[1], shape, rng)
    expected = context(a, b, combo[2], SEED_Q).forward(a, b)
    for target in ("a", "b"):
        operand = a if target == "a" else b
        if operand.dtype != combo[2]:
            continue
        x, y = a.copy(), b.copy()
        dst = x if target == "a" else y
        out = context(x, y, combo[2], SEED_Q).forward(x, y, dst)
        assert out is dst
        assert np.array_equal(out, expected)
        x, y = a.copy(), b.copy()
        dst = x if target == "a" else y
        assert quantized_add(x, y, **SEED_Q, dst_dtype=combo[2], out=dst) is dst
        assert np.array_equal(dst, expected)


def test_in_place_large_all_kernels():
    a, b = all_pairs(3)
    for act in (Activation.IDENTITY, Activation.GELU):
        add = context(a, b, U8, SEED_Q, act)
        expected = add.forward(a, b)
        x = a.copy()
        add.forward(x, b, x, n_threads=2)
        assert np.array_equal(x, expected)


# ---------------------------------------------------------------------------------------------
# Hypothesis


def zero_points(dtype):
    lo, hi = RANGE.get(np.dtype(dtype), (0, 255))  # a float32 tensor's zero point is ignored
    return st.integers(lo, hi)


@st.composite
def cases(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=6))
    sa, sb = shapes.input_shapes
    combo = draw(st.sampled_from(COMBOS))
    act = draw(st.sampled_from(ACTIVATIONS))
    scale = st.floats(1e-3, 1.0)
    q = dict(a_scale=draw(scale), a_zero=draw(zero_points(combo[0])), b_scale=draw(scale),
             b_zero=draw(zero_points(combo[1])), dst_scale=draw(scale), dst_zero=draw(zero_points(combo[2])))
    seed = draw(st.integers(0, 2**32 - 1))
    spread = draw(st.sampled_from([0.1, 3.0, 300.0]))
    return sa, sb, combo, act, q, seed, spread


@given(cases())
def test_hypothesis_against_reference(case):
    sa, sb, combo, act, q, seed, spread = case
    rng = np.random.default_rng(seed)
    a, b = make(combo[0], sa, rng, spread), make(combo[1], sb, rng, spread)
    out_shape = np.broadcast_shapes(sa, sb)
    channels = out_shape[1] if len(out_shape) >= 2 else 1
    params = default_params(act, channels)
    add = context(a, b, combo[2], q, act, params)
    got = add.forward(np.ascontiguousarray(a), np.ascontiguousarray(b))
    check(got, a, b, q, act, params)
    assert np.array_equal(quantized_add(a, b, **q, dst_dtype=combo[2], activation=act,
                                        activation_params=params), got, equal_nan=combo[2] == F32)


SCALING_ACTIVATIONS = [Activation.IDENTITY, Activation.RELU, Activation.LEAKY_RELU, Activation.PRELU]
# float32 scales from 2**118 up to float32's largest: a' + b' of bytes (up to 510 * 3.4e38) and of float32 operands
# (up to 2 * 3.4e38) leave float32's range, and value / dst_scale may still be an output in range; float64 scales
# from 2**-150 to 2**-140: a' + b' deep in its subnormal range, off its steps of 2**-149 (float32 scales there are
# multiples of them: their sums are exact)
HUGE_SCALES = st.floats(2.0**118, 3.4e38).map(lambda s: float(np.float32(s)))
TINY_SCALES = st.builds(lambda m, e: m * 2.0**e, st.floats(1.0, 2.0), st.integers(-150, -140))


@st.composite
def extreme_scale_cases(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4, min_side=2, max_side=6))
    combo = draw(st.sampled_from([c for c in COMBOS if c[2] != F32]))
    act = draw(st.sampled_from(SCALING_ACTIVATIONS))
    extreme = draw(st.sampled_from([HUGE_SCALES, TINY_SCALES]))
    a_scale = draw(extreme)   # dst_scale near it: outputs neither all saturated nor all zero
    q = dict(a_scale=a_scale, a_zero=draw(zero_points(combo[0])),
             b_scale=draw(extreme), b_zero=draw(zero_points(combo[1])),
             dst_scale=min(a_scale * draw(st.floats(0.25, 2.0)), 3.4e38), dst_zero=draw(zero_points(combo[2])))
    return (*shapes.input_shapes, combo, act, q, draw(st.integers(0, 2**32 - 1)))


def extreme_operand(dtype, shape, dst_scale, rng):
    """Bytes, or float32 values up to 300 output steps (float32's largest at most)."""
    if np.dtype(dtype) in QTYPES:
        return make(dtype, shape, rng)
    return np.asarray(rng.uniform(-1.0, 1.0, shape) * min(dst_scale * 300, 3.4e38), np.float32)


@given(extreme_scale_cases())
def test_hypothesis_extreme_scales_against_reference(case):
    """Scales so large that a' + b' leaves float32's range, or so small that it lies in float32's subnormal range,
    while value / dst_scale is an output in range (the float64 path scales the sum by a power of two)."""
    sa, sb, combo, act, q, seed = case
    rng = np.random.default_rng(seed)
    a = extreme_operand(combo[0], sa, q["dst_scale"], rng)
    b = extreme_operand(combo[1], sb, q["dst_scale"], rng)
    out_shape = np.broadcast_shapes(sa, sb)
    params = default_params(act, out_shape[1] if len(out_shape) >= 2 else 1)
    got = context(a, b, combo[2], q, act, params).forward(a, b)
    check(got, a, b, q, act, params)


@pytest.mark.parametrize("combo", [(U8, U8, U8), (I8, U8, I8), (F32, U8, U8)], ids=combo_id)
@pytest.mark.parametrize("kernel_size, per_axis", [((1, 4, 256, 160), False), ((1, 3, 2, 2), True)])
@pytest.mark.parametrize("extreme", [1e38, 3e-45])
def test_extreme_scales_every_kernel(combo, kernel_size, per_axis, extreme):
    """The lookup kernel (a table of the generic one's outputs), per-axis constants along a short inner axis and
    the folded kernel (u8, which never forms a' + b'), with a' + b' beyond float32's range (0.7e38 * 2 + 1e38 *
    224 over 1e38 is 225.4, not 255) or in its subnormal range (0.7 * 3e-45 * a over 3e-45 is 0.7 a: float32's
    steps of 1.4e-45 there made it 3 for a = 5)."""
    rng = np.random.default_rng(1)
    a, b = make(combo[0], kernel_size, rng), make(combo[1], kernel_size, rng)
    if combo[0] == F32:   # float32 values up to 300 output steps
        a = (rng.uniform(-1, 1, kernel_size) * min(extreme * 300, 3e38)).astype(np.float32)
    scale = np.full(kernel_size[1], extreme) if per_axis else extreme
    q = dict(a_scale=scale * 0.7, a_zero=0, b_scale=extreme, b_zero=0, dst_scale=scale, dst_zero=0)
    add = context(a, b, combo[2], q, Activation.RELU)
    got = add.forward(a, b)
    check(got, a, b, q, Activation.RELU, axis=1)
    assert (got.astype(int) < RANGE[combo[2]][1]).any()   # not all saturated


FLT_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU])
@pytest.mark.parametrize("a, b, q", [
    # dst_scale among float64's subnormals: scaling it to [1, 2) takes 2**1074
    *[(np.uint8([0, 1, 2]), np.uint8([0, 0, 0]), dict(dst_scale=ds)) for ds in (5e-324, 1e-310, 2.0**-1022, 1e-300)],
    # a_scale 2**1994 times dst_scale: a' * 2**k overflowed float64, and (a - a_zero) = 0 times inf was NaN
    (np.uint8([5, 5]), np.uint8([1, 2]), dict(a_scale=1e300, a_zero=5, b_scale=1e-300, dst_scale=1e-300, dst_zero=10)),
    # float32 operands times 2**997: FLT_MAX - FLT_MAX was inf - inf
    (np.float32([FLT_MAX, np.inf]), np.float32([-FLT_MAX, -FLT_MAX]), dict(dst_scale=1e-300, dst_zero=128)),
    # operands that cancel: their scales lowered together, not capped one by one (and none of it at k = 0)
    *[(np.uint8([2, 3]), np.uint8([0, 0]), dict(a_scale=1e300, b_scale=2e300, b_zero=1, dst_scale=ds, dst_zero=10))
      for ds in (1e-300, 1.0, 1e-5)],
    (np.float32([-2.0**-140, 0]), np.uint8([1, 1]), dict(b_scale=2.0**-140, dst_scale=2.0**-800, dst_zero=10)),
    # one scale 2**1401, the other 2**801 in the frame: both capped, apart (2**700, 2**690), never cancelling
    (np.uint8([1, 0, 1]), np.uint8([0, 0, 1]), dict(a_scale=2.0**400, b_scale=2.0**-200, b_zero=1,
                                                   dst_scale=2.0**-999)),
], ids=["ds5e-324", "ds1e-310", "ds2^-1022", "ds1e-300", "a_scale1e300", "f32max", "cancel1e-300", "cancel1",
        "cancel1e-5", "f32cancel", "capped_apart"])
def test_extreme_scale_combinations(a, b, q, act):
    q = {**dict(a_scale=1.0, a_zero=0, b_scale=1.0, b_zero=0, dst_scale=1.0, dst_zero=0), **q}
    got = quantized_add(a, b, **q, activation=act)
    check(got, a, b, q, act)
    assert np.array_equal(context(a, b, U8, q, act).forward(a, b), got)


@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.GELU])
def test_cancelling_huge_scales_inside_the_range_keep_their_bits(act):
    """dst_scale inside [2**-100, 2**100] or a float32 output: the operand scales as given (a cap there turned
    2 * 1e300 - 1 * 2e300 = 0 into a saturated output)."""
    a, b = np.uint8([2]), np.int8([-1])
    q = dict(a_scale=1e300, a_zero=0, b_scale=2e300, b_zero=0, dst_scale=1.0, dst_zero=7)
    assert quantized_add(a, b, **q, activation=act).tolist() == [7]
    assert quantized_add(a, b, **q, activation=act, dst_dtype="f32").tolist() == [0.0]


@st.composite
def per_axis_cases(draw, min_dims=1, min_side=1):
    """Broadcasting shapes, any type mix, an axis, and for each tensor a per-tensor or per-axis scale and
    zero point (per-axis ones of every quantised tensor along the same output axis)."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=min_dims, max_dims=4, min_side=min_side,
                                                    max_side=5))
    sa, sb = shapes.input_shapes
    out = np.broadcast_shapes(sa, sb)
    combo = draw(st.sampled_from(COMBOS))
    act = draw(st.sampled_from(ACTIVATIONS))
    axis = draw(st.integers(-4, 3))
    q, out_axis = {}, None
    for name, shape, dtype in (("a", sa, combo[0]), ("b", sb, combo[1]), ("dst", out, combo[2])):
        rank = len(shape)
        own = axis % rank if -rank <= axis < rank else None
        here = None if own is None else own + len(out) - rank
        allowed = dtype != F32 and here is not None and out_axis in (None, here)
        n = shape[own] if allowed else 0
        per_scale = allowed and draw(st.booleans())
        per_zero = allowed and draw(st.booleans())
        q[f"{name}_scale"] = np.array(draw(st.lists(st.floats(1e-3, 1.0), min_size=n, max_size=n))) if per_scale \
            else draw(st.floats(1e-3, 1.0))
        q[f"{name}_zero"] = np.array(draw(st.lists(zero_points(dtype), min_size=n, max_size=n))) if per_zero \
            else draw(zero_points(dtype))
        if (per_scale or per_zero) and n > 1:
            out_axis = here
    seed = draw(st.integers(0, 2**32 - 1))
    return sa, sb, combo, act, axis, q, seed


@given(per_axis_cases())
def test_hypothesis_per_axis_against_reference(case):
    sa, sb, combo, act, axis, q, seed = case
    rng = np.random.default_rng(seed)
    a, b = make(combo[0], sa, rng), make(combo[1], sb, rng)
    out_shape = np.broadcast_shapes(sa, sb)
    params = default_params(act, out_shape[1] if len(out_shape) >= 2 else 1)
    add = context(a, b, combo[2], q, act, params, axis=axis)
    got = add.forward(a, b)
    check(got, a, b, q, act, params, axis=axis)
    again = quantized_add(a, b, **q, dst_dtype=combo[2], activation=act, activation_params=params, axis=axis)
    assert np.array_equal(again, got, equal_nan=combo[2] == F32)


@given(per_axis_cases(min_dims=2, min_side=2), st.data())
def test_hypothesis_transposed_operands_give_the_bits_of_c_ordered_ones(case, data):
    """Operands laid out in any order of their axes (one, the other or both, broadcasting, per-axis,
    every activation): the bits of the same values in C order."""
    sa, sb, combo, act, axis, q, seed = case
    rng = np.random.default_rng(seed)
    a, b = make(combo[0], sa, rng), make(combo[1], sb, rng)
    out_shape = np.broadcast_shapes(sa, sb)
    order = tuple(data.draw(st.permutations(range(len(out_shape)))))
    which = data.draw(st.sampled_from(["a", "b", "both"]))
    kw = dict(**q, dst_dtype=combo[2], activation=act, axis=axis,
              activation_params=default_params(act, out_shape[1] if len(out_shape) >= 2 else 1))
    expected = quantized_add(a, b, **kw)
    got = quantized_add(laid_out(a, order) if which != "b" else a, laid_out(b, order) if which != "a" else b, **kw)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected, equal_nan=combo[2] == F32)


@pytest.mark.parametrize("combo", [(U8, U8, U8), (I8, U8, I8), (F32, U8, F32)], ids=combo_id)
@pytest.mark.parametrize("b_shape", [(2, 6, 5, 7), (1, 6, 1, 1), (6, 1, 1), ()])
def test_transposed_operands_keep_their_layout(combo, b_shape):
    """A channels-last pair seen as NCHW runs on its memory as it lies (no copy to C order, which cost 360x
    the add) and the result is laid out alike, as NumPy's a + b is; the values are the formula's."""
    rng = np.random.default_rng(21)
    a = laid_out(make(combo[0], (2, 6, 5, 7), rng), (0, 2, 3, 1))
    b = make(combo[1], b_shape, rng)
    b = laid_out(b, (0, 2, 3, 1)) if b.ndim == 4 else b
    for act in (Activation.IDENTITY, Activation.RELU, Activation.GELU):
        got = quantized_add(a, b, **SEED_Q, dst_dtype=combo[2], activation=act)
        assert got.transpose(0, 2, 3, 1).flags.c_contiguous and not got.flags.c_contiguous
        check(got, a, b, SEED_Q, act)
        # into an out= laid out alike, and in place
        out = laid_out(np.zeros(got.shape, combo[2]), (0, 2, 3, 1))
        assert quantized_add(a, b, **SEED_Q, dst_dtype=combo[2], activation=act, out=out) is out
        assert np.array_equal(out, got, equal_nan=True)
        if combo[0] == combo[2]:
            a_copy = a.copy(order="K")
            assert quantized_add(a_copy, b, **SEED_Q, dst_dtype=combo[2], activation=act, out=a_copy) is a_copy
            assert np.array_equal(a_copy, got, equal_nan=True)


@pytest.mark.parametrize("scales", ["numpy scalars", "0-d arrays"])
def test_transposed_operand_with_numpy_scalars_keeps_its_layout(scales):
    """NumPy scalars or 0-d arrays as the scales, and numbers, lists or 0-d arrays as b, are per tensor as Python
    numbers are: a channels-last a keeps its layout and out=a works (all were refused: "out: expected a writeable
    C-contiguous array")."""
    rng = np.random.default_rng(23)
    a = laid_out(make(U8, (2, 6, 5, 7), rng), (0, 2, 3, 1))
    wrap = (lambda t, v: t(v)) if scales == "numpy scalars" else (lambda t, v: np.array(v, t))
    q = {name: (wrap(np.float32, v) if "scale" in name else wrap(np.int64, v)) for name, v in SEED_Q.items()}
    for b in (np.uint8(200), np.float32(1.5), np.array(200, np.uint8), 1.5, [1.5], (2.5,), [[[[0.5]]]],
              np.array([7], np.uint8)):
        expected = quantized_add(np.ascontiguousarray(a), np.asarray(b), **SEED_Q)
        got = quantized_add(a, b, **q)
        assert got.transpose(0, 2, 3, 1).flags.c_contiguous and np.array_equal(got, expected)
        a_copy = a.copy(order="K")
        assert quantized_add(a_copy, b, **q, out=a_copy) is a_copy and np.array_equal(a_copy, expected)
        a_copy = a.copy(order="K")   # b first
        assert quantized_add(b, a_copy, **{n.replace("a_", "c_").replace("b_", "a_").replace("c_", "b_"): v
                                           for n, v in q.items()}, out=a_copy) is a_copy
        assert np.array_equal(a_copy, expected)


def test_transposed_operands_prelu_and_mixed_layouts_run_in_c_order():
    """Where the memory order would move an axis the call refers to (PRELU's slopes along axis 1) or the
    operands lie differently, the result is C-ordered and the formula's."""
    rng = np.random.default_rng(22)
    a, b = make(U8, (2, 6, 5, 7), rng), make(U8, (2, 6, 5, 7), rng)
    slopes = list(np.linspace(-0.5, 1.5, 6))
    cases = [(laid_out(a, (0, 2, 3, 1)), laid_out(b, (0, 2, 3, 1)), Activation.PRELU, slopes),
             (laid_out(a, (0, 2, 3, 1)), laid_out(b, (3, 2, 1, 0)), Activation.RELU, None),
             (laid_out(a, (0, 2, 3, 1)), b, Activation.RELU, None)]
    for ta, tb, act, params in cases:
        got = quantized_add(ta, tb, **SEED_Q, activation=act, activation_params=params)
        assert got.flags.c_contiguous
        check(got, a, b, SEED_Q, act, params)
    # a C-ordered out= beside transposed operands
    out = np.empty(a.shape, np.uint8)
    assert quantized_add(laid_out(a, (0, 2, 3, 1)), laid_out(b, (0, 2, 3, 1)), **SEED_Q, out=out) is out
    check(out, a, b, SEED_Q)


@given(st.sampled_from(COMBOS), st.sampled_from(ACTIVATIONS), st.integers(0, 2**32 - 1))
def test_hypothesis_threads_bitwise(combo, act, seed):
    rng = np.random.default_rng(seed)
    shape = (1, 8, 131, 150)  # above the parallel threshold
    a, b = make(combo[0], shape, rng), make(combo[1], (1, 8, 1, 1) if seed % 2 else shape, rng)
    add = context(a, b, combo[2], SEED_Q, act, default_params(act, 8))
    one = add.forward(a, b, n_threads=1)
    two = add.forward(a, b, n_threads=2)
    assert one.tobytes() == two.tobytes()


# ---------------------------------------------------------------------------------------------
# Per-axis scales and zero points (ONNX QuantizeLinear's axis)

PER_AXIS_SHAPE = (2, 6, 5, 7)


def per_axis_q(rng, n, which=("a", "b", "dst"), types=(U8, U8, U8)):
    """SEED_Q with 1-D scales and zero points of length n for the tensors named in `which`."""
    q = dict(SEED_Q)
    for name, dtype in zip(("a", "b", "dst"), types):
        if name in which:
            lo, hi = RANGE.get(dtype, (0, 255))
            q[f"{name}_scale"] = rng.uniform(0.005, 0.03, n)
            q[f"{name}_zero"] = rng.integers(max(lo, -20), min(hi, 60) + 1, n)
    return q


@pytest.mark.parametrize("which", [("a",), ("b",), ("dst",), ("a", "b"), ("a", "b", "dst")], ids="+".join)
@pytest.mark.parametrize("combo", [(U8, U8, U8), (I8, I8, I8), (U8, I8, F32), (F32, U8, I8), (I8, F32, U8)],
                         ids=combo_id)
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.GELU, Activation.PRELU],
                         ids=lambda a: a.name)
def test_per_axis_each_tensor(which, combo, act):
    rng = np.random.default_rng(len(which) * 100 + COMBOS.index(combo))
    a, b = make(combo[0], PER_AXIS_SHAPE, rng), make(combo[1], PER_AXIS_SHAPE, rng)
    q = per_axis_q(rng, PER_AXIS_SHAPE[1], which, combo)
    params = default_params(act, PER_AXIS_SHAPE[1])
    add = context(a, b, combo[2], q, act, params)
    got = add.forward(a, b)
    check(got, a, b, q, act, params)
    assert np.array_equal(quantized_add(a, b, **q, dst_dtype=combo[2], activation=act, activation_params=params),
                          got)


@pytest.mark.parametrize("qtype", QTYPES, ids=str)
def test_per_axis_kernels(qtype):
    # per tensor keeps the fast kernels; per-axis 1-byte identity / relu stays folded, other activations
    # run the generic kernel (no per-channel tables)
    rng = np.random.default_rng(4)
    shape = (1, 8, 130, 130)  # above the lookup threshold
    a, b = make(qtype, shape, rng), make(qtype, shape, rng)
    q = per_axis_q(rng, 8, types=(qtype,) * 3)
    for act, per_tensor, per_axis in ((Activation.IDENTITY, "folded", "folded"), (Activation.RELU, "folded", "folded"),
                                      (Activation.GELU, "lookup", "generic"), (Activation.HSWISH, "lookup", "generic")):
        params = default_params(act, 8)
        assert kernel_of(context(a, b, qtype, SEED_Q, act, params)) == per_tensor
        add = context(a, b, qtype, q, act, params)
        assert kernel_of(add) == per_axis
        got = add.forward(a, b, n_threads=2)
        check(got, a, b, q, act, params)
        assert add.forward(a, b, n_threads=1).tobytes() == got.tobytes()
        # per-axis arrays of equal values: the per-tensor bits
        same = {k: (np.full(8, SEED_Q[k]) if k.endswith(("scale", "zero")) else v) for k, v in SEED_Q.items()}
        assert np.array_equal(context(a, b, qtype, same, act, params).forward(a, b),
                              context(a, b, qtype, SEED_Q, act, params).forward(a, b))


@pytest.mark.parametrize("axis, shape", [(-1, (2, 5, 7, 6)), (-3, (2, 6, 5, 7)), (0, (6, 5, 7)), (2, (3, 4, 6)),
                                         (-2, (4, 6, 33)), (3, (1, 2, 3, 6))], ids=str)
@pytest.mark.parametrize("combo", [(U8, U8, U8), (I8, I8, I8), (U8, F32, I8)], ids=combo_id)
def test_per_axis_any_axis(axis, shape, combo):
    rng = np.random.default_rng(abs(axis))
    a, b = make(combo[0], shape, rng), make(combo[1], shape, rng)
    q = per_axis_q(rng, 6, types=combo)
    for act in (Activation.IDENTITY, Activation.RELU, Activation.SWISH):
        got = context(a, b, combo[2], q, act, axis=axis).forward(a, b)
        check(got, a, b, q, act, axis=axis)
        assert np.array_equal(quantized_add(a, b, **q, dst_dtype=combo[2], activation=act, axis=axis), got)
        # the same add with the channel axis moved to axis 1
        own = axis % len(shape)
        at1 = [np.ascontiguousarray(np.moveaxis(x, own, 1)) for x in (a, b)]
        moved = context(*at1, combo[2], q, act).forward(*at1)
        check(moved, *at1, q, act)
        assert np.array_equal(np.moveaxis(moved, 1, own), got)  # the same bits, whatever the walk


@pytest.mark.parametrize("inner", [1, 2, 3, 15, 16, 17, 40])
@pytest.mark.parametrize("combo", [(U8, U8, U8), (I8, I8, I8), (F32, U8, I8), (I8, U8, F32)], ids=combo_id)
def test_per_axis_short_channels(inner, combo):
    # channels along an inner axis (NHWC and the like): short ones run on per-position constants, long
    # ones channel by channel; either way the bits of the same add with the channels on axis 1
    rng = np.random.default_rng(inner)
    shape = (3, 7, 24, inner)
    a, b = make(combo[0], shape, rng), make(combo[1], (3, 1, 24, 1) if inner % 2 else shape, rng)
    q = per_axis_q(rng, 24, types=combo)
    for act in (Activation.IDENTITY, Activation.RELU, Activation.GELU, Activation.PRELU):
        params = default_params(act, 7)
        add = context(a, b, combo[2], q, act, params, axis=2)
        got = add.forward(a, b, n_threads=2)
        check(got, a, b, q, act, params, axis=2)
        assert add.forward(a, b, n_threads=1).tobytes() == got.tobytes()
        if act != Activation.PRELU:  # (PRELU's slopes follow axis 1)
            at1 = [np.ascontiguousarray(np.moveaxis(x, 2, 1)) for x in (a, b)]
            moved = context(*at1, combo[2], q, act, params).forward(*at1)
            assert np.array_equal(np.moveaxis(moved, 1, 2), got)


@pytest.mark.parametrize("shape, axis", [((2, 6, 40, 41), 1), ((2, 40, 41, 6), -1), ((4, 6, 3), 1)], ids=str)
@pytest.mark.parametrize("qtype", QTYPES, ids=str)
def test_per_axis_in_place(shape, axis, qtype):
    rng = np.random.default_rng(21)
    a, b = make(qtype, shape, rng), make(qtype, shape, rng)
    q = per_axis_q(rng, 6, types=(qtype,) * 3)
    for act in (Activation.RELU, Activation.SWISH):
        add = context(a, b, qtype, q, act, axis=axis)
        expected = add.forward(a, b)
        x, y = a.copy(), b.copy()
        assert add.forward(x, y, x) is x and np.array_equal(x, expected)
        x, y = a.copy(), b.copy()
        assert quantized_add(x, y, **q, dst_dtype=qtype, activation=act, axis=axis, out=y) is y
        assert np.array_equal(y, expected)


@pytest.mark.parametrize("qtype", QTYPES, ids=str)
def test_per_axis_large_streaming_unaligned(qtype):
    # 4 Mi outputs or more: the folded kernel streams its stores, channel run by channel run
    rng = np.random.default_rng(22)
    shape = (2, 64, 181, 190)
    a, b = make(qtype, shape, rng), make(qtype, shape, rng)
    q = per_axis_q(rng, 64, types=(qtype,) * 3)
    q.update(a_scale=rng.uniform(0.008, 0.012, 64), b_scale=rng.uniform(0.015, 0.025, 64),
             dst_scale=rng.uniform(0.012, 0.018, 64))  # within the folded kernel's error bound
    n = a.size
    buffer = np.zeros(n + 64, qtype)
    dst = buffer[5:5 + n].reshape(shape)
    add = context(a, b, qtype, q, Activation.RELU)
    assert kernel_of(add) == "folded"
    add.forward(a, b, dst, n_threads=2)
    check(dst, a, b, q, Activation.RELU)
    assert not buffer[:5].any() and not buffer[5 + n:].any()
    assert add.forward(a, b, n_threads=1).tobytes() == dst.tobytes()


def test_per_axis_negative_axis_equals_positive():
    rng = np.random.default_rng(8)
    a, b = make(U8, PER_AXIS_SHAPE, rng), make(U8, PER_AXIS_SHAPE, rng)
    q = per_axis_q(rng, 6)
    for act in (Activation.IDENTITY, Activation.ELU):
        ref = context(a, b, U8, q, act).forward(a, b)
        assert np.array_equal(context(a, b, U8, q, act, axis=-3).forward(a, b), ref)
        assert np.array_equal(quantized_add(a, b, **q, activation=act, axis=-3), ref)


@pytest.mark.parametrize("combo", [(U8, U8, U8), (I8, I8, I8), (I8, U8, F32)], ids=combo_id)
def test_per_axis_broadcasting_operands(combo):
    rng = np.random.default_rng(12)
    out = PER_AXIS_SHAPE
    cases = [
        # (a shape, b shape, axis, which): per-axis tensors meet on output axis 1
        ((2, 6, 5, 7), (1, 6, 1, 1), 1, ("a", "b", "dst")),
        ((2, 6, 5, 7), (6, 1, 1), -3, ("a", "b", "dst")),     # b has rank 3: axis -3 is its axis 0
        ((1, 6, 1, 7), (2, 1, 5, 1), 1, ("a", "dst")),        # a broadcasts along 0 and 2, b along 1
        ((2, 1, 5, 7), (1, 6, 5, 1), 1, ("b",)),
        ((6, 1, 1), (2, 6, 5, 7), -3, ("a",)),
        ((), (2, 6, 5, 7), 1, ("b", "dst")),                   # a scalar operand
    ]
    for sa, sb, axis, which in cases:
        a, b = make(combo[0], sa, rng), make(combo[1], sb, rng)
        q = per_axis_q(rng, 6, which, combo)
        for act in (Activation.IDENTITY, Activation.RELU, Activation.HARD_SIGMOID):
            got = context(a, b, combo[2], q, act, axis=axis).forward(a, b)
            assert got.shape == out
            check(got, a, b, q, act, axis=axis)
            assert np.array_equal(quantized_add(a, b, **q, dst_dtype=combo[2], activation=act, axis=axis), got)


def test_per_axis_operand_of_size_one_along_the_axis():
    # b has size 1 along axis 1: its per-axis arrays have one value, which broadcasts like b itself
    rng = np.random.default_rng(13)
    a, b = make(U8, (2, 6, 5, 7), rng), make(U8, (2, 1, 5, 7), rng)
    q = per_axis_q(rng, 6, ("a", "dst"))
    q1 = dict(q, b_scale=np.array([0.02]), b_zero=np.array([30]))
    got = context(a, b, U8, q1).forward(a, b)
    assert np.array_equal(got, context(a, b, U8, q).forward(a, b))
    check(got, a, b, q1)
    # and a tensor whose size along the axis is 1 cannot take more than one value
    with pytest.raises(ValueError, match=re.escape("b_scale: expected 1 value (b's size along axis 1 of (2, 1, 5, 7)) "
                                                   "or one (per tensor), got 6")):
        context(a, b, U8, dict(q, b_scale=np.full(6, 0.02)))


def test_one_value_arrays_are_per_tensor():
    rng = np.random.default_rng(14)
    a, b = make(U8, (1, 4, 300, 300), rng), make(U8, (1, 4, 300, 300), rng)
    for act, kernel in ((Activation.IDENTITY, "folded"), (Activation.GELU, "lookup")):
        ref = context(a, b, U8, SEED_Q, act)
        assert kernel_of(ref) == kernel
        expected = ref.forward(a, b)
        for wrap in (lambda v: [v], lambda v: np.array([v]), lambda v: np.array(v), lambda v: (v,)):
            q = {k: wrap(v) for k, v in SEED_Q.items()}
            add = context(a, b, U8, q, act)
            assert kernel_of(add) == kernel
            assert np.array_equal(add.forward(a, b), expected)
            assert np.array_equal(quantized_add(a, b, **q, activation=act), expected)
    # even on a rank-0 tensor, or with an axis the tensor does not have
    x = np.array(7, np.uint8)
    assert quantized_add(x, x, a_scale=[0.5], b_zero=np.array([1]), axis=5).tolist() == 10


PER_AXIS_GOOD = dict(a_shape=[2, 6, 5, 7], a_type="u8", a_scale=np.full(6, 0.1), a_zero=np.arange(6),
                     b_shape=[1, 6, 1, 1], b_type="i8", b_scale=0.2, b_zero=np.arange(-3, 3), act_type="relu",
                     act_params=None, dst_type="u8", dst_scale=np.linspace(0.1, 0.2, 6), dst_zero=5)


@pytest.mark.parametrize("changes, error, message", [
    (dict(a_scale=np.full(5, 0.1)), ValueError,
     "a_scale: expected 6 values (a's size along axis 1 of (2, 6, 5, 7)) or one (per tensor), got 5"),
    (dict(b_zero=np.arange(7)), ValueError,
     "b_zero: expected 6 values (b's size along axis 1 of (1, 6, 1, 1)) or one (per tensor), got 7"),
    (dict(dst_zero=[1, 2]), ValueError,
     "dst_zero: expected 6 values (dst's size along axis 1 of (2, 6, 5, 7)) or one (per tensor), got 2"),
    (dict(a_shape=[2, 6, 5, 7], a_scale=np.full(256, 0.1)), ValueError, "a_scale: expected 6 values"),
    (dict(b_shape=[6, 1, 1]), ValueError,  # b's axis 1 is output axis 2: b has 1 there, not 6 values
     "b_zero: expected 1 value (b's size along axis 1 of (6, 1, 1)) or one (per tensor), got 6"),
    (dict(b_shape=[5, 7], b_zero=np.arange(-3, 4), a_shape=[2, 6, 5, 1]), ValueError,
     "axis: the per-axis scales and zero points (a_scale, a_zero, b_zero, dst_scale) must run along one output "
     "axis, got output axes [1, 3]"),
    (dict(a_zero=[0, 1, 2, 300, 4, 5]), ValueError, "a_zero[3]: expected an int in [0, 255] (UINT8), got 300"),
    (dict(b_zero=[0, 1, 2, 3, 4, 128]), ValueError, "b_zero[5]: expected an int in [-128, 127] (INT8), got 128"),
    (dict(b_zero=np.array([0, 1, 2, 3, -129, 5])), ValueError,
     "b_zero[4]: expected an int in [-128, 127] (INT8), got -129"),
    (dict(a_zero=[0, 1, 2, 3, 4, 5.0]), ValueError, "a_zero[5]: expected an int in [0, 255] (UINT8), got 5.0"),
    (dict(dst_scale=[0.1, 0.1, 0.0, 0.1, 0.1, 0.1]), ValueError, "dst_scale[2]: expected a finite number > 0, got 0.0"),
    (dict(a_scale=[0.1, -0.1, 0.1, 0.1, 0.1, 0.1]), ValueError, "a_scale[1]: expected a finite number > 0, got -0.1"),
    (dict(a_scale=np.array([0.1, 0.1, 0.1, np.nan, 0.1, 0.1])), ValueError,
     "a_scale[3]: expected a finite number > 0, got nan"),
    (dict(dst_scale=np.array([np.inf] * 6)), ValueError, "dst_scale[0]: expected a finite number > 0, got inf"),
    (dict(a_scale=np.full((2, 3), 0.1)), ValueError,
     "a_scale: expected a number or a non-empty 1-D array (per axis), got shape (2, 3)"),
    (dict(dst_zero=np.zeros((6, 1), np.uint8)), ValueError,
     "dst_zero: expected a number or a non-empty 1-D array (per axis), got shape (6, 1)"),
    (dict(b_zero=[]), ValueError, "b_zero: expected a number or a non-empty 1-D array (per axis), got shape (0,)"),
    (dict(a_scale=np.array([], np.float32)), ValueError,
     "a_scale: expected a number or a non-empty 1-D array (per axis), got shape (0,)"),
    (dict(a_scale=[0.1, [0.2]]), ValueError, "a_scale[1]: expected a finite number > 0, got [0.2]"),
    (dict(a_scale=[[0.1], [0.2, 0.3]]), ValueError, "a_scale[0]: expected a finite number > 0, got [0.1]"),
    (dict(a_scale=[[0.1] * 6]), ValueError,
     "a_scale: expected a number or a non-empty 1-D array (per axis), got shape (1, 6)"),
    (dict(a_scale=["0.1"] * 6), ValueError, "a_scale[0]: expected a finite number > 0, got '0.1'"),
    (dict(a_zero=[True] * 6), ValueError, "a_zero[0]: expected an int in [0, 255] (UINT8), got True"),
    # ints beyond float64's range: OverflowError ("int too large to convert to float") named nothing
    (dict(dst_scale=10**400), ValueError, "dst_scale: expected a finite number > 0, got 1000000"),
    (dict(a_scale=[0.1] * 5 + [10**400]), ValueError, "a_scale[5]: expected a finite number > 0, got 1000000"),
    (dict(axis=4), ValueError, "a_scale: per-axis values need axis in [-4, 4) of a's shape (2, 6, 5, 7), got axis 4"),
    (dict(axis=-5), ValueError, "a_scale: per-axis values need axis in [-4, 4) of a's shape (2, 6, 5, 7), got axis -5"),
    (dict(axis=1.0), TypeError, "axis: expected an int, got float"),
    (dict(axis=None), TypeError, "axis: expected an int, got NoneType"),
    (dict(axis=True), TypeError, "axis: expected an int, got bool"),
])
def test_per_axis_errors(changes, error, message):
    assert QuantizedAdd(**PER_AXIS_GOOD).enable()
    args = dict(PER_AXIS_GOOD, **changes)
    axis = args.pop("axis", 1)
    with pytest.raises(error, match="^" + re.escape(message)):
        QuantizedAdd(**args, axis=axis)
    with pytest.raises(error, match="^" + re.escape(message)):
        QuantizedAdd().init(**args, axis=axis)
    a = np.zeros(args["a_shape"], np.uint8)
    b = np.zeros(args["b_shape"], np.int8)
    # C-ordered operands, and operands laid out channels-last (the message names the caller's shapes)
    for x, y in ((a, b), (laid_out(a, (0, 2, 3, 1)), laid_out(b, (0, 2, 3, 1)))):
        with pytest.raises(error, match="^" + re.escape(message)):
            quantized_add(x, y, a_scale=args["a_scale"], a_zero=args["a_zero"], b_scale=args["b_scale"],
                          b_zero=args["b_zero"], dst_scale=args["dst_scale"], dst_zero=args["dst_zero"],
                          activation="relu", axis=axis)


def test_per_axis_float_tensors_ignore_their_arrays():
    rng = np.random.default_rng(15)
    a, b = make(F32, PER_AXIS_SHAPE, rng), make(U8, PER_AXIS_SHAPE, rng)
    q = per_axis_q(rng, 6, ("b", "dst"))
    ref = context(a, b, U8, q).forward(a, b)
    junk = dict(q, a_scale=np.zeros((3, 3)), a_zero=[1, [2]])
    assert np.array_equal(context(a, b, U8, junk).forward(a, b), ref)
    f = context(a, b, F32, dict(q, dst_scale=[-1.0], dst_zero=np.arange(99))).forward(a, b)
    check(f, a, b, q)


def test_per_axis_functional_cache_is_keyed_by_values():
    rng = np.random.default_rng(16)
    a, b = make(U8, PER_AXIS_SHAPE, rng), make(U8, PER_AXIS_SHAPE, rng)
    q = per_axis_q(rng, 6)
    first = quantized_add(a, b, **q)
    hits = synet.plan_cache_info()["quantized_add"]["hits"]
    assert np.array_equal(quantized_add(a, b, **q), first)
    assert synet.plan_cache_info()["quantized_add"]["hits"] == hits + 1
    q["a_scale"][2] *= 2  # the same array object, new values: a new plan, not a stale one
    changed = quantized_add(a, b, **q)
    check(changed, a, b, q)
    assert not np.array_equal(changed[:, 2], first[:, 2]) and np.array_equal(changed[:, 3], first[:, 3])


@pytest.mark.parametrize("qtype", QTYPES, ids=str)
def test_functional_lookup_plan_is_cached(qtype):
    # a repeated functional call with a lookup plan is a cache hit: no new plan, no 65536-entry table rebuilt
    rng = np.random.default_rng(20)
    a, b = make(qtype, (1, 8, 130, 130), rng), make(qtype, (1, 8, 130, 130), rng)
    q = SWEEP_SETS[qtype][3]
    assert kernel_of(context(a, b, qtype, q, Activation.GELU)) == "lookup"
    first = quantized_add(a, b, **q, dst_dtype=qtype, activation="gelu")
    before = synet.plan_cache_info()["quantized_add"]
    for _ in range(3):
        assert np.array_equal(quantized_add(a, b, **q, dst_dtype=qtype, activation="gelu"), first)
    after = synet.plan_cache_info()["quantized_add"]
    assert (after["hits"], after["misses"]) == (before["hits"] + 3, before["misses"])
    check(first, a, b, q, Activation.GELU)


@pytest.mark.parametrize("combo", [(U8, U8, U8), (I8, I8, I8), (F32, I8, U8)], ids=combo_id)
@pytest.mark.parametrize("axis", [1, -1])
def test_per_axis_large_threads_bitwise(combo, axis):
    # per-channel rows of many lengths, split across tiles and threads
    rng = np.random.default_rng(18)
    shape = (2, 24, 61, 67) if axis == 1 else (2, 61, 67, 24)
    a, b = make(combo[0], shape, rng), make(combo[1], shape, rng)
    q = per_axis_q(rng, 24, types=combo)
    for act in (Activation.RELU, Activation.GELU):
        add = context(a, b, combo[2], q, act, axis=axis)
        one = add.forward(a, b, n_threads=1)
        check(one, a, b, q, act, axis=axis)
        assert add.forward(a, b, n_threads=2).tobytes() == one.tobytes()


def test_pickle_int8_and_per_axis_contexts():
    rng = np.random.default_rng(19)
    a, b = make(I8, PER_AXIS_SHAPE, rng), make(U8, (1, 6, 1, 1), rng)
    q = per_axis_q(rng, 6, types=(I8, U8, I8))
    add = context(a, b, I8, q, Activation.PRELU, default_params(Activation.PRELU, 6), axis=-3)
    expected = add.forward(a, b)
    for clone in (pickle.loads(pickle.dumps(add)), copy.deepcopy(add)):
        assert clone.kernel == add.kernel and clone.shape == add.shape
        assert np.array_equal(clone.forward(a, b), expected)
    big = make(I8, (1, 4, 300, 300), rng)
    lut = context(big, big, I8, SEED_Q, Activation.GELU)
    assert kernel_of(lut) == "lookup"
    assert np.array_equal(pickle.loads(pickle.dumps(lut)).forward(big, big), lut.forward(big, big))


# ---------------------------------------------------------------------------------------------
# CPU levels: every level gives the same bits (SPEC section 8)

LEVELS_SCRIPT = r"""
import hashlib, sys
import numpy as np
import synet
from synet._quantized_add import LEVEL

rng = np.random.default_rng(2026)
digest = hashlib.sha256()
Q = dict(a_scale=0.010, a_zero=47, b_scale=0.020, b_zero=30, dst_scale=0.015, dst_zero=38)
U8, I8, F32 = np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32)
kernels = set()

def make(dtype, shape):
    if dtype == F32:
        return (rng.standard_normal(shape) * 3).astype(np.float32)
    return rng.integers(0, 256, shape, dtype=np.uint8).view(dtype)

def add(a, b, dst_dtype, act="identity", params=None, q=Q, axis=1, out=None):
    ctx = synet.QuantizedAdd(a.shape, a.dtype, q["a_scale"], q["a_zero"], b.shape, b.dtype, q["b_scale"],
                             q["b_zero"], act, params, dst_dtype, q["dst_scale"], q["dst_zero"], axis=axis)
    kernels.add(ctx.kernel.split()[0])
    got = ctx.forward(a, b, out)
    digest.update(np.ascontiguousarray(got).tobytes())

for t in (U8, I8):
    for n in list(range(1, 70)) + [1000, 4097]:
        x, y = make(t, n), make(t, n)
        for act in ("identity", "relu"):
            add(x, y, t, act)
            add(x, y[:1], t, act)
            add(x[:1], y, t, act)
    x, y = make(t, 3 * 65536), make(t, 3 * 65536)
    for act in ("gelu", "hswish", "identity"):
        add(x, y, t, act)
    big = 1 << 22
    x, y = make(t, big + 77), make(t, big + 77)
    buf = np.zeros(big + 77 + 64, t)
    add(x, y, t, "relu", out=buf[3:3 + big + 77])
    digest.update(buf.tobytes())
for ta in (U8, I8, F32):
    for tb in (U8, I8, F32):
        for td in (U8, I8, F32):
            x, y = make(ta, (2, 5, 7, 9)), make(tb, (2, 5, 1, 9))
            for act, params in (("identity", None), ("relu", None), ("leaky_relu", [0.3]), ("gelu", None),
                                ("prelu", list(np.linspace(-1, 1, 5))), ("hswish", None), ("elu", None)):
                add(x, y, td, act, params)
for axis, shape in ((1, (2, 6, 33, 35)), (-1, (2, 33, 35, 6))):
    q = dict(a_scale=rng.uniform(0.005, 0.03, 6), a_zero=rng.integers(0, 60, 6), b_scale=0.02, b_zero=30,
             dst_scale=rng.uniform(0.01, 0.02, 6), dst_zero=rng.integers(0, 60, 6))
    for t in (U8, I8):
        x, y = make(t, shape), make(t, shape)
        for act in ("identity", "relu", "gelu"):
            add(x, y, t, act, q=q, axis=axis)
print(LEVEL, sorted(kernels), digest.hexdigest())
"""


@pytest.mark.skipif(bool(os.environ.get("SYNET_SANITIZED")), reason="not inside the sanitized run")
def test_every_cpu_level_gives_the_same_bits(tmp_path):
    results = {}
    for level in ("baseline", "avx2", "avx512"):
        env = dict(os.environ, SYNET_MAX_ISA=level)
        run = subprocess.run([sys.executable, "-c", LEVELS_SCRIPT], env=env, capture_output=True, text=True,
                             timeout=600, cwd=tmp_path)   # not the checkout: the installed synet
        assert run.returncode == 0, run.stderr[-3000:]
        chosen, *rest = run.stdout.split()
        results[chosen] = run.stdout
    assert "baseline" in results
    assert len({r.split(None, 1)[1] for r in results.values()}) == 1, results


# ---------------------------------------------------------------------------------------------
# Threads and concurrency


@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.HSWISH, Activation.PRELU],
                         ids=lambda a: a.name)
@pytest.mark.parametrize("combo", COMBOS, ids=combo_id)
def test_threads_bitwise_identical(combo, act):
    rng = np.random.default_rng(17)
    shape = (2, 16, 70, 71)
    a, b = make(combo[0], shape, rng), make(combo[1], shape, rng)
    add = context(a, b, combo[2], SEED_Q, act, default_params(act, 16))
    results = [add.forward(a, b, n_threads=n).tobytes() for n in (1, 2, 3, -1)]
    assert len(set(results)) == 1
    synet.set_num_threads(1)
    try:
        assert add.forward(a, b).tobytes() == results[0]
    finally:
        synet.set_num_threads(None)


def test_one_context_many_python_threads():
    rng = np.random.default_rng(23)
    shape = (1, 32, 64, 64)
    add = QuantizedAdd(shape, "u8", 0.01, 47, [1, 32, 1, 1], "u8", 0.02, 30, "hswish", None, "u8", 0.015, 38)
    inputs = [(make(U8, shape, rng), make(U8, (1, 32, 1, 1), rng)) for _ in range(8)]
    expected = [add.forward(a, b, n_threads=1) for a, b in inputs]
    barrier = threading.Barrier(4)
    failures = []

    def work(k):
        barrier.wait()
        for round_ in range(5):
            for j in range(k, len(inputs), 4):
                got = add.forward(*inputs[j], n_threads=1 + (round_ + j) % 2)
                if not np.array_equal(got, expected[j]):
                    failures.append((k, j))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# ---------------------------------------------------------------------------------------------
# Context behaviour


def test_context_any_shape_of_right_size_and_reinit():
    add = QuantizedAdd([2, 3], "u8", 0.5, 1, [2, 3], "f32", None, None, "identity", None, "f32", None, None)
    a = np.arange(6, dtype=np.uint8)
    b = np.ones(6, np.float32)
    dst = add.forward(a, b)  # flat arrays of the right size are fine
    assert dst.shape == (2, 3)
    np.testing.assert_array_equal(dst.reshape(-1), (a - 1.0) * 0.5 + 1)
    add.init([2, 3], "u8", 0.5, 1, [2, 3], "f32", None, None, "identity", None, "f32", None, None)  # no-op
    add.init([6], "u8", 0.25, 0, [1], "u8", 1.0, 0, "relu", None, "u8", 0.25, 0)
    assert add.shape == (6,)
    assert add.forward(a, np.array([1], np.uint8)).tolist() == [4, 5, 6, 7, 8, 9]


def test_float32_operand_ignores_its_scale_and_zero():
    a = np.array([1.5, -2.0], np.float32)
    b = np.array([3, 5], np.uint8)
    ref = quantized_add(a, b, b_scale=0.5, b_zero=3, dst_dtype="float32")
    for junk in (0.0, -1.0, float("nan"), "junk", None):
        got = quantized_add(a, b, a_scale=junk, a_zero=junk, b_scale=0.5, b_zero=3, dst_dtype="float32",
                            dst_scale=junk, dst_zero=junk)
        assert np.array_equal(got, ref)
    assert ref.tolist() == [1.5, -1.0]


def test_float64_input_becomes_float32():
    a = np.array([0.1, 0.2])
    got = quantized_add(a, np.array([0.3], np.float32), dst_dtype=np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, (a.astype(np.float32).astype(np.float64) + np.float64(np.float32(0.3)))
                                  .astype(np.float32))


def test_selftest_runs():
    from synet._selftest import selftest
    assert selftest()


# ---------------------------------------------------------------------------------------------
# Errors: type, and a message naming the parameter

GOOD = dict(a_shape=[2, 3], a_type="u8", a_scale=0.1, a_zero=3, b_shape=[2, 3], b_type="u8", b_scale=0.2,
            b_zero=4, act_type="relu", act_params=None, dst_type="u8", dst_scale=0.3, dst_zero=5)


@pytest.mark.parametrize("param, value, error", [
    ("a_shape", "abc", TypeError), ("a_shape", [2, -1], ValueError), ("b_shape", [2.5], TypeError),
    ("b_shape", [4, 3], ValueError), ("b_shape", None, TypeError),
    ("a_type", "int16", ValueError), ("a_type", "nonsense", ValueError), ("b_type", np.int32, ValueError),
    ("dst_type", "bf16", ValueError), ("dst_type", None, ValueError), ("a_type", np.float16, ValueError),
    ("b_type", "f16", ValueError), ("dst_type", synet.DataType.INT32, ValueError), ("a_type", "bool", ValueError),
    ("b_type", np.uint16, ValueError), ("dst_type", np.float64, ValueError), ("a_type", "int64", ValueError),
    ("a_scale", 0.0, ValueError), ("a_scale", -1.0, ValueError), ("a_scale", float("inf"), ValueError),
    ("a_scale", float("nan"), ValueError), ("a_scale", "0.1", ValueError), ("b_scale", None, ValueError),
    ("dst_scale", 0, ValueError), ("dst_scale", float("-inf"), ValueError),
    ("a_zero", -1, ValueError), ("a_zero", 256, ValueError), ("b_zero", 1.5, ValueError),
    ("dst_zero", 300, ValueError), ("dst_zero", True, ValueError),
    ("act_type", "softmax", ValueError), ("act_type", 11, ValueError),
    ("act_params", [[1.0]], ValueError), ("act_params", "abc", ValueError),
])
def test_init_errors(param, value, error):
    args = dict(GOOD, **{param: value})
    with pytest.raises(error, match=param):
        QuantizedAdd(**args)
    with pytest.raises(error, match=param):
        QuantizedAdd().init(**args)


GOOD_I8 = dict(GOOD, a_type="i8", b_type="8i", dst_type="int8", a_zero=-3, b_zero=-128, dst_zero=127)


@pytest.mark.parametrize("param, value", [
    ("a_zero", -129), ("a_zero", 128), ("b_zero", 255), ("b_zero", -200), ("dst_zero", 128), ("dst_zero", 200),
    ("dst_zero", -1.0), ("a_zero", np.int16(300)),
])
def test_init_errors_int8_zero_points(param, value):
    assert QuantizedAdd(**GOOD_I8).enable()
    with pytest.raises(ValueError, match=re.escape(f"{param}: expected an int in [-128, 127] (INT8), got ")):
        QuantizedAdd(**dict(GOOD_I8, **{param: value}))


@pytest.mark.parametrize("value", ["int16", "i16", np.float16, "float16", np.int32, "bfloat16", np.uint16, "bool",
                                   np.complex64, "float64", synet.DataType.INT64, 8])
def test_unsupported_types_rejected(value):
    for param in ("a_type", "b_type", "dst_type"):
        with pytest.raises(ValueError, match=f"^{param}: expected "):
            QuantizedAdd(**dict(GOOD, **{param: value}))


def test_type_error_messages_exact():
    with pytest.raises(ValueError, match=re.escape("a_type: expected FLOAT32, UINT8 or INT8, got INT32")):
        QuantizedAdd(**dict(GOOD, a_type=np.int32))
    with pytest.raises(ValueError, match=re.escape("dst_type: expected FLOAT32, UINT8 or INT8, got FLOAT16")):
        QuantizedAdd(**dict(GOOD, dst_type="f16"))
    with pytest.raises(ValueError, match=re.escape("a_zero: expected an int in [0, 255] (UINT8), got -1")):
        QuantizedAdd(**dict(GOOD, a_zero=-1))
    with pytest.raises(ValueError, match=re.escape("b_scale: expected a finite number > 0, got 0.0")):
        QuantizedAdd(**dict(GOOD, b_scale=0.0))
    u8 = np.zeros((2, 3), np.uint8)
    with pytest.raises(ValueError, match=re.escape("a: expected dtype uint8, int8, float32 or float64 (converted to "
                                                   "float32), got int16")):
        quantized_add(u8.astype(np.int16), u8)
    with pytest.raises(ValueError, match=re.escape("dst_dtype: expected FLOAT32, UINT8 or INT8, got int16")):
        quantized_add(u8, u8, dst_dtype=np.int16)
    with pytest.raises(ValueError, match=re.escape("dst_dtype: expected FLOAT32, UINT8 or INT8, got 'i4'")):
        quantized_add(u8, u8, dst_dtype="i4")


@pytest.mark.parametrize("name", [synet.DataType.INT8, "i8", "8i", "int8", "INT8", " Int8 ", np.int8, np.dtype("int8"),
                                  2])
def test_int8_type_names(name):
    rng = np.random.default_rng(2)
    a, b = make(I8, (3, 4), rng), make(I8, (3, 4), rng)
    expected = context(a, b, I8, SEED_Q).forward(a, b)
    add = QuantizedAdd(a.shape, name, 0.010, 47, b.shape, name, 0.020, 30, "identity", None, name, 0.015, 38)
    got = add.forward(a, b)
    assert got.dtype == np.int8 and np.array_equal(got, expected)
    check(got, a, b, SEED_Q)
    assert np.array_equal(quantized_add(a, b, **SEED_Q, dst_dtype=name), expected)
    # operand types come from the arrays: int8 arrays are INT8
    with pytest.raises(ValueError, match="a: expected dtype int8, got uint8"):
        add.forward(a.view(np.uint8), b)


def test_int8_arrays_infer_int8():
    a = np.array([-128, -1, 0, 1, 127], np.int8)
    b = np.array([3], np.int8)
    got = quantized_add(a, b, a_scale=0.5, a_zero=-2, b_scale=1.0, b_zero=1, dst_scale=0.25, dst_zero=-100,
                        dst_dtype=np.int8)
    # ((a + 2) * 0.5 + 2) / 0.25 - 100 = 2a - 88
    assert got.dtype == np.int8 and got.tolist() == [-128, -90, -88, -86, 127]
    as_u8 = quantized_add(a, b, a_scale=0.5, a_zero=-2, b_scale=1.0, b_zero=1, dst_scale=0.25, dst_zero=100)
    assert as_u8.dtype == np.uint8 and as_u8.tolist() == [0, 110, 112, 114, 255]
    # the same bytes read as uint8 are another tensor
    u = quantized_add(a.view(np.uint8), b.view(np.uint8), a_scale=0.5, a_zero=2, b_scale=1.0, b_zero=1,
                      dst_scale=0.25, dst_zero=100)
    assert u.tolist() == [255, 255, 104, 106, 255]
    mixed = quantized_add(a, np.float32(1.5), a_scale=0.5, a_zero=-2, dst_dtype="f32")
    assert mixed.tolist() == [-61.5, 2.0, 2.5, 3.0, 66.0]


@pytest.mark.parametrize("act, params", [
    ("prelu", None), ("prelu", [0.1, 0.2]), ("prelu", []), ("leaky_relu", []), ("restrict_range", [1.0]),
    ("hswish", [3.0]), ("hard_sigmoid", [0.2]), ("elu", []), ("swish", []), ("mish", []),
])
def test_activation_param_errors(act, params):
    with pytest.raises(ValueError, match="act_params"):
        QuantizedAdd(**dict(GOOD, act_type=act, act_params=params))
    with pytest.raises(ValueError, match="activation_params"):
        quantized_add(np.zeros((2, 3), np.uint8), np.zeros((2, 3), np.uint8), activation=act,
                      activation_params=params)


@pytest.mark.parametrize("act, params", [("restrict_range", [np.nan, 6.0]), ("restrict_range", [0.0, np.nan]),
                                         ("hswish", [np.nan, 1 / 6]), ("hard_sigmoid", [1 / 6, np.nan])])
def test_nan_parameters_of_a_min_or_max_are_refused(act, params):
    """A NaN that enters a min or max has no one meaning (RESTRICT_RANGE with lo NaN gave finite values where
    the formula's comparisons give NaN or 0); ±inf and NaN slopes keep their meaning."""
    message = f"activation_params: {act.upper()} parameters enter a min or max: expected no NaN"
    with pytest.raises(ValueError, match=message):
        quantized_add(np.zeros((2, 3), np.uint8), np.zeros((2, 3), np.uint8), activation=act, activation_params=params)
    with pytest.raises(ValueError, match=message):
        synet.conv_transpose2d(np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 1, 1), np.float32), activation=act,
                               activation_params=params)
    assert quantized_add(np.uint8([1, 2]), np.uint8([3, 4]), activation="restrict_range",
                         activation_params=[0, np.inf]).tolist() == [4, 6]


def test_forward_errors():
    add = QuantizedAdd(**GOOD)
    a = np.zeros((2, 3), np.uint8)
    with pytest.raises(RuntimeError, match="init"):
        QuantizedAdd().forward(a, a)
    with pytest.raises(TypeError, match="a"):
        add.forward([[0, 0, 0], [0, 0, 0]], a)
    with pytest.raises(TypeError, match="b"):
        add.forward(a, 3)
    with pytest.raises(ValueError, match="a: expected dtype uint8"):
        add.forward(a.astype(np.float32), a)
    with pytest.raises(ValueError, match="b: expected 6 elements"):
        add.forward(a, np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="a: expected a C-contiguous"):
        add.forward(np.zeros((3, 2), np.uint8).T, a)
    with pytest.raises(TypeError, match="dst"):
        add.forward(a, a, "out")
    with pytest.raises(ValueError, match="dst: expected dtype uint8"):
        add.forward(a, a, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="dst: expected 6 elements"):
        add.forward(a, a, np.zeros(7, np.uint8))
    ro = np.zeros((2, 3), np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="dst: expected a writeable"):
        add.forward(a, a, ro)
    with pytest.raises(ValueError, match="n_threads"):
        add.forward(a, a, n_threads=0)
    with pytest.raises(TypeError, match="n_threads"):
        add.forward(a, a, n_threads="2")
    # partial overlap with an operand
    buf = np.zeros(12, np.uint8)
    with pytest.raises(ValueError, match="dst: overlaps a"):
        add.forward(buf[:6], a, buf[3:9])
    with pytest.raises(ValueError, match="dst: overlaps b"):
        add.forward(a, buf[:6], buf[1:7])
    add.clear()
    with pytest.raises(RuntimeError, match="init"):
        add.forward(a, a)


def test_functional_errors():
    u8 = np.zeros((2, 3), np.uint8)
    with pytest.raises(ValueError, match="a: .*int64"):
        quantized_add(np.zeros((2, 3), np.int64), u8)
    with pytest.raises(ValueError, match="b: .*float16"):
        quantized_add(u8, np.zeros(3, np.float16))
    with pytest.raises(ValueError, match="a: .*int64"):
        quantized_add([1, 2, 3], u8[0])  # Python ints are int64: no silent reinterpretation
    with pytest.raises(ValueError, match="dst_dtype"):
        quantized_add(u8, u8, dst_dtype=np.int16)
    for dtype in (np.int16, np.uint16, np.float16, np.int32, np.bool_, np.uint64):
        message = f"b: expected dtype uint8, int8, float32 or float64 .*got {np.dtype(dtype)}"
        with pytest.raises(ValueError, match=message):
            quantized_add(u8, np.zeros(3, dtype))
    with pytest.raises(ValueError, match="out: expected shape"):
        quantized_add(u8, u8, dst_dtype=np.int8, out=np.zeros((2, 3), np.uint8))
    with pytest.raises(ValueError, match="b: "):
        quantized_add(u8, np.zeros(4, np.uint8))
    with pytest.raises(TypeError, match="out"):
        quantized_add(u8, u8, out=[0] * 6)
    with pytest.raises(ValueError, match="out: expected shape"):
        quantized_add(u8, u8, out=np.zeros(6, np.uint8))
    with pytest.raises(ValueError, match="out: expected shape"):
        quantized_add(u8, u8, out=np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="out: expected a writeable C-contiguous"):
        quantized_add(u8, u8, out=np.zeros((3, 2), np.uint8).T)
    with pytest.raises(ValueError, match="a_scale"):
        quantized_add(u8, u8, a_scale=0)
    with pytest.raises(ValueError, match="b_zero"):
        quantized_add(u8, u8, b_zero=-3)
    with pytest.raises(ValueError, match="dst_scale"):
        quantized_add(u8, u8, dst_scale=float("nan"))
    with pytest.raises(ValueError, match="dst_zero"):
        quantized_add(u8, u8, dst_zero=256)
    with pytest.raises(ValueError, match="activation"):
        quantized_add(u8, u8, activation="tanh")
    buf = np.zeros(12, np.uint8)   # out partly over an operand: named out, as the functional form calls it
    with pytest.raises(ValueError, match="^out: overlaps a without being a itself"):
        quantized_add(buf[:6], np.ones(6, np.uint8), out=buf[3:9])
    with pytest.raises(ValueError, match="^out: overlaps b without being b itself"):
        quantized_add(np.ones(6, np.uint8), buf[:6], out=buf[1:7])


# ---------------------------------------------------------------------------------------------
# onnxruntime QLinearAdd (com.microsoft)


def _ort_qlinear_add(a, b, q):
    """com.microsoft QLinearAdd of onnxruntime on one thread: UINT8 or INT8 tensors (the type of a)."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    elem = TensorProto.UINT8 if a.dtype == np.uint8 else TensorProto.INT8
    inits = [helper.make_tensor("a_s", TensorProto.FLOAT, [], [q["a_scale"]]),
             helper.make_tensor("a_z", elem, [], [q["a_zero"]]),
             helper.make_tensor("b_s", TensorProto.FLOAT, [], [q["b_scale"]]),
             helper.make_tensor("b_z", elem, [], [q["b_zero"]]),
             helper.make_tensor("c_s", TensorProto.FLOAT, [], [q["dst_scale"]]),
             helper.make_tensor("c_z", elem, [], [q["dst_zero"]])]
    node = helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["c"],
                            domain="com.microsoft")
    out_shape = list(np.broadcast_shapes(a.shape, b.shape))
    graph = helper.make_graph([node], "qadd", [helper.make_tensor_value_info("a", elem, list(a.shape)),
                                               helper.make_tensor_value_info("b", elem, list(b.shape))],
                              [helper.make_tensor_value_info("c", elem, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"a": a, "b": b})[0]


@pytest.mark.parametrize("shapes", [((1, 16, 9, 9), (1, 16, 9, 9)), ((1, 16, 9, 9), (1, 16, 1, 1)),
                                    ((1, 16, 9, 9), ()), ((65536,), (65536,))], ids=str)
@pytest.mark.parametrize("qi", range(3))
@pytest.mark.parametrize("qtype", QTYPES, ids=str)
def test_onnxruntime_qlinear_add(qtype, shapes, qi):
    # u8 + u8 -> u8 and i8 + i8 -> i8 are QLinearAdd: within 1 of onnxruntime (which rounds its own way),
    # and synet is the exact one (check) wherever they differ
    q = SWEEP_SETS[qtype][qi]
    rng = np.random.default_rng(29)
    if shapes[0] == (65536,):
        a, b = all_pairs(1, qtype, qtype)
    else:
        a, b = make(qtype, shapes[0], rng), make(qtype, shapes[1], rng)
    theirs = _ort_qlinear_add(a, b, q)
    ours = quantized_add(a, b, **q, dst_dtype=qtype)
    assert theirs.shape == ours.shape and theirs.dtype == ours.dtype == qtype
    assert np.abs(theirs.astype(int) - ours.astype(int)).max() <= 1
    check(ours, a, b, q)
    big_a, big_b = np.tile(a, 3), np.tile(b, 3)  # the lookup kernel where the output is large
    if shapes[0] == (65536,):
        assert np.array_equal(quantized_add(big_a, big_b, **q, dst_dtype=qtype), np.tile(ours, 3))


def test_huge_ints_and_none_are_named():
    """A Python int beyond float64's range as a per-tensor scale or an activation parameter, and None as a type,
    name their parameter (were OverflowError without a name, and "got float64": NumPy reads None as float64)."""
    a = np.zeros((2, 3), np.uint8)
    with pytest.raises(ValueError, match=r"^a_scale: expected a finite number > 0, got 1000"):
        quantized_add(a, a, a_scale=10**400)
    with pytest.raises(ValueError, match=r"^a_scale: expected a finite number > 0, got 1000"):
        QuantizedAdd((2, 3), "u8", 10**400, 0, (2, 3), "u8", 0.1, 0, "identity", None, "u8", 0.1, 0)
    with pytest.raises(ValueError, match=r"^activation_params: expected a sequence of real numbers"):
        quantized_add(a, a, activation="leaky_relu", activation_params=[10**400])
    with pytest.raises(ValueError, match=r"^dst_dtype: expected FLOAT32, UINT8 or INT8, got None"):
        quantized_add(a, a, dst_dtype=None)
    with pytest.raises(ValueError, match=r"^a_type: expected FLOAT32, UINT8 or INT8, got None"):
        QuantizedAdd((2, 3), None, 0.1, 0, (2, 3), "u8", 0.1, 0, "identity", None, "u8", 0.1, 0)
