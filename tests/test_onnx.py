"""synet.onnx: ONNX attribute mapping and the onnx.reference operators (SPEC section 10).

* ONNX's own backend node tests of GatherElements and ConvTranspose run through
  ``ReferenceEvaluator(model, new_ops=synet.onnx.OPS)``: GatherElements equals the expected outputs;
  ConvTranspose matches an independent float64 evaluation on BF16-rounded operands within SPEC section
  6's tolerance, and its distance from ONNX's float32 expected outputs is recorded.
* QLinearAdd (uint8, int8, broadcasting) against onnxruntime's com.microsoft QLinearAdd.
* A small decoder model (ConvTranspose -> QuantizeLinear -> QLinearAdd -> DequantizeLinear ->
  GatherElements) and a torch.onnx-exported ConvTranspose2d against onnxruntime.
* Attribute mapping (auto_pad, output_shape, output_padding, pads, group, dilation) against
  onnxruntime's float32 ConvTranspose and the float64 reference, and the errors for bad attributes.

The float64 references (tests/reference.py, and the pads of the ONNX specification below) are written
independently of synet.onnx.
"""

from __future__ import annotations

import functools
import io
import math
import time
import warnings
import zlib

import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from reference import BF16, bf16_round, check_quantized, dequantize, reference_nd  # noqa: E402

import synet  # noqa: E402
import synet.onnx as sonnx  # noqa: E402

try:
    import onnxruntime as ort
except ImportError:  # pragma: no cover
    ort = None

needs_ort = pytest.mark.skipif(ort is None, reason="onnxruntime is not installed")

OPSET = 22  # ConvTranspose-22, GatherElements-13, QuantizeLinear-21 ...


# ---------------------------------------------------------------------------------------------
# float64 references (tests/reference.py) with ONNX's attributes (from the ONNX specification)


def spec_pads(x_shape, w_shape, attrs):
    """ConvTranspose's pads (all begins, then all ends) from its attributes, by the specification's
    formulas (floor division), plus the output_padding and full output sizes."""
    n = len(x_shape) - 2
    ins, ks = x_shape[2:], w_shape[2:]
    s = attrs.get("strides", [1] * n)
    d = attrs.get("dilations", [1] * n)
    op = attrs.get("output_padding", [0] * n)
    full = [s[a] * (ins[a] - 1) + d[a] * (ks[a] - 1) + 1 for a in range(n)]
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if "output_shape" in attrs or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = list(attrs["output_shape"])[-n:] if "output_shape" in attrs else [ins[a] * s[a] for a in range(n)]
        begins, ends = [], []
        for a in range(n):
            total = full[a] + op[a] - target[a]
            if auto_pad == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
        pads = begins + ends
    elif auto_pad == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = list(attrs.get("pads", [0] * (2 * n)))
    return pads, op, full


def convt_ref(x, w, b, attrs):
    """ConvTranspose in float64 by its definition (tests/reference.py's reference_nd: every x[n, c, i] * w[c, m, k]
    lands on full output position i * stride + k * dilation) with the specification's pads: the full output
    cropped by the pads (a negative pad extends it with positions nothing reaches), extended by output_padding,
    plus B. Returns (y, sum of |x * w| per output element)."""
    n = np.ndim(x) - 2
    pads, op, _ = spec_pads(np.shape(x), np.shape(w), attrs)
    return reference_nd(x, w, b, attrs.get("strides", [1] * n), pads[:n], [pads[n + a] - op[a] for a in range(n)],
                        attrs.get("dilations", [1] * n), attrs.get("group", 1))


def spec_tolerance(ref, mag):
    """SPEC section 6: FP32 output within 1e-5 * sum|x * w| of the float64 evaluation on the
    BF16-rounded operands, plus the rounding of the result (bias) to float32."""
    return 1e-5 * mag + 2.0 ** -22 * np.abs(ref)


def fp32_tolerance(ref, mag):
    """synet (BF16 operands) against a float32 runtime on the original operands: a BF16 value (8
    significant bits) is within 2**-8 (relative) of the float32 one, so each product within
    2**-7 + 2**-16; both sums add their float32 error (<= 1e-5 * sum|x * w| each)."""
    return (2.0 ** -7 + 2.0 ** -15 + 3e-5) * mag + 2.0 ** -22 * np.abs(ref)


# ---------------------------------------------------------------------------------------------
# Model builders


