"""GatherElements workloads G1-G6 (issue #2) against np.take_along_axis, torch.gather, onnxruntime."""

from __future__ import annotations

import numpy as np

import synet

from . import Workload, ort_single_op, torch_single_thread

RNG_SEED = 2026


def _ort_gather(data: np.ndarray, indices: np.ndarray, axis: int):
    return ort_single_op("GatherElements", ["data", "indices"], {"data": data, "indices": indices}, axis=axis)


def _loads(data: np.ndarray, positive: np.ndarray, offset_dtype) -> tuple:
    """meta["loads"] of a gather along axis -2 of C-contiguous [*outer, count, inner] arrays (in memory) with
    indices in range as they are: the source, the flat offset (of the index's size; set_index keeps int32
    offsets) of the element each output element reads, a target (synet._kernels.LoadRun)."""
    *outer, count, inner = data.shape
    slices = int(np.prod(outer, dtype=np.int64))
    shape = (slices, positive.shape[-2], inner)
    offsets = (np.arange(slices, dtype=np.int64)[:, None, None] * (count * inner)
               + positive.reshape(shape).astype(np.int64) * inner + np.arange(inner, dtype=np.int64))
    return data, offsets.astype(offset_dtype), np.empty(positive.shape, data.dtype)


def _gather_workload(name, title, dtype, index_dtype, outer, src_count, inner, idx_count, low,
                     repeated_outer=False):
    def make():
        rng = np.random.default_rng(RNG_SEED)
        data = (rng.standard_normal((*outer, src_count, inner)) * 100).astype(dtype)
        shape = (*outer, idx_count, inner)
        if repeated_outer:  # the same index slice for every value of the first outer dimension
            broadcast = np.broadcast_to(rng.integers(low, src_count, (1, *shape[1:])).astype(index_dtype), shape)
            indices = np.ascontiguousarray(broadcast)
        else:
            indices = np.ascontiguousarray(rng.integers(low, src_count, shape), dtype=index_dtype)
        positive = np.where(indices < 0, indices + src_count, indices)
        dst = np.empty(shape, dtype=dtype)
        context = synet.GatherElements(dtype, index_dtype, repeated_outer, 1, list(outer), src_count, inner,
                                       idx_count)
        axis = len(outer)
        candidates = {}
        if repeated_outer:
            context.set_index(indices)
            candidates["synet"] = lambda: context.forward(data, None, dst, n_threads=1)
            candidates["synet x2"] = lambda: context.forward(data, None, dst, n_threads=2)
            candidates["synet without set_index"] = lambda: context.forward(data, indices, dst, n_threads=1)
            # the functional form given the broadcast view itself (np.broadcast_to, torch's expand)
            candidates["synet functional"] = lambda: synet.gather_elements(data, broadcast, axis, n_threads=1)
        else:
            candidates["synet"] = lambda: context.forward(data, indices, dst, n_threads=1)
            candidates["synet x2"] = lambda: context.forward(data, indices, dst, n_threads=2)
            candidates["synet functional"] = lambda: synet.gather_elements(data, indices, axis, n_threads=1)
        # np.take_along_axis does not take negative indices: it gets them normalised beforehand
        candidates["numpy take_along_axis"] = lambda: np.take_along_axis(data, positive, axis)
        torch = torch_single_thread()
        if torch is not None:
            t_data, t_index = torch.from_numpy(data), torch.from_numpy(positive.astype(np.int64))
            candidates["torch.gather"] = lambda: torch.gather(t_data, axis, t_index)
        ort = _ort_gather(data, indices, axis)
        if ort is not None:
            candidates["onnxruntime"] = ort
        from . import simd_peer
        simd_peer.add(candidates, name, "gather", dst, data=data, indices=indices, outer=outer, src_count=src_count,
                      inner=inner, idx_count=idx_count, index_const=repeated_outer)
        if repeated_outer:  # the pair of "synet without set_index": Simd given the index on every call
            simd_peer.add(candidates, name, "gather", dst, "simd without SetIndex", data=data, indices=indices,
                          outer=outer, src_count=src_count, inner=inner, idx_count=idx_count, index_const=False)
        return candidates, {"loads": _loads(data, positive, np.int32 if repeated_outer else index_dtype)}

    n_dst = int(np.prod(outer)) * idx_count * inner
    itemsize = np.dtype(dtype).itemsize
    nbytes = n_dst * (2 * itemsize + np.dtype(index_dtype).itemsize)  # read idx, gather src, write dst
    return Workload(name, title, make, nbytes=nbytes)


def _transposed_gather_workload(name, title, outer, src_count, inner, idx_count):
    """The functional form on a float32 pair laid out [*outer, count, inner] in memory and seen with the last
    two axes swapped (a channels-last tensor seen as channels-first), gathered along the count axis."""
    def make():
        rng = np.random.default_rng(RNG_SEED)
        data = (rng.standard_normal((*outer, src_count, inner)) * 100).astype(np.float32).swapaxes(-1, -2)
        indices = rng.integers(0, src_count, (*outer, idx_count, inner)).swapaxes(-1, -2)
        axis = len(outer) + 1
        candidates = {
            "synet": lambda: synet.gather_elements(data, indices, axis, n_threads=1),
            "synet x2": lambda: synet.gather_elements(data, indices, axis, n_threads=2),
            "numpy take_along_axis": lambda: np.take_along_axis(data, indices, axis),
        }
        torch = torch_single_thread()
        if torch is not None:   # strided tensors on the same memory; the result is laid out alike
            t_data, t_index = torch.from_numpy(data), torch.from_numpy(indices)
            candidates["torch.gather"] = lambda: torch.gather(t_data, axis, t_index)
        # the loads in memory order: [*outer, count, inner] there, gathered along the count axis
        return candidates, {"loads": _loads(data.swapaxes(-1, -2), indices.swapaxes(-1, -2), np.int64)}

    n_dst = int(np.prod(outer)) * idx_count * inner
    return Workload(name, title, make, nbytes=n_dst * (4 + 4 + 8))


WORKLOADS = [
    _gather_workload("G1", "gather f32, i64 idx, outer [8], 1024 -> 1024, inner 256, negatives",
                     np.float32, np.int64, (8,), 1024, 256, 1024, -1024),
    _gather_workload("G2", "gather f32, i32 idx, outer [4096], 256 -> 256, inner 1",
                     np.float32, np.int32, (4096,), 256, 1, 256, 0),
    _gather_workload("G3", "gather u8, i64 idx, outer [8], 1024 -> 1024, inner 256, negatives",
                     np.uint8, np.int64, (8,), 1024, 256, 1024, -1024),
    _gather_workload("G4", "gather f32, i64 const idx, outer [16, 64], 512 -> 512, set_index",
                     np.float32, np.int64, (16, 64), 512, 1, 512, 0, repeated_outer=True),
    # boxes [N, 4] gathered by a per-coordinate index (detection post-processing): rows of 4 elements
    _gather_workload("G5", "gather f32, i64 idx, outer [8], 4096 -> 4096, inner 4 (rows of 4)",
                     np.float32, np.int64, (8,), 4096, 4, 4096, 0),
    # the layout PyTorch's channels_last tensors have, seen through the NCHW shape (the functional form)
    _transposed_gather_workload("G6", "gather f32, i64 idx, [8, 256, 1024] laid out [8, 1024, 256], axis 2 "
                                "(functional)", (8,), 1024, 256, 1024),
]
