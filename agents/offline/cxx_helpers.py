"""The fixed C++ of every fused kernel, shared by the CPU and CUDA backends: element loads and
stores (``ELEMENT_HELPERS``), what kernels index with (``INDEX_HELPERS``: a row's place in a
broadcast input, the general path's broadcast strides), and the host-side planning
(``PLAN_HELPERS``, with ATen: broadcast sizes, input checks, how each input is read as rows x
columns, ``kp::row_map``, and the fast path's plan). A CPU kernel's one file has them all
(``HOST_HELPERS``); a CUDA candidate's ``.cu`` file has no ATen (``agents.offline.codegen_cuda``).

Each backend defines ``KP_INLINE`` (an always-inlined function, ``__host__ __device__`` on
CUDA), ``KP_HD`` and the ``kp::`` math functions before this code.
"""

ELEMENT_HELPERS = r"""
namespace kp {

// Every value is computed in float; 16-bit types convert on load and round once on store.
template <typename T>
KP_INLINE float load(T v) { return static_cast<float>(v); }
KP_INLINE float load(bool v) { return v ? 1.0f : 0.0f; }

template <typename T>
KP_INLINE T store(float v) { return static_cast<T>(v); }
template <>
KP_INLINE bool store<bool>(float v) { return v != 0.0f; }

// A value as the tensor dtype T would hold it: eager PyTorch rounds every op's result.
template <typename T>
KP_INLINE float rounded(float v) { return static_cast<float>(static_cast<T>(v)); }
template <>
KP_INLINE float rounded<float>(float v) { return v; }

// NaN-propagating, like ATen's clamp, minimum and maximum.
KP_INLINE float clamp_min(float v, float lo) { return v < lo ? lo : v; }
KP_INLINE float clamp_max(float v, float hi) { return v > hi ? hi : v; }
KP_INLINE float clamp(float v, float lo, float hi) { return clamp_max(clamp_min(v, lo), hi); }
KP_INLINE float minimum(float a, float b) { return (a < b || a != a) ? a : b; }
KP_INLINE float maximum(float a, float b) { return (a > b || a != a) ? a : b; }

}  // namespace kp
"""

INDEX_HELPERS = r"""
namespace kp {

constexpr int kMaxDims = 8;

// Row r's place in a RowMap's run: (r / div) % mod, in 32-bit arithmetic where it fits.
KP_INLINE int64_t row_in_run(int64_t r, int64_t div, int64_t mod) {
  if (div == 1 && r < mod) return r;
  if (((r | div | mod) >> 31) == 0) {
    return static_cast<int64_t>(static_cast<uint32_t>(r) / static_cast<uint32_t>(div) %
                                static_cast<uint32_t>(mod));
  }
  return r / div % mod;
}

// a / b for non-negative a and positive b, in 32-bit arithmetic where both fit (a 64-bit
// division is dozens of instructions on a GPU: the fast path splits every vector's index).
KP_INLINE int64_t quotient(int64_t a, int64_t b) {
  if (((a | b) >> 31) == 0) {
    return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
  }
  return a / b;
}

// Every input's strides broadcast to the output shape (0 along broadcast dimensions).
template <int N>
struct Geometry {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  // Offsets into each input of element `index` of the row-major dimensions 0..last.
  KP_HD void offsets(int64_t index, int last, int64_t* out) const {
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = last; d >= 0; --d) {
      const int64_t i = index % sizes[d];
      index /= sizes[d];
      for (int k = 0; k < N; ++k) out[k] += i * strides[k][d];
    }
  }
};

}  // namespace kp
"""