def make_model(nodes, inputs, outputs, initializers=(), opsets=(("", OPSET),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10  # onnxruntime 1.17+ reads it
    return model


def vi(name, elem_type, shape=None):
    return helper.make_tensor_value_info(name, elem_type, shape)


def convt_model(x_shape, w_shape, with_bias=False, elem_type=TensorProto.FLOAT, **attrs):
    names = ["X", "W"] + (["B"] if with_bias else [])
    node = helper.make_node("ConvTranspose", names, ["Y"], **attrs)
    ins = [vi("X", elem_type, list(x_shape)), vi("W", elem_type, list(w_shape))]
    if with_bias:
        ins.append(vi("B", elem_type, [w_shape[1] * attrs.get("group", 1)]))
    return make_model([node], ins, [vi("Y", elem_type)])


def ort_session(model):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_synet(model, feeds):
    return ReferenceEvaluator(model, new_ops=sonnx.OPS).run(None, feeds)


@pytest.fixture
def spy(monkeypatch):
    """Counts the calls of synet's functional forms made through synet.onnx (proves synet ran)."""
    calls = {}
    for name in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "gather_elements", "quantized_add"):
        original = getattr(synet, name, None)
        if original is None:
            continue

        def wrapper(*args, _original=original, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(synet, name, wrapper)
    return calls


def need_rank(x_ndim):
    name = {3: "conv_transpose1d", 4: "conv_transpose2d", 5: "conv_transpose3d"}[x_ndim]
    if not hasattr(synet, name):
        pytest.skip(f"synet.{name} is not in this synet yet")


def report(record_property, label, got, expected, mag=None):
    """Record (and print) how far synet's result is from a float32 result: the largest absolute error,
    the largest relative error (over the elements larger than 1e-3 of the largest: near a zero crossing
    a relative error says nothing) and, given sum|x * w| per element, the largest error relative to it
    (the quantity BF16 rounding bounds, by about 2**-7)."""
    got = np.asarray(got, np.float64)
    expected = np.asarray(expected, np.float64)
    diff = np.abs(got - expected)
    if not diff.size:
        return
    max_abs = float(diff.max())
    big = np.abs(expected) > 1e-3 * np.abs(expected).max()
    max_rel = float((diff[big] / np.abs(expected[big])).max()) if big.any() else 0.0
    record_property(f"{label}_max_abs_err_vs_fp32", max_abs)
    record_property(f"{label}_max_rel_err_vs_fp32", max_rel)
    text = f"{label}: max abs {max_abs:.3g}, max rel {max_rel:.3g}"
    if mag is not None:
        scaled = float((diff / np.maximum(mag, 1e-30)).max())
        record_property(f"{label}_max_err_over_sum_abs_xw", scaled)
        text += f", max err / sum|x*w| {scaled:.3g} (2**-7 = {2.0 ** -7:.3g})"
    print(text + " from float32")


# ---------------------------------------------------------------------------------------------
# ONNX's backend node tests


@functools.cache
def backend_cases():
    """Every backend node test case whose model has a GatherElements or ConvTranspose node.

    onnx.backend.test.case.node.collect_testcases(op_type) imports the case modules once per process
    (their export functions call expect(), which appends to a module-global list and filters by the
    op_type given at that first import); called without op_type it collects every case, and the models
    whose node lists hold our operators are kept (this finds the function-expanded NLLLoss cases that
    use GatherElements too). Each case has .model (ModelProto) and .data_sets [(inputs, outputs)],
    inputs in the order of model.graph.input."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    found = {}
    for case in cases:
        ops = {n.op_type for n in case.model.graph.node}
        if ops & {"GatherElements", "ConvTranspose"}:
            found.setdefault(case.name, case)
    return found


def backend_names(op, single):
    names = []
    for name, case in backend_cases().items():
        ops = [n.op_type for n in case.model.graph.node]
        if op in ops and (ops == [op]) == single:
            names.append(name)
    return sorted(names)


def feeds_of(case, inputs):
    return {v.name: value for v, value in zip(case.model.graph.input, inputs)}


def test_backend_cases_found():
    # onnx 1.23: 3 GatherElements and 11 ConvTranspose single-node cases (more in later versions)
    assert len(backend_names("GatherElements", True)) >= 3
    assert len(backend_names("ConvTranspose", True)) >= 11
    assert len(backend_names("GatherElements", False)) >= 1  # NLLLoss expanded into a function


@pytest.mark.parametrize("name", backend_names("GatherElements", True))
def test_backend_gather_elements(name, spy):
    case = backend_cases()[name]
    for inputs, outputs in case.data_sets:
        got = run_synet(case.model, feeds_of(case, inputs))
        for g, e in zip(got, outputs):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)
    assert spy.get("gather_elements", 0) == len(case.data_sets)


@pytest.mark.parametrize("name", backend_names("GatherElements", False))
def test_backend_models_using_gather_elements(name, spy):
    """Models that use GatherElements among other nodes: the same bits as the plain evaluator (the
    gather is exact and every other node is the reference's), and the expected outputs within the
    case's tolerance."""
    case = backend_cases()[name]
    for inputs, outputs in case.data_sets:
        feeds = feeds_of(case, inputs)
        got = run_synet(case.model, feeds)
        plain = ReferenceEvaluator(case.model).run(None, feeds)
        for g, p, e in zip(got, plain, outputs):
            np.testing.assert_array_equal(g, p)
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
    assert spy.get("gather_elements", 0) >= 1


@pytest.mark.parametrize("name", backend_names("ConvTranspose", True))
def test_backend_conv_transpose(name, spy, record_property):
    case = backend_cases()[name]
    node = case.model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    for inputs, outputs in case.data_sets:
        need_rank(inputs[0].ndim)
        got = run_synet(case.model, feeds_of(case, inputs))[0]
        expected = outputs[0]
        assert got.dtype == expected.dtype and got.shape == expected.shape
        bias = inputs[2] if len(inputs) > 2 else None
        ref, mag = convt_ref(bf16_round(inputs[0]), bf16_round(inputs[1]), bias, attrs)
        assert ref.shape == got.shape
        assert np.all(np.abs(got - ref) <= spec_tolerance(ref, mag)), np.abs(got - ref).max()
        ref32, mag32 = convt_ref(inputs[0], inputs[1], bias, attrs)
        assert np.all(np.abs(got - expected) <= fp32_tolerance(ref32, mag32) + case.atol)
        report(record_property, name, got, expected, mag32)
    function = {3: "conv_transpose1d", 4: "conv_transpose2d", 5: "conv_transpose3d"}[case.data_sets[0][0][0].ndim]
    assert spy.get(function) == len(case.data_sets)


# ---------------------------------------------------------------------------------------------
# ConvTranspose attribute mapping: resolved geometry


def geometry(x_shape, w_shape, **attrs):
    return sonnx.conv_transpose_geometry(x_shape, w_shape, **attrs)


def test_geometry_defaults():
    g = geometry((2, 4, 5, 6), (4, 3, 3, 2))
    assert g.output_shape == (2, 3, 7, 7)
    assert g.pads == (0, 0, 0, 0) and g.padding == (0, 0, 0, 0)
    assert g.strides == (1, 1) and g.dilations == (1, 1) and g.group == 1 and g.kernel_shape == (3, 2)
    assert g.synet_function == "conv_transpose2d"


@pytest.mark.parametrize("auto_pad, pads", [("SAME_UPPER", (0, 1)), ("SAME_LOWER", (1, 0))])
def test_geometry_same_odd_total(auto_pad, pads):
    # 1-D: in 4, k 3, s 2 -> full 9, SAME wants 8: total padding 1, the odd unit at the end for
    # SAME_UPPER and at the beginning for SAME_LOWER
    g = geometry((1, 1, 4), (1, 1, 3), auto_pad=auto_pad, strides=[2])
    assert g.pads == pads and g.output_shape == (1, 1, 8)
    g = geometry((1, 1, 4, 4), (1, 1, 3, 3), auto_pad=auto_pad, strides=[2, 2])
    assert g.pads == (pads[0], pads[0], pads[1], pads[1]) and g.output_shape == (1, 1, 8, 8)


def test_geometry_same_even_total():
    for mode in ("SAME_UPPER", "SAME_LOWER"):
        g = geometry((1, 1, 4), (1, 1, 4), auto_pad=mode, strides=[2])  # full 10, target 8
        assert g.pads == (1, 1) and g.output_shape == (1, 1, 8)


def test_geometry_same_with_output_padding_and_dilation():
    # full = 2*(5-1) + 2*(3-1) + 1 = 13, + op 1 = 14, target 10: total 4 -> (2, 2)
    g = geometry((1, 2, 5), (2, 1, 3), auto_pad="SAME_LOWER", strides=[2], dilations=[2], output_padding=[1])
    assert g.pads == (2, 2) and g.output_shape == (1, 1, 10)
    assert g.padding == (2, 1) and g.synet_output_padding == (0,)


def test_geometry_valid():
    g = geometry((1, 1, 3, 3), (1, 1, 2, 2), auto_pad="VALID", strides=[2, 3], output_padding=[1, 2])
    assert g.pads == (0, 0, 0, 0) and g.output_shape == (1, 1, 7, 10)
    assert g.padding == (0, 0, 0, 0) and g.synet_output_padding == (1, 2)


@pytest.mark.parametrize("auto_pad, expected", [
    ("NOTSET", (2, 1)), ("SAME_LOWER", (2, 1)), ("VALID", (2, 1)), ("SAME_UPPER", (1, 2))])
def test_geometry_output_shape_split(auto_pad, expected):
    # in 4, k 3, s 2: full 9; output_shape 6 -> total 3: Else -> (3 - 1, 1), SAME_UPPER -> (1, 2)
    g = geometry((1, 1, 4), (1, 1, 3), strides=[2], output_shape=[6], auto_pad=auto_pad)
    assert g.pads == expected and g.output_shape == (1, 1, 6)


def test_geometry_output_shape_beyond_full_output():
    # ONNX's test_convtranspose_output_shape: full 9 x 7, output_shape 10 x 8: total -1 on both axes
    # -> pads (0, -1): one more row/column at the end, what output_padding 1 gives
    g = geometry((1, 1, 3, 3), (1, 2, 3, 3), strides=[3, 2], output_shape=[10, 8])
    assert g.pads == (0, 0, -1, -1) and g.output_shape == (1, 2, 10, 8)
    assert g.padding == (0, 0, 0, 0) and g.synet_output_padding == (1, 1)
    same = geometry((1, 1, 3, 3), (1, 2, 3, 3), strides=[3, 2], output_padding=[1, 1])
    assert same.output_shape == g.output_shape and same.padding == g.padding
    assert same.synet_output_padding == g.synet_output_padding


def test_geometry_output_shape_ignores_pads_and_uses_output_padding():
    # pads are ignored when output_shape is given; output_padding enters the total
    g = geometry((1, 1, 3, 3), (1, 2, 3, 3), strides=[3, 2], output_shape=[10, 8], kernel_shape=[3, 3],
                 output_padding=[1, 1], pads=[5, 5, 5, 5])
    assert g.pads == (0, 0, 0, 0) and g.output_shape == (1, 2, 10, 8)
    assert g.padding == (0, 0, 0, 0) and g.synet_output_padding == (1, 1)


def test_geometry_output_shape_with_batch_and_channels():
    g = geometry((2, 4, 3), (4, 3, 3), strides=[2], output_shape=[2, 6, 7], group=2)
    assert g.output_shape == (2, 6, 7) and g.pads == (0, 0)


def test_geometry_asymmetric_pads_and_output_padding():
    g = geometry((1, 2, 4, 5), (2, 3, 3, 3), strides=[2, 3], pads=[1, 0, 2, 3], output_padding=[1, 2])
    # H: 2*3 + 3 = 9 + 1 - 1 - 2 = 7; W: 3*4 + 3 = 15 + 2 - 0 - 3 = 14
    assert g.output_shape == (1, 3, 7, 14)
    assert g.pads == (1, 0, 2, 3) and g.padding == (1, 0, 1, 1) and g.synet_output_padding == (0, 0)
    g = geometry((1, 2, 4, 5), (2, 3, 3, 3), strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 2])
    assert g.padding == (1, 0, 0, 0) and g.synet_output_padding == (1, 1)


def test_geometry_3d_order():
    g = geometry((1, 2, 3, 4, 5), (2, 2, 2, 3, 3), strides=[1, 2, 3], pads=[0, 1, 2, 1, 0, 2])
    assert g.synet_function == "conv_transpose3d"
    assert g.padding == (0, 1, 2, 1, 0, 2)
    assert g.output_shape == (1, 2, 4 - 1, 2 * 3 + 3 - 1, 3 * 4 + 3 - 4)


BAD_ATTRIBUTES = [
    (dict(auto_pad="same_upper"), "auto_pad"),
    (dict(auto_pad="SAME"), "auto_pad"),
    (dict(auto_pad=3), "auto_pad"),
    (dict(pads=[0, -1, 0, 0]), "pads"),
    (dict(pads=[1, 1]), "pads"),
    (dict(pads=[1, 1, 1, 1], auto_pad="SAME_UPPER"), "pads"),
    (dict(pads=[1, 1, 1, 1], auto_pad="VALID"), "pads"),
    (dict(pads=[5, 0, 5, 0]), "pads"),                        # leaves no output
    (dict(strides=[0, 1]), "strides"),
    (dict(strides=[2]), "strides"),
    (dict(strides=[1.5, 1]), "strides"),
    (dict(dilations=[1, 0]), "dilations"),
    (dict(group=0), "group"),
    (dict(group=3), "group"),                                 # does not divide C = 4
    (dict(group=True), "group"),
    (dict(kernel_shape=[3, 2]), "kernel_shape"),
    (dict(kernel_shape=[3]), "kernel_shape"),
    (dict(output_padding=[2, 0], strides=[2, 1]), "output_padding"),
    (dict(output_padding=[-1, 0]), "output_padding"),
    (dict(output_padding=[1, 0]), "output_padding"),          # stride 1, dilation 1
    (dict(output_shape=[9]), "output_shape"),
    (dict(output_shape=[0, 5]), "output_shape"),
    (dict(output_shape=[1, 5, 9, 9]), "output_shape"),        # Y has 6 channels
    (dict(output_shape=[9, 20], strides=[2, 2]), "output_shape"),   # far beyond the full output
    (dict(output_shape=[6, 5], strides=[1, 1]), "output_shape"),    # full 5 x 5: +1 needs output_padding 1
    (dict(output_shape=[11, 9], strides=[2, 2], auto_pad="SAME_UPPER"), "output_shape"),  # begin pad -1
]


@pytest.mark.parametrize("attrs, name", BAD_ATTRIBUTES)
def test_geometry_bad_attributes(attrs, name):
    with pytest.raises(ValueError, match=f"'{name}'"):
        geometry((1, 4, 3, 3), (4, 3, 3, 3), **attrs)


def test_geometry_same_needing_negative_begin_pad():
    # k 1, s 2: full 2*in - 1, SAME wants 2*in: total -1. SAME_UPPER puts the larger pad at the end:
    # pads (-1, 0), a position before the full output -> refused; SAME_LOWER: (0, -1) -> computed
    with pytest.raises(ValueError, match="'auto_pad'.*pads \\(-1, 0\\)"):
        geometry((1, 1, 4), (1, 1, 1), auto_pad="SAME_UPPER", strides=[2])
    g = geometry((1, 1, 4), (1, 1, 1), auto_pad="SAME_LOWER", strides=[2])
    assert g.pads == (0, -1) and g.output_shape == (1, 1, 8) and g.synet_output_padding == (1,)


def test_geometry_bad_shapes():
    with pytest.raises(ValueError, match="X"):
        geometry((1, 4), (4, 3))
    with pytest.raises(ValueError, match="W"):
        geometry((1, 4, 3, 3), (4, 3, 3))
    with pytest.raises(ValueError, match="W"):
        geometry((1, 4, 3, 3), (2, 3, 3, 3))
    with pytest.raises(ValueError, match="X"):
        geometry((1, 4, 0, 3), (4, 3, 3, 3))
    with pytest.raises(NotImplementedError, match="1, 2 or 3 spatial axes"):
        geometry((1, 4, 3, 3, 3, 3), (4, 3, 1, 1, 1, 1))
    with pytest.raises(ValueError, match=r"X: expected N >= 0 and C >= 0, got shape \(-1, -2, 5\)"):
        geometry((-1, -2, 5), (-2, 1, 3))
    with pytest.raises(ValueError, match="W: expected M/group >= 0"):
        geometry((1, 2, 5), (2, -1, 3))
    with pytest.raises(TypeError, match="x_shape, w_shape: expected sequences of ints"):
        geometry((1, 2.0, 5), (2, 1, 3))


def test_conv_transpose_bad_inputs():
    x = np.ones((1, 4, 3, 3), np.float32)
    w = np.ones((4, 3, 3, 3), np.float32)
    with pytest.raises(ValueError, match="W: expected X's dtype"):
        sonnx.conv_transpose(x, w.astype(np.float64))
    with pytest.raises(ValueError, match="X: expected float32"):
        sonnx.conv_transpose(x.astype(np.int32), w)
    with pytest.raises(ValueError, match="B: expected shape \\(6,\\)"):
        sonnx.conv_transpose(x, w, np.ones(3, np.float32), group=2)
    with pytest.raises(ValueError, match="B: expected X's dtype"):
        sonnx.conv_transpose(x, w, np.ones(3, np.float16))


def test_opset_10_models():
    """ConvTranspose-1 (opsets 1-10) meant something else by SAME and output_shape: refused there;
    pads and VALID mean the same in every version."""
    x = np.ones((1, 1, 3, 3), np.float32)
    w = np.ones((1, 1, 3, 3), np.float32)
    for attrs in (dict(auto_pad="SAME_UPPER", strides=[2, 2]), dict(output_shape=[6, 6], strides=[2, 2])):
        model = convt_model(x.shape, w.shape, **attrs)
        model.opset_import[0].version = 10
        with pytest.raises(NotImplementedError, match="ConvTranspose-1"):
            run_synet(model, {"X": x, "W": w})
    model = convt_model(x.shape, w.shape, pads=[1, 0, 0, 1], strides=[2, 2])
    model.opset_import[0].version = 10
    got = run_synet(model, {"X": x, "W": w})[0]
    ref, _ = convt_ref(x, w, None, dict(pads=[1, 0, 0, 1], strides=[2, 2]))
    np.testing.assert_array_equal(got, ref)


def test_op_bad_attribute_through_evaluator():
    model = convt_model((1, 1, 3, 3), (1, 1, 3, 3), auto_pad="SAME")
    with pytest.raises(ValueError, match="auto_pad"):
        run_synet(model, {"X": np.ones((1, 1, 3, 3), np.float32), "W": np.ones((1, 1, 3, 3), np.float32)})


# ---------------------------------------------------------------------------------------------
# ConvTranspose attribute mapping: values against onnxruntime (float32) and the float64 reference

ORT_CASES = [
    # (x_shape, w_shape, attrs)
    ((1, 3, 5, 4), (3, 2, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),     # total 1: odd
    ((1, 3, 5, 4), (3, 2, 3, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
    ((2, 3, 4, 5), (3, 2, 4, 2), dict(auto_pad="SAME_UPPER", strides=[3, 2], dilations=[2, 1])),
    ((2, 3, 4, 5), (3, 2, 4, 2), dict(auto_pad="SAME_LOWER", strides=[3, 2], dilations=[2, 1])),
    ((1, 2, 4, 4), (2, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2], output_padding=[1, 1])),
    ((1, 2, 4, 4), (2, 3, 3, 3), dict(auto_pad="VALID", strides=[2, 3], output_padding=[1, 2])),
    ((1, 2, 4, 5), (2, 3, 3, 3), dict(output_shape=[8, 10], strides=[2, 2])),       # totals 1, 1
    ((1, 2, 4, 5), (2, 3, 3, 3), dict(output_shape=[6, 9], strides=[2, 2])),        # totals 3, 2
    ((1, 2, 4, 5), (2, 3, 3, 3), dict(output_shape=[6, 9], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 4, 5), (2, 3, 3, 3), dict(output_shape=[10, 12], strides=[2, 3])),      # total -1: end
    ((1, 2, 4, 5), (2, 3, 3, 3), dict(output_shape=[8, 12], strides=[2, 3], output_padding=[1, 2])),
    ((1, 2, 4, 5), (2, 3, 3, 3), dict(strides=[2, 3], output_padding=[1, 2])),
    ((1, 2, 4, 5), (2, 3, 3, 3), dict(strides=[2, 3], pads=[0, 2, 1, 0], output_padding=[1, 2])),
    ((2, 4, 5, 5), (4, 3, 3, 3), dict(pads=[2, 0, 0, 1])),                           # asymmetric
    ((2, 4, 5, 5), (4, 3, 4, 2), dict(pads=[1, 3, 2, 0], strides=[3, 2])),
    ((1, 6, 4, 4), (6, 2, 3, 3), dict(group=3, strides=[2, 1])),
    ((2, 6, 4, 4), (6, 1, 3, 3), dict(group=6, strides=[2, 2], pads=[1, 1, 1, 1])),  # depthwise
    ((1, 4, 5, 5), (4, 2, 3, 3), dict(group=2, dilations=[2, 3], pads=[1, 2, 1, 0])),
    ((1, 4, 5, 5), (4, 2, 3, 3), dict(dilations=[2, 2], strides=[3, 2], output_padding=[2, 1])),
    ((1, 3, 6, 6), (3, 2, 3, 3), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                      output_padding=[1, 1])),
]


def ort_case_id(case):
    return "-".join(f"{k}={v}" for k, v in case[2].items()).replace(" ", "")


def convt_inputs(rng, x_shape, w_shape, attrs, with_bias):
    """Random X, W (and B) of a ConvTranspose case: x, w, bias (or None) and the feeds by input name."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    feeds = {"X": x, "W": w}
    bias = None
    if with_bias:
        bias = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32)
        feeds["B"] = bias
    return x, w, bias, feeds


@needs_ort
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("case", ORT_CASES, ids=ort_case_id)
def test_conv_transpose_attributes_against_onnxruntime(case, with_bias, spy, record_property):
    x_shape, w_shape, attrs = case
    rng = np.random.default_rng(zlib.crc32(ort_case_id(case).encode()))
    x, w, bias, feeds = convt_inputs(rng, x_shape, w_shape, attrs, with_bias)
    model = convt_model(x_shape, w_shape, with_bias, **attrs)
    expected = ort_session(model).run(None, feeds)[0]
    got = run_synet(model, feeds)[0]
    assert got.shape == expected.shape and got.dtype == np.float32
    ref32, mag32 = convt_ref(x, w, bias, attrs)
    assert ref32.shape == got.shape
    np.testing.assert_allclose(expected, ref32, rtol=1e-5, atol=1e-5 * mag32.max())  # the reference agrees
    assert np.all(np.abs(got - expected) <= fp32_tolerance(ref32, mag32))
    ref, mag = convt_ref(bf16_round(x), bf16_round(w), bias, attrs)
    assert np.all(np.abs(got - ref) <= spec_tolerance(ref, mag))
    assert spy.get("conv_transpose2d") == 1
    report(record_property, "ort_" + ort_case_id(case), got, expected, mag32)


@needs_ort
@given(
    size=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    group=st.sampled_from([1, 2]),
    channels=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    mode=st.sampled_from(["pads", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER", "output_shape",
                          "output_shape_upper"]),
    data=st.data(),
)
def test_conv_transpose_attributes_random_against_onnxruntime(size, kernel, strides, dilations, group, channels,
                                                              mode, data):
    """Random 2-D attribute sets: where synet accepts them, onnxruntime's shape and values (float32
    tolerance) and the float64 reference; where it refuses, the specification's pads are indeed not
    expressible as pads >= 0 with output_padding < max(stride, dilation)."""
    x_shape = (1, channels[0] * group, *size)
    w_shape = (channels[0] * group, channels[1], *kernel)
    attrs = {"strides": list(strides), "dilations": list(dilations), "group": group}
    # onnxruntime also requires the extension past the full output to be < stride
    attrs["output_padding"] = [data.draw(st.integers(0, s - 1)) for s in strides]
    full = [s * (i - 1) + d * (k - 1) + 1 for i, k, s, d in zip(size, kernel, strides, dilations)]
    if mode == "pads":
        attrs["pads"] = [data.draw(st.integers(0, 3)) for _ in range(4)]
        assume(all(full[a] + attrs["output_padding"][a] - attrs["pads"][a] - attrs["pads"][a + 2] >= 1
                   for a in range(2)))
    elif mode in ("VALID", "SAME_UPPER", "SAME_LOWER"):
        attrs["auto_pad"] = mode
    elif mode.startswith("output_shape"):
        attrs["output_shape"] = [data.draw(st.integers(1, f + op + 1)) for f, op in zip(full, attrs["output_padding"])]
        if mode == "output_shape_upper":
            attrs["auto_pad"] = "SAME_UPPER"
    pads, op, _ = spec_pads(x_shape, w_shape, attrs)
    limits = [max(s, d) for s, d in zip(strides, dilations)]
    expressible = all(pads[a] >= 0 and op[a] - pads[a + 2] < limits[a] for a in range(2))
    event("refused" if not expressible else f"computed: {mode}")
    if not expressible:
        with pytest.raises(ValueError, match="'output_shape'|'auto_pad'"):
            geometry(x_shape, w_shape, **attrs)
        return
    g = geometry(x_shape, w_shape, **attrs)
    assert list(g.pads) == pads
    # onnxruntime clamps a negative total padding to 0 (extension at the end only, < stride)
    assume(all(pads[a] >= 0 and op[a] - pads[a + 2] < strides[a] for a in range(2)))
    assume(not (min(pads) < 0 and mode in ("SAME_UPPER", "SAME_LOWER")))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    model = convt_model(x_shape, w_shape, **attrs)
    expected = ort_session(model).run(None, {"X": x, "W": w})[0]
    got = run_synet(model, {"X": x, "W": w})[0]
    assert got.shape == expected.shape == g.output_shape
    ref32, mag32 = convt_ref(x, w, None, attrs)
    assert np.all(np.abs(got - expected) <= fp32_tolerance(ref32, mag32))
    ref, mag = convt_ref(bf16_round(x), bf16_round(w), None, attrs)
    assert np.all(np.abs(got - ref) <= spec_tolerance(ref, mag))


def test_same_lower_negative_total_follows_the_specification():
    """k 1, s 2, SAME_LOWER: the specification's output is in * stride = 8 (pads (0, -1): the last
    position holds only the bias). onnxruntime 1.32 clamps the total to 0 and returns 7 positions."""
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 1, 4)
    w = np.full((1, 1, 1, 1), 2.0, np.float32)
    b = np.array([0.5], np.float32)
    model = convt_model(x.shape, w.shape, True, auto_pad="SAME_LOWER", strides=[1, 2])
    got = run_synet(model, {"X": x, "W": w, "B": b})[0]
    np.testing.assert_array_equal(got[0, 0, 0], [2.5, 0.5, 4.5, 0.5, 6.5, 0.5, 8.5, 0.5])


# ---------------------------------------------------------------------------------------------
# ConvTranspose: 1-D / 3-D, dtypes


ND_CASES = [
    ((2, 3, 7), (3, 2, 3), dict(strides=[2], pads=[1, 2], output_padding=[1])),
    ((1, 4, 6), (4, 1, 4), dict(group=2, dilations=[2], auto_pad="SAME_UPPER", strides=[3])),
    ((1, 4, 6), (4, 1, 4), dict(group=2, dilations=[2], auto_pad="SAME_LOWER", strides=[3])),
    ((1, 2, 5), (2, 3, 3), dict(strides=[2], output_shape=[12])),
    ((1, 2, 3, 4, 5), (2, 3, 3, 2, 3), dict(strides=[2, 1, 3], pads=[1, 0, 2, 0, 1, 1])),
    ((2, 4, 3, 3, 3), (4, 1, 2, 3, 2), dict(group=2, dilations=[1, 2, 2], auto_pad="SAME_UPPER",
                                            strides=[2, 2, 1])),
    ((1, 2, 3, 3, 2), (2, 2, 3, 3, 3), dict(strides=[3, 2, 2], output_shape=[10, 8, 5],
                                            output_padding=[1, 1, 0])),
    ((1, 2, 3, 3, 2), (2, 2, 2, 2, 2), dict(strides=[2, 3, 2], output_padding=[1, 2, 1],
                                            pads=[0, 1, 0, 1, 0, 0])),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("case", ND_CASES, ids=ort_case_id)
def test_conv_transpose_1d_3d(case, with_bias, spy, record_property):
    x_shape, w_shape, attrs = case
    need_rank(len(x_shape))
    rng = np.random.default_rng(len(x_shape) * 100 + len(attrs))
    x, w, bias, feeds = convt_inputs(rng, x_shape, w_shape, attrs, with_bias)
    model = convt_model(x_shape, w_shape, with_bias, **attrs)
    got = run_synet(model, feeds)[0]
    ref, mag = convt_ref(bf16_round(x), bf16_round(w), bias, attrs)
    assert got.shape == ref.shape
    assert np.all(np.abs(got - ref) <= spec_tolerance(ref, mag))
    assert spy.get(sonnx.conv_transpose_geometry(x_shape, w_shape, **attrs).synet_function) == 1
    if ort is not None:
        expected = ort_session(model).run(None, feeds)[0]
        ref32, mag32 = convt_ref(x, w, bias, attrs)
        assert np.all(np.abs(got - expected) <= fp32_tolerance(ref32, mag32))
        report(record_property, "nd_" + ort_case_id(case), got, expected, mag32)


@pytest.mark.parametrize("rank", [1, 3])
def test_conv_transpose_1d_3d_call_arguments(rank, monkeypatch):
    """What synet.onnx passes to conv_transpose1d / conv_transpose3d (checked with a stand-in, so it
    runs before those functions exist): PyTorch's names, padding as all begins then all ends."""
    calls = []

    def stand_in(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, **kwargs):
        calls.append(dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups,
                          dilation=dilation, **kwargs))
        return np.zeros(expected_shape, np.float32)

    monkeypatch.setattr(synet, f"conv_transpose{rank}d", stand_in, raising=False)
    if rank == 1:
        x_shape, w_shape = (1, 4, 5), (4, 3, 3)
        attrs = dict(strides=[2], pads=[1, 3], output_padding=[1], group=2, dilations=[2])
        expected = dict(stride=(2,), padding=(1, 2), output_padding=(0,), groups=2, dilation=(2,))
        expected_shape = (1, 6, 2 * 4 + 2 * 2 + 1 + 1 - 1 - 3)
    else:
        x_shape, w_shape = (1, 2, 3, 4, 5), (2, 1, 2, 3, 3)
        attrs = dict(strides=[1, 2, 3], pads=[1, 0, 2, 0, 2, 0], output_padding=[0, 1, 2])
        expected = dict(stride=(1, 2, 3), padding=(1, 0, 2, 0, 1, 0), output_padding=(0, 0, 2), groups=1,
                        dilation=(1, 1, 1))
        expected_shape = (1, 1, 2 + 2 - 1, 6 + 3 + 1 - 2, 12 + 3 + 2 - 2)
    x = np.zeros(x_shape, np.float32)
    w = np.zeros(w_shape, np.float32)
    y = sonnx.conv_transpose(x, w, **attrs)
    assert y.shape == expected_shape
    (call,) = calls
    assert {k: call[k] for k in expected} == expected
    assert call["out_dtype"] == np.float32


