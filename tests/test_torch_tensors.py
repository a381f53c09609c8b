"""torch.Tensor arguments of the functional forms, as a PyTorch user passes them: a layer's weight (it requires
gradients, which NumPy's conversion refuses), bfloat16 tensors (NumPy's conversion refuses them too), strided
views; the same bits as the same values in NumPy arrays. Tensors NumPy cannot see raise a TypeError naming the
parameter. Skipped where torch is not installed."""

import ml_dtypes
import numpy as np
import pytest

import synet
import synet.onnx

torch = pytest.importorskip("torch", reason="torch is not installed")

BF16 = np.dtype(ml_dtypes.bfloat16)


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def numpy_of(tensor):
    """The tensor's values as a NumPy array, bfloat16 as ml_dtypes.bfloat16 (independent of synet's reading)."""
    t = tensor.detach()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(BF16)
    return t.numpy().copy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.float16])
def test_conv_transpose2d_takes_a_layers_tensors(dtype):
    torch.manual_seed(1)
    layer = torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1).to(dtype)
    x = torch.randn(2, 8, 5, 7, dtype=dtype, requires_grad=True)
    assert layer.weight.requires_grad and layer.bias.requires_grad
    got = synet.conv_transpose2d(x, layer.weight, layer.bias, stride=2, padding=1, output_padding=1)
    expected = synet.conv_transpose2d(numpy_of(x), numpy_of(layer.weight), numpy_of(layer.bias), stride=2,
                                      padding=1, output_padding=1)
    assert isinstance(got, np.ndarray) and got.dtype == expected.dtype and got.shape == (2, 6, 10, 14)
    assert got.dtype == (BF16 if dtype == torch.bfloat16 else np.float32)
    assert bits(got) == bits(expected)
    assert x.grad is None and layer.weight.grad is None   # nothing recorded, nothing changed
    if dtype == torch.float32:   # the values torch computes from the same bfloat16-rounded operands
        ref = torch.nn.functional.conv_transpose2d(
            x.detach().bfloat16().double(), layer.weight.detach().bfloat16().double(), layer.bias.detach().double(),
            stride=2, padding=1, output_padding=1)
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-5)


def test_strided_tensors_are_read_where_they_lie():
    torch.manual_seed(2)
    x = torch.randn(1, 5, 6, 4).permute(0, 3, 1, 2)   # NCHW seen over NHWC memory (channels_last)
    w = torch.randn(3, 4, 2, 2).transpose(0, 1)       # (4, 3, 2, 2), not contiguous
    assert not x.is_contiguous() and not w.is_contiguous()
    got = synet.conv_transpose2d(x, w, stride=2)
    assert bits(got) == bits(synet.conv_transpose2d(numpy_of(x), numpy_of(w), stride=2))
    xb = x.bfloat16()
    assert bits(synet.conv_transpose2d(xb, w, stride=2)) == bits(synet.conv_transpose2d(numpy_of(xb), numpy_of(w),
                                                                                         stride=2))