PLAN_HELPERS = r"""
namespace kp {

inline std::vector<int64_t> broadcast_sizes(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> sizes = tensors[0].sizes().vec();
  for (size_t k = 1; k < tensors.size(); ++k) {
    sizes = at::infer_size(sizes, tensors[k].sizes());
  }
  return sizes;
}

inline void check_inputs(const std::vector<at::Tensor>& tensors, const std::vector<bool>& is_bool,
                         at::ScalarType dtype, const char* name) {
  for (size_t k = 0; k < tensors.size(); ++k) {
    const at::ScalarType expected = is_bool[k] ? at::kBool : dtype;
    TORCH_CHECK(tensors[k].scalar_type() == expected, name, ": input ", k, " has dtype ",
                tensors[k].scalar_type(), ", expected ", expected);
    TORCH_CHECK(tensors[k].device() == tensors[0].device(), name, ": input ", k, " is on ",
                tensors[k].device(), ", expected ", tensors[0].device());
  }
}

// How `t` is read as rows x cols of out[:m] x out[m:]: row r of it starts at
// ((r / div) % mod) * stride, and is `cols` contiguous values (contiguous_columns) or one value.
// The dimensions of out[:m] that `t` indexes are one run, of strides that nest; the broadcast
// dimensions after the run divide the row number, those before it wrap it (a per-channel bias
// [C, 1, 1] of [N, C, H, W] split at 2: stride 1, div 1, mod C). Not `ok` when `t` cannot be
// read so.
struct RowMap {
  bool ok = false;
  int64_t stride = 0;
  int64_t div = 1;
  int64_t mod = 1;
};

inline RowMap row_map(const at::Tensor& t, at::IntArrayRef out, int64_t m,
                      bool contiguous_columns) {
  RowMap map;
  const int64_t nd = static_cast<int64_t>(out.size());
  const int64_t lead = nd - t.dim();
  if (lead < 0 || m < 0 || m > nd) return map;
  auto size = [&](int64_t d) { return d < lead ? int64_t{1} : t.size(d - lead); };
  auto stride = [&](int64_t d) { return d < lead ? int64_t{0} : t.stride(d - lead); };
  int64_t expected = 1;
  for (int64_t d = nd - 1; d >= m; --d) {
    if (!contiguous_columns || size(d) != out[d]) {
      if (contiguous_columns || size(d) != 1) return map;
    } else if (size(d) != 1) {
      if (stride(d) != expected) return map;
      expected *= size(d);
    }
  }
  bool indexed = false;
  bool run_over = false;
  int64_t next = 0;
  for (int64_t d = m - 1; d >= 0; --d) {
    if (out[d] == 1) continue;
    if (size(d) == 1) {  // broadcast along d
      if (indexed) {
        run_over = true;
      } else {
        map.div *= out[d];
      }
      continue;
    }
    if (run_over) return map;  // a second run of indexed dimensions
    if (!indexed) {
      map.stride = stride(d);
      indexed = true;
    } else if (stride(d) != next) {
      return map;
    }
    map.mod *= size(d);
    next = stride(d) * size(d);
  }
  map.ok = true;
  return map;
}

struct Plan {
  bool fast = false;
  int64_t rows = 1;
  int64_t cols = 1;
  std::vector<int64_t> row_strides;
  std::vector<int64_t> row_divs;
  std::vector<int64_t> row_mods;
};

// The first split of `splits` at which every input can be read as rows x cols, if any.
inline Plan plan_fast(const std::vector<at::Tensor>& tensors,
                      const std::vector<bool>& contiguous_columns, at::IntArrayRef out,
                      const std::vector<int64_t>& splits) {
  for (const int64_t m : splits) {
    Plan plan;
    bool ok = true;
    for (size_t k = 0; ok && k < tensors.size(); ++k) {
      const RowMap map = row_map(tensors[k], out, m, contiguous_columns[k]);
      ok = map.ok;
      plan.row_strides.push_back(map.stride);
      plan.row_divs.push_back(map.div);
      plan.row_mods.push_back(map.mod);
    }
    if (!ok) continue;
    for (int64_t d = 0; d < static_cast<int64_t>(out.size()); ++d) {
      if (d < m) {
        plan.rows *= out[d];
      } else {
        plan.cols *= out[d];
      }
    }
    plan.fast = true;
    return plan;
  }
  return Plan{};
}

template <int N>
Geometry<N> geometry(const std::vector<at::Tensor>& tensors, at::IntArrayRef out) {
  TORCH_CHECK(out.size() <= static_cast<size_t>(kMaxDims), "fused kernels support up to ",
              kMaxDims, " dimensions, got ", out.size());
  Geometry<N> geo;
  geo.ndim = static_cast<int>(out.size());
  for (int d = 0; d < geo.ndim; ++d) geo.sizes[d] = out[d];
  for (int k = 0; k < N; ++k) {
    const at::Tensor expanded = tensors[k].expand(out);
    for (int d = 0; d < geo.ndim; ++d) geo.strides[k][d] = expanded.stride(d);
  }
  return geo;
}

}  // namespace kp
"""

HOST_HELPERS = INDEX_HELPERS + PLAN_HELPERS