def test_conv_transpose_missing_synet_function(monkeypatch):
    monkeypatch.delattr(synet, "conv_transpose1d", raising=False)
    with pytest.raises(NotImplementedError, match="synet.conv_transpose1d"):
        sonnx.conv_transpose(np.zeros((1, 1, 3), np.float32), np.zeros((1, 1, 2), np.float32))


@pytest.mark.parametrize("dtype, elem_type", [(np.float16, TensorProto.FLOAT16), (np.float64, TensorProto.DOUBLE),
                                              (BF16, TensorProto.BFLOAT16), (np.float32, TensorProto.FLOAT)])
def test_conv_transpose_dtypes(dtype, elem_type):
    """Every ConvTranspose type computes with BF16 operands and float32 sums; Y has X's dtype."""
    rng = np.random.default_rng(3)
    attrs = dict(strides=[2, 2], pads=[1, 0, 0, 1], group=2)
    x = rng.standard_normal((2, 4, 5, 3)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 2)).astype(dtype)
    b = rng.standard_normal(6).astype(dtype)
    model = convt_model(x.shape, w.shape, True, elem_type, **attrs)
    got = run_synet(model, {"X": x, "W": w, "B": b})[0]
    assert got.dtype == np.dtype(dtype)
    # float64 operands are rounded to BF16 directly from float64 (no double rounding)
    ref, mag = convt_ref(bf16_round(x), bf16_round(w), b.astype(np.float32), attrs)
    as32 = sonnx.conv_transpose(x.astype(np.float32) if dtype != np.float64 else bf16_round(x).astype(np.float32),
                                w.astype(np.float32) if dtype != np.float64 else bf16_round(w).astype(np.float32),
                                b.astype(np.float32), **attrs)
    assert np.all(np.abs(as32 - ref) <= spec_tolerance(ref, mag))
    np.testing.assert_array_equal(got, as32.astype(dtype))  # the float32 result, converted once


