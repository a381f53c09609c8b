"""Fuzz GatherElements and gather_elements: results must be right or Python exceptions."""

import numpy as np
from fuzzing import arrays, attempt, failed, junk
from hypothesis import given
from hypothesis import strategies as st
from reference import gather_reference

import synet


# (no "huge" data: a sub-block of it would be copied, legitimately, at enormous cost)
@given(arrays(huge=False), arrays(), st.one_of(st.integers(-5, 5), junk()), st.one_of(st.none(), arrays()),
       st.one_of(st.none(), st.integers(-3, 3)))
def test_functional(data, indices, axis, out, n_threads):
    result = attempt(synet.gather_elements, data, indices, axis, out=out, n_threads=n_threads)
    if not failed(result):
        expected = gather_reference(data, indices, axis)
        assert np.array_equal(np.asarray(result).view(np.uint8), expected.view(np.uint8))


OPERATIONS = st.lists(st.sampled_from(["init", "init_same", "set_index", "forward", "forward_none", "clear",
                                       "enable", "size"]), min_size=1, max_size=8)


@given(OPERATIONS, st.lists(junk(), min_size=8, max_size=8), arrays(), arrays(), st.one_of(st.none(), arrays()),
       st.tuples(st.sampled_from(["f32", "u8", "bf16", np.float64, np.int8]), st.sampled_from(["i32", "i64"]),
                 st.lists(st.integers(0, 3), max_size=3), st.integers(0, 5), st.integers(0, 3), st.integers(0, 5)))
def test_context_in_any_order(operations, junk_args, src, idx, dst, good):
    gather = synet.GatherElements()
    data_type, index_type, outer, src_count, inner, idx_count = good
    good_args = (data_type, index_type, True, 1, outer, src_count, inner, idx_count)
    for operation in operations:
        if operation == "init":
            attempt(gather.init, *junk_args)
        elif operation == "init_same":
            attempt(gather.init, *good_args)
        elif operation == "set_index":
            attempt(gather.set_index, idx)
        elif operation == "forward":
            attempt(gather.forward, src, idx, dst)
        elif operation == "forward_none":
            attempt(gather.forward, src, None, dst)
        elif operation == "clear":
            gather.clear()
        elif operation == "enable":
            assert isinstance(gather.enable(), bool)
        else:
            assert gather.internal_buffer_size() >= 0


@given(st.integers(1, 3), st.integers(0, 40), st.integers(1, 9), st.integers(0, 30), st.integers(-50, 50),
       st.sampled_from([np.float32, np.uint8, np.float64]), st.sampled_from([np.int32, np.int64]))
def test_right_sizes_random_values(outer, src_count, inner, idx_count, shift, dtype, index_dtype):
    """Well-formed calls with indices anywhere: exact results, or IndexError when one is out of range."""
    rng = np.random.default_rng(outer * 1000 + src_count)
    src = (rng.standard_normal((outer, src_count, inner)) * 50).astype(dtype)
    idx = (rng.integers(-src_count - 1, src_count + 1, (outer, idx_count, inner)) + (shift if shift % 7 == 0 else 0))
    idx = idx.astype(index_dtype)
    gather = synet.GatherElements(dtype, index_dtype, True, 1, [outer], src_count, inner, idx_count)
    in_range = ((idx >= -src_count) & (idx < src_count)).all()
    for result in (attempt(gather.forward, src, idx), attempt(synet.gather_elements, src, idx, 1)):
        if in_range:
            assert np.array_equal(result, gather_reference(src, idx, 1))
        else:
            assert isinstance(result, IndexError)
