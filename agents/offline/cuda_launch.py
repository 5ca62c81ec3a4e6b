"""How a CUDA candidate's two files meet: the host wrapper fills a ``kp::Launch`` and calls the
kernel's launcher in the ``.cu`` file, which picks the kernel variant and the element type.

The ``.cu`` file includes no ATen or torch header (c10's ``Half`` and ``BFloat16`` only), so
nvcc compiles the kernels alone: 3-4 s on the 2-core machine, against 38-40 s with ATen's
headers (bench/BENCHMARKS.md, section 24). The host wrapper, with ATen, is the C++ file, which
torch's headers precompiled serve (``harness.builds.pch``). The two files share ``LAUNCH`` as
text; pointers cross as ``void*`` and the element type as a ``kp::DType``, so no ATen type is
named on both sides.
"""

from __future__ import annotations

from agents.offline.cxx_common import pointer_args
from agents.offline.kernel import FusedKernel

LAUNCH = r"""
namespace kp {

constexpr int kThreads = 256;

// Vectors a thread of the rowwise variant takes, a block's width apart along its row.
constexpr int kRowwiseItems = 4;

// The element types a launcher is built for; the host wrapper passes its inputs' (dtype_code).
enum DType : int { kF32 = 0, kF64 = 1, kF16 = 2, kBF16 = 3 };

// One launch of a kernel variant: filled by the host wrapper, read by the .cu's launcher.
struct Launch {
  int dtype = kF32;
  int variant = 0;
  int64_t blocks = 1;
  int threads = kThreads;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
  const void* const* in = nullptr;
  void* const* out = nullptr;
  const int64_t* row_strides = nullptr;
  const int64_t* row_divs = nullptr;
  const int64_t* row_mods = nullptr;
  const float* scalars = nullptr;
  int64_t numel = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t across = 1;  // the rowwise variant: blocks per row
  int64_t grid_y = 1;  // the tiled kernels' grid beside blocks (cuda_tiles.tile_grid)
  int64_t grid_z = 1;
  const void* geometry = nullptr;
};

}  // namespace kp
"""

HOST_LAUNCH = r"""
namespace kp {

inline int dtype_code(at::ScalarType dtype) {
  switch (dtype) {
    case at::ScalarType::Float: return kF32;
    case at::ScalarType::Double: return kF64;
    case at::ScalarType::Half: return kF16;
    case at::ScalarType::BFloat16: return kBF16;
    default: TORCH_CHECK(false, "fused kernels compute floating dtypes, got ", dtype);
  }
  return kF32;
}

// Elements in one 16-byte vector of `dtype`: the kernels' VEC.
inline int64_t vector_width(at::ScalarType dtype) {
  return 16 / static_cast<int64_t>(c10::elementSize(dtype));
}

inline bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline int64_t blocks_for(int64_t work) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, sms * 8));
}

// Rows of at least this many vectors get blocks of their own (the rowwise variant): a thread's
// row, and so each operand's row offset, is found once for kRowwiseItems vectors.
constexpr int kRowwiseVectors = 128;

// The rowwise variant's grid for `rows` rows of `row_vectors` vectors: the fewest blocks across
// a row, their threads a whole number of warps spread evenly over it. False where rows are too
// short for it, or the grid too large.
inline bool rowwise_grid(int64_t rows, int64_t row_vectors, Launch& l) {
  const int64_t per_block = static_cast<int64_t>(kThreads) * kRowwiseItems;
  const int64_t across = (row_vectors + per_block - 1) / per_block;
  if (row_vectors < kRowwiseVectors || rows * across > 2147483647) return false;
  const int64_t threads = ((row_vectors + across - 1) / across + kRowwiseItems - 1) / kRowwiseItems;
  l.threads = static_cast<int>((threads + 31) / 32 * 32);
  l.blocks = rows * across;
  l.across = across;
  return true;
}

}  // namespace kp
"""