def test_conv_transpose_float64_rounds_once():
    """1 + 2**-8 + 2**-30 is just above the tie between the BF16 neighbours 1 and 1 + 2**-7: rounded
    directly it is 1 + 2**-7; through float32 (1 + 2**-8, a tie, to even) it would be 1."""
    x = np.full((1, 1, 1, 1), 1 + 2.0 ** -8 + 2.0 ** -30)
    y = sonnx.conv_transpose(x, np.ones((1, 1, 1, 1)))
    assert y.dtype == np.float64 and y[0, 0, 0, 0] == 1 + 2.0 ** -7


def test_conv_transpose_empty_batch():
    y = sonnx.conv_transpose(np.zeros((0, 2, 3, 3), np.float32), np.ones((2, 3, 2, 2), np.float32), strides=[2, 2])
    assert y.shape == (0, 3, 6, 6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_conv_transpose_no_output_channels(dtype):
    """W [C, 0, kernel...]: an empty Y of X's dtype, as onnxruntime gives (the kernels need M >= 1)."""
    y = sonnx.conv_transpose(np.ones((1, 4, 5, 5), dtype), np.ones((4, 0, 3, 3), dtype), np.ones(0, dtype),
                             strides=[1, 2])
    assert y.shape == (1, 0, 7, 11) and y.dtype == dtype


def test_byte_swapped_arrays_are_read_as_synet_reads_them():
    """Big-endian inputs (a file's tensors) give what native ones give, as synet's own functions take them."""
    x, w = np.arange(1, 4, dtype=np.float32).reshape(1, 1, 3), np.ones((1, 1, 2), np.float32)
    assert np.array_equal(sonnx.conv_transpose(x.astype(">f4"), w.astype(">f4"), np.ones(1, ">f4")),
                          sonnx.conv_transpose(x, w, np.ones(1, np.float32)))
    data, indices = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([[2, -1], [0, 1]])
    for index_dtype in (">i4", ">i8"):
        assert np.array_equal(sonnx.gather_elements(data, indices.astype(index_dtype), 1),
                              sonnx.gather_elements(data, indices, 1))
    a = np.array([1, 2, 3], np.uint8)
    assert np.array_equal(sonnx.qlinear_add(a, np.array(0.5, ">f4"), None, a, np.array([0.5], ">f4"), None,
                                            np.array(1, ">f4")),
                          sonnx.qlinear_add(a, np.float32(0.5), None, a, np.float32(0.5), None, np.float32(1)))


# ---------------------------------------------------------------------------------------------
# GatherElements


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.float16, np.bool_, BF16, np.complex128, object])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_gather_elements_values(dtype, index_dtype):
    rng = np.random.default_rng(5)
    data = (rng.standard_normal((3, 5, 4)) * 10).astype(dtype)
    for axis in range(-3, 3):
        size = data.shape[axis]
        shape = list(data.shape)
        shape[axis] = 6
        shape[(axis + 1) % 3] -= 1  # a sub-block off the axis
        idx = rng.integers(-size, size, shape).astype(index_dtype)
        got = sonnx.gather_elements(data, idx, axis)
        a = axis % 3
        for pos in np.ndindex(*idx.shape):
            src = list(pos)
            src[a] = idx[pos] % size
            assert got[pos] == data[tuple(src)]
        assert got.dtype == data.dtype and got.shape == idx.shape


