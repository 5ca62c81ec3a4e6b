"""The tiled kernels of channels-last convolutions (agents.offline.cuda_tiles,
agents.offline.cuda_epilogue), run on the CPU: a candidate's generated ``.cu`` file compiled by
g++ under a small emulation of CUDA's grid (a block at a time, its 256 threads real threads
meeting at ``__syncthreads``, ``__shared__`` arrays shared by them), its launchers called as the
host wrapper calls them. Checked at sizes no tile divides (channels and positions), on batches
of 1 and 3, in float32, float16 and bfloat16, against eager PyTorch: the epilogue reading an
NHWC tensor and writing NCHW, and the input's NCHW -> NHWC transpose. The host's choice of the
tiled path (ATen) runs on a GPU only: tests/test_offline_conv_layout_gpu.py."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from agents.offline.cuda_epilogue import NHWC
from tests.conftest import embedded_source
from tests.test_offline_conv_layout import TAKEN, forward_of, proposed

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

_RUNTIME = r"""
#pragma once
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* emu_barrier = nullptr;
inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
typedef void* cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
template <class F>
void emu_run(dim3 grid, int threads, size_t, cudaStream_t, F body) {
  blockDim = dim3(threads);
  gridDim = grid;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        std::barrier<> barrier(threads);
        emu_barrier = &barrier;
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
          pool.emplace_back([&, t] {
            threadIdx = dim3(t);
            blockIdx = dim3(x, y, z);
            body();
          });
        }
        for (auto& thread : pool) thread.join();
      }
    }
  }
}
"""
# What the host wrapper sets for each launch (agents.offline.cuda_epilogue.host_branch, and
# cuda_tiles.HOST's kp_channels_last), from sizes the test gives.
_DRIVER = f"""
extern "C" int run_epilogue(int dtype, const void* const* in, void* out, const int64_t* strides,
                            int64_t images, int64_t channels, int64_t positions) {{
  void* const outs[] = {{out}};
  kp::Launch l;
  l.dtype = dtype;
  l.in = in;
  l.out = outs;
  if (!kp::tile_grid(images, channels, positions, kp::tile_variant(channels), l)) return -1;
  l.variant = {NHWC} + kp::tile_variant(channels);
  l.rows = channels;
  l.cols = positions;
  l.row_strides = strides;
  return fused_0_launch(l);
}}

extern "C" int run_transpose(int dtype, const void* in, void* out, int64_t images,
                             int64_t channels, int64_t positions) {{
  const void* const ins[] = {{in}};
  void* const outs[] = {{out}};
  kp::Launch l;
  l.dtype = dtype;
  l.in = ins;
  l.out = outs;
  l.variant = kp::tile_variant(channels);
  if (!kp::tile_grid(images, channels, positions, l.variant, l)) return -1;
  l.rows = channels;
  l.cols = positions;
  return kp_channels_last_launch(l);
}}
"""
_LAUNCH = re.compile(r"([\w:]+(?:<[^<>;]*>)?)<<<([^>]*)>>>\((.*?)\);", re.S)
DTYPE_CODES = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 3}  # kp::DType
# (images, channels, height, width): tiles of 32, 16, 8 and 4 channels (kp::tile_variant), the
# last tile of channels or positions part empty, and one position a channel
SIZES = [(1, 37, 7, 9), (3, 16, 5, 13), (3, 24, 6, 6), (1, 3, 17, 19), (3, 64, 1, 1)]
# Each module's chain as eager computes it, from the conv's output y and the kernel's other
# inputs in their order (the kernel's call is checked to read them so).
CHAINS = {
    "54_multiply_leaky_relu_gelu": (
        "_ext.fused_0(conv2d, view, multiplier)",
        lambda y, bias, multiplier: F.gelu(F.leaky_relu((y + bias) * multiplier, 0.01)),
    ),
    "functional": (
        "_ext.fused_0(scale, conv2d)",
        lambda scale, y: torch.relu(scale * y) - 1.0,
    ),
}


def emulated(tmp_path: Path, name: str) -> ctypes.CDLL:
    proposal = proposed(tmp_path, name, TAKEN[name])
    assert CHAINS[name][0] in forward_of(proposal.candidate.source)
    cuda = embedded_source(proposal.candidate.source, "_CUDA_SOURCE")
    assert "fused_0_nhwc" in cuda
    launched = _LAUNCH.sub(lambda m: f"emu_run({m[2]}, [&] {{ {m[1]}({m[3]}); }});", cuda)
    (tmp_path / "emu").mkdir()
    (tmp_path / "emu" / "cuda_runtime.h").write_text(_RUNTIME)
    (tmp_path / "kernels.cpp").write_text(launched + _DRIVER)
    include = Path(torch.__file__).parent / "include"
    done = subprocess.run(
        ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-I", "emu", "-I",
         str(include), "kernels.cpp", "-o", "kernels.so"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(tmp_path / "kernels.so"))


def operands(name: str, channels: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """The kernel's inputs besides the conv's output: per-channel, one of them strided."""
    if name == "functional":
        return [torch.randn(channels, 1, 1, dtype=dtype)]
    strided = torch.randn(2 * channels, 1, 1, dtype=dtype)[::2]
    return [strided, torch.randn(1, channels, 1, 1, dtype=dtype)]


@pytest.mark.parametrize("name", list(CHAINS))
def test_the_epilogue_reads_nhwc_and_writes_nchw_at_any_size(tmp_path: Path, name: str) -> None:
    library = emulated(tmp_path, name)
    call, chain = CHAINS[name]
    conv_index = 1 if name == "functional" else 0
    for images, channels, height, width in SIZES:
        for dtype in DTYPE_CODES:
            shape = (images, channels, height, width)
            y = torch.randn(shape, dtype=dtype).contiguous(memory_format=torch.channels_last)
            others = operands(name, channels, dtype)
            inputs = [*others]
            inputs.insert(conv_index, y)
            strides = [0 if t is y else t.stride(t.dim() - 3) for t in inputs]
            out = torch.full(shape, float("nan"), dtype=dtype)
            pointers = (ctypes.c_void_p * len(inputs))(*(t.data_ptr() for t in inputs))
            status = library.run_epilogue(
                DTYPE_CODES[dtype], pointers, ctypes.c_void_p(out.data_ptr()),
                (ctypes.c_int64 * len(inputs))(*strides), ctypes.c_int64(images),
                ctypes.c_int64(channels), ctypes.c_int64(height * width),
            )  # fmt: skip
            assert status == 0
            expected = chain(*inputs)
            tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
            torch.testing.assert_close(
                out, expected, rtol=tolerance, atol=tolerance, msg=f"{shape} {dtype}"
            )


def test_the_input_transpose_makes_nhwc_at_any_size(tmp_path: Path) -> None:
    library = emulated(tmp_path, "54_multiply_leaky_relu_gelu")
    for images, channels, height, width in SIZES:
        for dtype in DTYPE_CODES:
            x = torch.randn(images, channels, height, width, dtype=dtype)
            out = torch.full((images, height, width, channels), float("nan"), dtype=dtype)
            status = library.run_transpose(
                DTYPE_CODES[dtype], ctypes.c_void_p(x.data_ptr()),
                ctypes.c_void_p(out.data_ptr()), ctypes.c_int64(images),
                ctypes.c_int64(channels), ctypes.c_int64(height * width),
            )  # fmt: skip
            assert status == 0
            assert torch.equal(out.permute(0, 3, 1, 2), x), (x.shape, dtype)