# Variants: a vectorized kernel or not, times a second template flag (one row / a cached row).
VECTORIZED = ((0, "kVec", "true"), (1, "kVec", "false"))
SCALAR = ((2, "1", "true"), (3, "1", "false"))
GENERAL = 4
ROWWISE = 5  # pointwise, vectorized, blocks of their own per row (``kp::rowwise_grid``)

# A kernel's launch as the Launch ``l`` says.
GRID = "<<<l.blocks, l.threads, l.shared, l.stream>>>"


def declaration(kernel: FusedKernel) -> str:
    return f"int {kernel.name}_launch(const kp::Launch& l);"


def kernel_args(kernel: FusedKernel, row_strides: bool, tail: list[str]) -> str:
    """A kernel's arguments from the Launch ``l``, in ``pointer_params``' order."""
    args = pointer_args(
        kernel,
        inputs="static_cast<const {type}*>(l.in[{k}])",
        rows="l.row_{field}[{k}]" if row_strides else None,
        scalars="l.scalars[{k}]",
        outputs="static_cast<{type}*>(l.out[{k}])",
    )
    return ", ".join([*args, *tail])


def launcher(kernel: FusedKernel, cases: list[tuple[int, str]], default: str) -> str:
    """The ``.cu`` side: ``<name>_launch(l)`` runs case ``l.variant`` (else ``default``) for
    ``l.dtype``'s element type; the launch's error, as a ``cudaError_t``."""
    name = kernel.name
    lines = [
        "template <typename scalar_t>",
        f"void {name}_run(const kp::Launch& l) {{",
        "  constexpr int kVec = 16 / sizeof(scalar_t);",
        "  (void)kVec;",
        "  switch (l.variant) {",
        *[f"    case {variant}: {call}; break;" for variant, call in cases],
        f"    default: {default};",
        "  }",
        "}",
        "",
        f"int {name}_launch(const kp::Launch& l) {{",
        "  switch (l.dtype) {",
        f"    case kp::kF32: {name}_run<float>(l); break;",
        f"    case kp::kF64: {name}_run<double>(l); break;",
        f"    case kp::kF16: {name}_run<c10::Half>(l); break;",
        f"    case kp::kBF16: {name}_run<c10::BFloat16>(l); break;",
        "    default: return static_cast<int>(cudaErrorInvalidValue);",
        "  }",
        "  return static_cast<int>(cudaGetLastError());",
        "}",
    ]
    return "\n".join(lines)


def host_start(kernel: FusedKernel, tensors: str) -> list[str]:
    """The wrapper's first lines of a launch: the device, the stream and the pointers of
    ``tensors`` (a C++ expression indexable by input number) and of the outputs."""
    inputs = ", ".join(f"{tensors}[{k}].data_ptr()" for k in range(len(kernel.inputs)))
    outputs = ", ".join(f"out{j}.data_ptr()" for j in range(len(kernel.outputs)))
    lines = [
        "const c10::cuda::CUDAGuard guard(in0.device());",
        f"const void* const in_ptrs[] = {{{inputs}}};",
        f"void* const out_ptrs[] = {{{outputs}}};",
        "kp::Launch l;",
        "l.dtype = kp::dtype_code(dtype);",
        "l.stream = at::cuda::getCurrentCUDAStream();",
        "l.in = in_ptrs;",
        "l.out = out_ptrs;",
    ]
    if kernel.scalars:
        values = ", ".join(f"s{k}" for k in range(len(kernel.scalars)))
        lines += [f"const float scalar_values[] = {{{values}}};", "l.scalars = scalar_values;"]
    return lines


def host_rows(plan: str) -> list[str]:
    """The Launch's row maps from the ``kp::Plan`` named ``plan``."""
    return [
        f"l.row_strides = {plan}.row_strides.data();",
        f"l.row_divs = {plan}.row_divs.data();",
        f"l.row_mods = {plan}.row_mods.data();",
    ]


def host_finish(kernel: FusedKernel) -> str:
    return f"C10_CUDA_CHECK(static_cast<cudaError_t>({kernel.name}_launch(l)));"