@pytest.mark.parametrize("dtype", [np.float32, object])
def test_gather_elements_errors(dtype):
    data = np.zeros((3, 4), dtype)
    with pytest.raises(IndexError, match=r"indices\[1, 0\] = 3"):
        sonnx.gather_elements(data, np.array([[0], [3]]), 0)
    with pytest.raises(IndexError, match=r"-5"):
        sonnx.gather_elements(data, np.array([[0, -5]]), 1)
    with pytest.raises(ValueError, match="'axis'"):
        sonnx.gather_elements(data, np.zeros((1, 1), np.int64), 2)
    with pytest.raises(ValueError, match="indices: expected int32 or int64"):
        sonnx.gather_elements(data, np.zeros((1, 1), np.int16), 0)
    with pytest.raises(ValueError, match="rank"):
        sonnx.gather_elements(data, np.zeros(1, np.int64), 0)
    # the same messages whether synet's kernel or NumPy gathers (object data)
    with pytest.raises(ValueError, match=r"^indices: size 5 of dimension 1 exceeds data's 4 \(only axis 0 may"):
        sonnx.gather_elements(data, np.zeros((1, 5), np.int64), 0)
    for n_threads, error in ((0, ValueError), ("2", TypeError), (10**6, ValueError)):
        with pytest.raises(error, match="n_threads"):
            sonnx.gather_elements(data, np.zeros((1, 1), np.int64), 0, n_threads=n_threads)