def test_activation_params_may_be_a_tensor():
    torch.manual_seed(3)
    x, w = torch.randn(1, 4, 3, 3), torch.randn(4, 5, 3, 3)
    slopes = torch.nn.Parameter(torch.linspace(-0.5, 0.5, 5))
    got = synet.conv_transpose2d(x, w, activation="prelu", activation_params=slopes)
    expected = synet.conv_transpose2d(numpy_of(x), numpy_of(w), activation="prelu",
                                      activation_params=numpy_of(slopes))
    assert bits(got) == bits(expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_gather_elements_takes_tensors(dtype):
    data = torch.arange(24).reshape(2, 3, 4).to(dtype)
    if dtype.is_floating_point:
        data.requires_grad_()
    index = torch.tensor([[[0, 2, 1, 0]], [[2, 2, 0, 1]]])
    got = synet.gather_elements(data, index, axis=1)
    expected = synet.gather_elements(numpy_of(data), index.numpy(), axis=1)
    assert got.dtype == expected.dtype and bits(got) == bits(expected)
    assert got.dtype == (BF16 if dtype == torch.bfloat16 else numpy_of(data).dtype)
    ref = torch.gather(data.detach(), 1, index)
    np.testing.assert_array_equal(got.astype(np.float64), ref.double().numpy())


def test_quantized_add_takes_tensors_and_tensor_scales():
    torch.manual_seed(4)
    a = torch.randint(0, 256, (1, 3, 4, 4), dtype=torch.uint8)
    b = torch.randint(0, 256, (1, 3, 4, 4), dtype=torch.uint8)
    scales = torch.tensor([0.01, 0.02, 0.03], dtype=torch.float64)   # as q_per_channel_scales() returns them
    zeros = torch.tensor([3, 4, 5])
    got = synet.quantized_add(a, b, a_scale=scales, a_zero=zeros, b_scale=torch.tensor(0.02), b_zero=7,
                              dst_scale=0.03, dst_zero=9, activation="relu")
    expected = synet.quantized_add(a.numpy(), b.numpy(), a_scale=[0.01, 0.02, 0.03], a_zero=[3, 4, 5], b_scale=0.02,
                                   b_zero=7, dst_scale=0.03, dst_zero=9, activation="relu")
    assert bits(got) == bits(expected)


def test_conversions_and_onnx_take_tensors():
    x = torch.randn(37, requires_grad=True)
    assert bits(synet.float32_to_bfloat16(x)) == bits(synet.float32_to_bfloat16(numpy_of(x)))
    assert bits(synet.round_to_bfloat16(x)) == bits(synet.round_to_bfloat16(numpy_of(x)))
    xb = x.detach().bfloat16()
    assert bits(synet.bfloat16_to_float32(xb)) == bits(synet.bfloat16_to_float32(numpy_of(xb)))
    np.testing.assert_array_equal(synet.bfloat16_to_float32(xb), xb.float().numpy())
    data, index = torch.randn(3, 4, requires_grad=True), torch.tensor([[1, 0, 2, 2]])
    assert bits(synet.onnx.gather_elements(data, index, axis=0)) == \
        bits(synet.onnx.gather_elements(numpy_of(data), index.numpy(), axis=0))


def _unreadable_tensors():
    yield "sparse", torch.randn(1, 2, 3, 3).to_sparse()
    yield "meta", torch.empty(1, 2, 3, 3, device="meta")


@pytest.mark.parametrize("kind", [kind for kind, _ in _unreadable_tensors()])
def test_tensors_numpy_cannot_read_raise_type_error_naming_the_parameter(kind):
    tensor = dict(_unreadable_tensors())[kind]
    w = np.ones((2, 2, 1, 1), np.float32)
    with pytest.raises(TypeError, match=r"^x: expected a tensor on the CPU that NumPy can read \("):
        synet.conv_transpose2d(tensor, w)
    with pytest.raises(TypeError, match=r"^weight: expected a tensor on the CPU that NumPy can read \("):
        synet.conv_transpose2d(np.ones((1, 2, 3, 3), np.float32), tensor)
    with pytest.raises(TypeError, match=r"^data: expected a tensor"):
        synet.gather_elements(tensor, np.zeros((1, 2, 3, 3), np.int64))
    with pytest.raises(TypeError, match=r"^a_scale: expected a tensor"):
        synet.quantized_add(np.ones(3, np.uint8), np.ones(3, np.uint8), a_scale=tensor)


def test_a_tensor_parameter_changed_in_place_gives_the_new_result():
    """The plan caches key a tensor by its values (its hash is its identity): an optimiser step that moves a
    PReLU weight, or a scale changed in place, must not get the old plan; equal fresh tensors share one."""
    x, w = np.full((1, 1, 2, 2), -1.0, np.float32), np.ones((1, 1, 1, 1), np.float32)
    prelu = torch.nn.PReLU(1, init=0.25)
    before = synet.conv_transpose2d(x, w, activation="prelu", activation_params=prelu.weight)
    with torch.no_grad():
        prelu.weight.add_(4.0)
    after = synet.conv_transpose2d(x, w, activation="prelu", activation_params=prelu.weight)
    assert before.ravel()[0] == np.float32(-0.25) and after.ravel()[0] == np.float32(-4.25)
    scale = torch.tensor(1.0)
    a, b = np.array([10], np.uint8), np.array([0], np.uint8)
    assert synet.quantized_add(a, b, a_scale=scale)[0] == 10
    scale.fill_(2.0)
    assert synet.quantized_add(a, b, a_scale=scale)[0] == 20
    synet.clear_plan_cache()
    for _ in range(5):
        synet.quantized_add(a, b, a_scale=torch.tensor(2.0), activation="prelu", activation_params=torch.tensor([0.5]))
    assert synet.plan_cache_info()["quantized_add"]["hits"] == 4


def test_lists_of_tensors_are_read_as_their_values():
    lo, hi = torch.nn.Parameter(torch.tensor(-1.0)), torch.nn.Parameter(torch.tensor(1.0))
    x, w = np.array([[[[-3.0, 0.5]]]], np.float32), np.ones((1, 1, 1, 1), np.float32)
    got = synet.conv_transpose2d(x, w, [lo], activation="restrict_range", activation_params=[lo, hi])
    assert bits(got) == bits(synet.conv_transpose2d(x, w, [-1.0], activation="restrict_range",
                                                    activation_params=[-1.0, 1.0]))
    half = [torch.tensor(0.5, dtype=torch.bfloat16), torch.tensor(0.25, dtype=torch.bfloat16)]
    assert bits(synet.gather_elements(half, [1, 0])) == bits(np.array([0.25, 0.5], BF16))
    a = np.array([4, 6], np.uint8)
    got = synet.quantized_add(a, a, a_scale=[torch.tensor(0.5), torch.tensor(2.0)], axis=0)
    assert bits(got) == bits(synet.quantized_add(a, a, a_scale=[0.5, 2.0], axis=0))


def test_out_overlapping_a_tensor_bias_is_refused():
    out = np.zeros((1, 2, 2, 2), np.float32)
    bias = torch.from_numpy(out.reshape(-1)[:2])
    for x, w in ((np.ones((1, 1, 2, 2), np.float32), np.ones((1, 2, 1, 1), np.float32)),
                 (np.zeros((1, 0, 2, 2), np.float32), np.zeros((0, 2, 1, 1), np.float32))):   # (act(bias) alone)
        with pytest.raises(ValueError, match="^out: must not overlap x or bias$"):
            synet.conv_transpose2d(x, w, bias, out=out)
    for bias in (torch.nn.Parameter(torch.tensor([1.0, 2.0])), torch.tensor([1.0, 2.0], dtype=torch.bfloat16)):
        got = synet.conv_transpose2d(np.zeros((1, 0, 2, 2), np.float32), np.zeros((0, 2, 1, 1), np.float32), bias,
                                     out=out)
        assert got is out and np.array_equal(out[0, :, 0, 0], [1.0, 2.0])


def test_conjugate_negative_and_float8_tensors_are_read():
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    assert bits(synet.gather_elements(z.conj(), [1, 0])) == bits(np.array([3 + 4j, 1 - 2j], np.complex64))
    assert np.array_equal(synet.round_to_bfloat16(z.conj().imag), [-2.0, 4.0])
    f8 = torch.tensor([0.5, 3.0]).to(torch.float8_e4m3fn)
    got = synet.gather_elements(f8, [1, 0])
    assert got.dtype == np.dtype(ml_dtypes.float8_e4m3fn) and np.array_equal(got.astype(np.float32), [3.0, 0.5])


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
def test_tensor_dtypes_numpy_lacks_are_value_errors():
    """complex32 (as the quantised dtypes) has no NumPy equivalent: a bad dtype (ValueError, SPEC section 7)."""
    half = torch.tensor([0.5, 1.0], dtype=torch.complex32)
    with pytest.raises(ValueError, match=r"^a: torch.complex32 has no NumPy dtype$"):
        synet.quantized_add(half, np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match=r"^data: torch.complex32 has no NumPy dtype$"):
        synet.gather_elements(half, [0])


def test_torch_dtypes_name_data_types():
    x, w = np.ones((1, 2, 3, 3), np.float32), np.ones((2, 2, 1, 1), np.float32)
    got = synet.conv_transpose2d(x, w, out_dtype=torch.bfloat16)
    assert got.dtype == BF16 and bits(got) == bits(synet.conv_transpose2d(x, w, out_dtype="bfloat16"))
    a = np.array([1, 2], np.uint8)
    assert synet.quantized_add(a, a, dst_dtype=torch.float32).dtype == np.float32
    with pytest.raises(ValueError, match=r"^out_dtype: expected float32 or bfloat16, got FLOAT16$"):
        synet.conv_transpose2d(x, w, out_dtype=torch.float16)


def test_dask_forms_take_tensor_parameters():
    da = pytest.importorskip("dask.array")
    import synet.dask as sd
    a = da.from_array(np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 3, 4), chunks=1)
    b = np.zeros((2, 3, 4), np.float32)
    slopes = np.array([0.1, 0.2, 0.3], np.float32)
    got = sd.quantized_add(a, b, dst_dtype="float32", activation="prelu", activation_params=torch.from_numpy(slopes))
    expected = synet.quantized_add(a.compute(), b, dst_dtype="float32", activation="prelu", activation_params=slopes)
    assert bits(got.compute()) == bits(expected)
    x = da.from_array(np.ones((2, 2, 3, 3), np.float32), chunks=1)
    w, bias = torch.nn.Parameter(torch.ones(2, 2, 1, 1)), torch.nn.Parameter(torch.tensor([0.5, -0.5]))
    got = sd.conv_transpose2d(x, w, bias, activation="leaky_relu", activation_params=torch.tensor([0.25]))
    expected = synet.conv_transpose2d(x.compute(), numpy_of(w), numpy_of(bias), activation="leaky_relu",
                                      activation_params=[0.25])
    assert bits(got.compute()) == bits(expected)