@pytest.mark.parametrize("m", [0, 1])
def test_conv_transpose_checks_n_threads_for_every_output(m):
    """An empty Y (M = 0) checks n_threads as a full one does."""
    x, w = np.ones((1, 1, 3), np.float32), np.ones((1, m, 2), np.float32)
    for n_threads, error in ((0, ValueError), ("x", TypeError)):
        with pytest.raises(error, match="n_threads"):
            sonnx.conv_transpose(x, w, n_threads=n_threads)
    assert sonnx.conv_transpose(x, w, n_threads=1).shape == (1, m, 4)


def test_conv_transpose_float16_overflow_is_inf_without_warning():
    """A float16 Y beyond float16's range is inf, as onnxruntime gives it, with no RuntimeWarning (test suites
    run with warnings as errors)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = sonnx.conv_transpose(np.full((1, 2, 1, 1), 60000, np.float16), np.ones((2, 1, 1, 1), np.float16))
    assert y.dtype == np.float16 and np.isposinf(y).all()


def test_conv_transpose_empty_auto_pad_is_notset():
    """auto_pad "" (as some exporters write it): NOTSET, as onnxruntime reads it."""
    x, w = np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 2, 2), np.float32)
    for empty in ("", b""):
        np.testing.assert_array_equal(sonnx.conv_transpose(x, w, auto_pad=empty, strides=[2, 2]),
                                      sonnx.conv_transpose(x, w, strides=[2, 2]))
    assert sonnx.conv_transpose_geometry(x.shape, w.shape, auto_pad="", strides=[2, 2]).output_shape == (1, 1, 6, 6)


def test_gather_elements_long_axis_through_evaluator():
    """An axis of 100: onnx 1.23's own reference GatherElements (np.choose) stops at 63 elements."""
    rng = np.random.default_rng(2)
    data = rng.standard_normal((3, 100)).astype(np.float32)
    idx = rng.integers(-100, 100, (3, 150))
    node = helper.make_node("GatherElements", ["D", "I"], ["O"], axis=1)
    model = make_model([node], [vi("D", TensorProto.FLOAT), vi("I", TensorProto.INT64)], [vi("O", TensorProto.FLOAT)])
    got = run_synet(model, {"D": data, "I": idx})[0]
    np.testing.assert_array_equal(got, np.take_along_axis(data, idx % 100, 1))


def test_gather_elements_strings_through_evaluator():
    data = np.array([["a", "b"], ["c", "d"]], dtype=object)
    node = helper.make_node("GatherElements", ["D", "I"], ["O"], axis=1)
    model = make_model([node], [vi("D", TensorProto.STRING), vi("I", TensorProto.INT64)], [vi("O", TensorProto.STRING)])
    got = run_synet(model, {"D": data, "I": np.array([[1, 0], [-1, 1]])})[0]
    assert got.tolist() == [["b", "a"], ["d", "d"]]


# ---------------------------------------------------------------------------------------------
# QLinearAdd (com.microsoft)


def qlinear_add_model(dtype, a_shape, b_shape, quant, omit=()):
    """A QLinearAdd model; quant = (a_scale, a_zero, b_scale, b_zero, c_scale, c_zero) as initializers,
    `omit` the names of zero points left out (optional inputs)."""
    elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    names = ["as", "az", "bs", "bz", "cs", "cz"]
    inits = []
    for name, value in zip(names, quant):
        if name in omit:
            continue
        inits.append(numpy_helper.from_array(np.array(value, np.float32 if name.endswith("s") else dtype), name))
    ins = ["A", "as", "az", "B", "bs", "bz", "cs", "cz"]
    ins = ["" if n in omit else n for n in ins]
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("QLinearAdd", ins, ["C"], domain="com.microsoft")
    return make_model([node], [vi("A", elem, list(a_shape)), vi("B", elem, list(b_shape))], [vi("C", elem)], inits,
                      opsets=(("", OPSET), ("com.microsoft", 1)))


def check_qlinear(got, a, b, quant, dtype):
    """SPEC section 5 (tests/reference.py, with the scales as the float32 values the model holds): exact
    wherever the float64 value is not within 1e-3 of a rounding tie, within 1 everywhere. Returns the mask
    of near-tie positions."""
    a_scale, a_zero, b_scale, b_zero, c_scale, c_zero = (float(np.float32(v)) if i % 2 == 0 else int(v)
                                                         for i, v in enumerate(quant))
    value = dequantize(a, a_scale, a_zero) + dequantize(b, b_scale, b_zero)
    assert got.dtype == dtype
    return check_quantized(got, value, c_scale, c_zero)


SHAPES = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (1, 3, 1, 1)), ((4, 5), (2, 3, 4, 5)), ((257,), (1,)),
          ((3, 1, 7), (1, 6, 1)), ((), (5,)), ((64, 65), (64, 65))]


@needs_ort
@pytest.mark.parametrize("scales", ["random", "decimal"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_qlinear_add_against_onnxruntime(dtype, shapes, scales, spy, record_property):
    """Random scales, and decimal ones (0.02, 0.035, 0.05: sums land on ties x.5 often, where
    onnxruntime's float32 ratios and synet's division may round to different neighbours)."""
    a_shape, b_shape = shapes
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape) + (dtype == np.int8))
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, a_shape, dtype=dtype)
    b = rng.integers(info.min, info.max + 1, b_shape, dtype=dtype)
    zeros = rng.integers(info.min, info.max + 1, 3, dtype=dtype)
    if scales == "random":
        sa, sb, sc = rng.uniform(0.005, 0.05), rng.uniform(0.005, 0.05), rng.uniform(0.01, 0.08)
    else:
        sa, sb, sc = 0.02, 0.035, 0.05
    quant = (sa, zeros[0], sb, zeros[1], sc, zeros[2])
    model = qlinear_add_model(dtype, a_shape, b_shape, quant)
    expected = ort_session(model).run(None, {"A": a, "B": b})[0]
    got = run_synet(model, {"A": a, "B": b})[0]
    assert got.dtype == expected.dtype == np.dtype(dtype)
    assert got.shape == expected.shape == np.broadcast_shapes(a_shape, b_shape)
    near_tie = check_qlinear(got, a, b, quant, dtype)
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    assert diff.max(initial=0) <= 1
    # onnxruntime rounds (A - za) * (sa / sc) + (B - zb) * (sb / sc) in float32: off by one only at ties
    assert not np.any(diff[~near_tie])
    record_property("qlinear_add_differs_from_ort", int((diff > 0).sum()))
    assert spy.get("quantized_add") == 1


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("omit", [("az", "bz", "cz"), ("cz",), ("az",)])
def test_qlinear_add_optional_zero_points(dtype, omit):
    """Absent zero points are 0. (onnxruntime 1.32 refuses a model whose A_zero_point or B_zero_point
    is an empty optional input at type inference; a missing trailing C_zero_point it runs.)"""
    rng = np.random.default_rng(9)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, (3, 4), dtype=dtype)
    b = rng.integers(info.min, info.max + 1, (4,), dtype=dtype)
    quant = [0.02, 5, 0.03, -4 if dtype == np.int8 else 4, 0.04, 3]
    model = qlinear_add_model(dtype, a.shape, b.shape, quant, omit)
    got = run_synet(model, {"A": a, "B": b})[0]
    used = [0 if name in omit else v for name, v in zip(["as", "az", "bs", "bz", "cs", "cz"], quant)]
    check_qlinear(got, a, b, used, dtype)
    if ort is not None and omit == ("cz",):
        np.testing.assert_array_equal(got, ort_session(model).run(None, {"A": a, "B": b})[0])


def test_qlinear_add_exact_saturation_and_one_element_tensors():
    a = np.array([0, 255, 128], np.uint8)
    b = np.array([255, 255, 0], np.uint8)
    got = sonnx.qlinear_add(a, np.array([1.0], np.float32), np.array([0], np.uint8), b, np.float32(1.0),
                            np.uint8(0), np.array([0.5], np.float32), np.array([10], np.uint8))
    np.testing.assert_array_equal(got, [255, 255, 255])
    got = sonnx.qlinear_add(np.array([-128], np.int8), np.float32(1), np.int8(0), np.array([-128], np.int8),
                            np.float32(1), np.int8(0), np.float32(1), np.int8(0))
    np.testing.assert_array_equal(got, [-128])


QLINEAR_ERRORS = [
    (dict(A=np.zeros(2, np.int16)), "A: expected uint8 or int8"),
    (dict(B=np.zeros(2, np.int8)), "B: expected A's type"),
    (dict(B=np.zeros(3, np.uint8)), "B: expected a shape that broadcasts"),
    (dict(A_scale=np.float64(0.1)), "A_scale: expected float32"),
    (dict(B_scale=np.array([0.1, 0.2], np.float32)), "B_scale: expected a scalar or a 1-element"),
    (dict(C_scale=np.float32(0)), "C_scale: expected a finite scale > 0"),
    (dict(C_scale=np.float32(np.inf)), "C_scale: expected a finite scale > 0"),
    (dict(C_scale=None), "C_scale: a required input"),
    (dict(A_zero_point=np.int8(0)), "A_zero_point: expected the quantized type uint8"),
    (dict(C_zero_point=np.zeros((1, 1), np.uint8)), "C_zero_point: expected a scalar or a 1-element"),
]


@pytest.mark.parametrize("change, message", QLINEAR_ERRORS)
def test_qlinear_add_errors(change, message):
    args = dict(A=np.zeros(2, np.uint8), A_scale=np.float32(0.1), A_zero_point=np.uint8(0), B=np.zeros(2, np.uint8),
                B_scale=np.float32(0.1), B_zero_point=None, C_scale=np.float32(0.1), C_zero_point=None)
    args.update(change)
    with pytest.raises(ValueError, match=message):
        sonnx.qlinear_add(**args)


# ---------------------------------------------------------------------------------------------
# A small decoder: ConvTranspose -> QuantizeLinear -> QLinearAdd -> DequantizeLinear -> GatherElements


def decoder_model(dtype, batch=1, c_in=8, c_out=4, size=6, qlinear=True, seed=0):
    """The decoder with constant initializers, and its input. qlinear=False spells the add with ONNX
    standard nodes (DequantizeLinear x 2, Add, QuantizeLinear), for the plain reference evaluator."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.standard_normal((batch, c_in, size, size)).astype(np.float32)
    w = (rng.standard_normal((c_in, c_out, 4, 4)) / math.sqrt(c_in * 4)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(c_out)).astype(np.float32)
    attrs = dict(strides=[2, 2], pads=[1, 1, 1, 1])
    y, _ = convt_ref(x, w, bias, attrs)
    out = 2 * size
    middle = (int(info.min) + int(info.max) + 1) // 2
    y_scale = np.float32(np.abs(y).max() / 100)
    y_zero = np.array(middle + 3, dtype)
    skip = rng.integers(info.min, info.max + 1, (1, c_out, 1, out), dtype=dtype)
    skip_scale, skip_zero = np.float32(0.0123), np.array(middle - 7, dtype)
    c_scale, c_zero = np.float32(1.37 * y_scale), np.array(middle + 1, dtype)
    idx = rng.integers(-out, out, (batch, c_out, out, 5)).astype(np.int64)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B"),
             numpy_helper.from_array(np.array(y_scale), "ys"), numpy_helper.from_array(y_zero, "yz"),
             numpy_helper.from_array(skip, "skip"), numpy_helper.from_array(np.array(skip_scale), "ss"),
             numpy_helper.from_array(skip_zero, "sz"), numpy_helper.from_array(np.array(c_scale), "cs"),
             numpy_helper.from_array(c_zero, "cz"), numpy_helper.from_array(idx, "idx")]
    nodes = [helper.make_node("ConvTranspose", ["X", "W", "B"], ["Y"], kernel_shape=[4, 4], **attrs),
             helper.make_node("QuantizeLinear", ["Y", "ys", "yz"], ["Yq"])]
    opsets = [("", OPSET)]
    if qlinear:
        nodes.append(helper.make_node("QLinearAdd", ["Yq", "ys", "yz", "skip", "ss", "sz", "cs", "cz"], ["Zq"],
                                      domain="com.microsoft"))
        opsets.append(("com.microsoft", 1))
    else:
        nodes += [helper.make_node("DequantizeLinear", ["Yq", "ys", "yz"], ["Yd"]),
                  helper.make_node("DequantizeLinear", ["skip", "ss", "sz"], ["Sd"]),
                  helper.make_node("Add", ["Yd", "Sd"], ["Zf"]),
                  helper.make_node("QuantizeLinear", ["Zf", "cs", "cz"], ["Zq"])]
    nodes += [helper.make_node("DequantizeLinear", ["Zq", "cs", "cz"], ["Z"]),
              helper.make_node("GatherElements", ["Z", "idx"], ["OUT"], axis=3)]
    model = make_model(nodes, [vi("X", TensorProto.FLOAT, list(x.shape))], [vi("OUT", TensorProto.FLOAT)], inits,
                       opsets)
    params = dict(x=x, w=w, bias=bias, attrs=attrs, y_scale=float(y_scale), skip_scale=float(skip_scale),
                  c_scale=float(c_scale), idx=idx)
    return model, params


def decoder_tolerance(p):
    """How far the decoder's output may move when its ConvTranspose computes on BF16 operands instead of
    float32 ones, element by element:

    * the ConvTranspose output moves by at most d = fp32_tolerance (up to about 2**-7 * sum|x * w|);
    * QuantizeLinear maps it to integers: |dq| <= floor(d / y_scale) + 1 (one more step when a value
      straddles a rounding boundary, however small d is);
    * QLinearAdd scales that by y_scale / c_scale and rounds again: |dc| <= floor(dq * y_scale / c_scale
      + 1e-3) + 1 (the + 1e-3 covers onnxruntime's float32 ratios, see qlinear_add);
    * DequantizeLinear multiplies by c_scale (in float32: the caller adds its rounding);
      GatherElements picks elements, bound included."""
    ref, mag = convt_ref(p["x"], p["w"], p["bias"], p["attrs"])
    d = fp32_tolerance(ref, mag)
    dq = np.floor(d / p["y_scale"]) + 1
    dc = np.floor(dq * p["y_scale"] / p["c_scale"] + 1e-3) + 1
    return np.take_along_axis(dc * p["c_scale"], np.where(p["idx"] < 0, p["idx"] + ref.shape[3], p["idx"]), 3)


@needs_ort
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_decoder_model_against_onnxruntime(dtype, spy, record_property):
    model, p = decoder_model(dtype)
    feeds = {"X": p["x"]}
    expected = ort_session(model).run(None, feeds)[0]
    got = run_synet(model, feeds)[0]
    assert got.shape == expected.shape == p["idx"].shape and got.dtype == np.float32
    tol = decoder_tolerance(p)
    diff = np.abs(got - expected)
    assert np.all(diff <= tol + 2.0 ** -20 * np.abs(expected))  # + the float32 rounding of DequantizeLinear
    steps = np.rint(diff / p["c_scale"])
    record_property("decoder_elements_off_by_one_step", int((steps == 1).sum()))
    record_property("decoder_elements", int(diff.size))
    print(f"decoder {np.dtype(dtype).name}: {(steps > 0).sum()} of {diff.size} outputs differ from onnxruntime, "
          f"by at most {int(steps.max())} quantization step(s)")
    assert spy.get("conv_transpose2d") == 1 and spy.get("quantized_add") == 1 and spy.get("gather_elements") == 1


def test_decoder_model_standard_form_matches():
    """The same decoder with the add spelled in ONNX standard nodes gives the same output with synet's
    ConvTranspose and GatherElements (the add's float32 rounding may move a tie by one step)."""
    model_q, p = decoder_model(np.uint8)
    model_s, _ = decoder_model(np.uint8, qlinear=False)
    a = run_synet(model_q, {"X": p["x"]})[0]
    b = run_synet(model_s, {"X": p["x"]})[0]
    assert np.all(np.abs(a - b) <= p["c_scale"] * 1.0001)


@needs_ort
def test_torch_exported_conv_transpose2d(record_property):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(4, 3, (2, 3), stride=(1, 2), padding=(0, 1), dilation=(2, 1), bias=False),
    ).eval()
    x = torch.randn(2, 6, 5, 7)
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (x,), buffer, dynamo=False, opset_version=17, input_names=["X"],
                              output_names=["Y"])
    except Exception as exc:  # no exporter offline (e.g. the dynamo one needs onnxscript)
        pytest.skip(f"torch.onnx.export is not usable here: {type(exc).__name__}: {exc}")
    model = onnx.load_from_string(buffer.getvalue())
    assert [n.op_type for n in model.graph.node].count("ConvTranspose") == 2
    with torch.no_grad():
        expected_torch = module(x).numpy()
    expected = ort_session(model).run(None, {"X": x.numpy()})[0]
    got = ReferenceEvaluator(model, new_ops=sonnx.OPS).run(None, {"X": x.numpy()})[0]
    assert got.shape == expected.shape == expected_torch.shape
    # a bound for the two layers: the first layer's BF16 error, carried through the second's |w|,
    # plus the second layer's own
    w1 = module[0].weight.detach().numpy()
    b1 = module[0].bias.detach().numpy()
    w2 = module[2].weight.detach().numpy()
    a1 = dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1], group=2)
    a2 = dict(strides=[1, 2], pads=[0, 1, 0, 1], dilations=[2, 1])
    h, hmag = convt_ref(x.numpy(), w1, b1, a1)
    e1 = fp32_tolerance(h, hmag)
    h = np.maximum(h, 0)
    y, ymag = convt_ref(h, w2, None, a2)
    carried, _ = convt_ref(e1, np.abs(w2), None, a2)
    tol = fp32_tolerance(y, ymag) + carried * (1 + 2.0 ** -7)
    assert np.all(np.abs(got - expected) <= tol)
    assert np.all(np.abs(got - expected_torch) <= tol + 1e-5 * ymag)
    report(record_property, "torch_export", got, expected)


# ---------------------------------------------------------------------------------------------
# Speed: the evaluator with synet's operators against the plain reference evaluator (a measurement,
# recorded, never asserted)


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def test_speed_ratio_recorded(record_property):
    model_q, p = decoder_model(np.uint8, batch=1, c_in=16, c_out=8, size=16)
    model_s, _ = decoder_model(np.uint8, batch=1, c_in=16, c_out=8, size=16, qlinear=False)
    feeds = {"X": p["x"]}
    plain = ReferenceEvaluator(model_s)
    with_synet = ReferenceEvaluator(model_q, new_ops=sonnx.OPS)
    with_synet_standard = ReferenceEvaluator(model_s, new_ops=sonnx.OPS)
    assert np.all(np.abs(plain.run(None, feeds)[0] - with_synet.run(None, feeds)[0])
                  <= decoder_tolerance(p) + p["c_scale"] * 1.0001)
    t_plain = best_of(lambda: plain.run(None, feeds), 2)
    t_synet = best_of(lambda: with_synet.run(None, feeds), 5)
    t_synet_standard = best_of(lambda: with_synet_standard.run(None, feeds), 5)
    record_property("plain_reference_s", t_plain)
    record_property("synet_ops_s", t_synet)
    record_property("speed_ratio", t_plain / t_synet)
    record_property("speed_ratio_standard_form", t_plain / t_synet_standard)
    print(f"decoder 16->8 channels, 16x16 -> 32x32: plain ReferenceEvaluator {t_plain * 1e3:.1f} ms, "
          f"with synet.onnx.OPS {t_synet * 1e3:.2f} ms (ratio {t_plain / t_synet:.0f}x; standard-node add "
          f"{t_synet_standard * 1e3:.2f} ms, {t_plain / t_synet_standard:.0f}x)")
