"""Vectorizable float math for the CPU backend.

libm's ``expf``/``tanhf``/``erff`` are scalar calls: a loop that calls them does not vectorize and
runs several times slower than ATen's SLEEF kernels. These are branch-free (selects only), so
GCC vectorizes the fused loops (given ``no-trapping-math``, which the CPU prelude sets with a
pragma, since the harness fixes the compiler flags). Accuracy against float64: exp
< 1 ulp, tanh, log, expm1 and log1p < 4 ulp, erf < 8e-7 relative (tests/test_offline_proposer.py
checks them against torch).
"""

CPU_MATH = r"""
namespace kp {

KP_INLINE float as_float(uint32_t bits) { float f; std::memcpy(&f, &bits, 4); return f; }
KP_INLINE uint32_t as_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }
// Round to nearest even for |x| < 2^22 (the caller clamps x).
KP_INLINE float round_even(float x) { return (x + 12582912.0f) - 12582912.0f; }
KP_INLINE float pow2i(int32_t q) { return as_float(static_cast<uint32_t>(q + 127) << 23); }
KP_INLINE float ldexp2k(float d, int32_t e) { return d * pow2i(e >> 1) * pow2i(e - (e >> 1)); }
KP_INLINE float copy_sign(float magnitude, float sign) {
  return as_float((as_bits(magnitude) & 0x7fffffffu) | (as_bits(sign) & 0x80000000u));
}

// e^s - 1 for x = q ln2 + s (Cody-Waite reduction and polynomial from SLEEF); q returned as float.
KP_INLINE float expm1_reduced(float x, float& q) {
  q = round_even(x * 1.442695040888963407359924681001892137426645954152985934135449406931f);
  float s = q * -0.693145751953125f + x;
  s = q * -1.428606765330187045e-06f + s;
  float u = 0.000198527617612853646278381f;
  u = u * s + 0.00139304355252534151077271f;
  u = u * s + 0.00833336077630519866943359f;
  u = u * s + 0.0416664853692054748535156f;
  u = u * s + 0.166666671633720397949219f;
  u = u * s + 0.5f;
  return s * s * u + s;
}

KP_INLINE float exp(float d) {
  float x = d < -104.0f ? -104.0f : d;
  x = x > 100.0f ? 100.0f : x;
  x = x == x ? x : 0.0f;
  float q;
  const float u = expm1_reduced(x, q) + 1.0f;
  float r = ldexp2k(u, static_cast<int32_t>(q));
  r = d < -104.0f ? 0.0f : r;
  r = d > 100.0f ? INFINITY : r;
  return d == d ? r : d;
}

KP_INLINE float expm1(float d) {
  float x = d < -30.0f ? -30.0f : d;
  x = x > 100.0f ? 100.0f : x;
  x = x == x ? x : 0.0f;
  float q;
  const float u = expm1_reduced(x, q);
  float r = q == 0.0f ? u : ldexp2k(u + 1.0f, static_cast<int32_t>(q)) - 1.0f;
  r = d < -30.0f ? -1.0f : r;
  r = d > 100.0f ? INFINITY : r;
  return d == d ? r : d;
}

// tanh(x) = expm1(2|x|) / (expm1(2|x|) + 2) with the sign of x; 1 in float beyond |x| = 10.
KP_INLINE float tanh(float x) {
  float y = x < 0.0f ? -x : x;
  y = y > 10.0f ? 10.0f : y;
  y = y == y ? y : 0.0f;
  float q;
  const float u = expm1_reduced(2.0f * y, q);
  const float d = q == 0.0f ? u : ldexp2k(u + 1.0f, static_cast<int32_t>(q)) - 1.0f;
  const float t = copy_sign(d / (d + 2.0f), x);
  return x == x ? t : x;
}

KP_INLINE float log(float d) {
  const bool tiny = d < 1.17549435e-38f;
  const float dd = tiny ? d * 1.8446744073709552e19f : d;
  int32_t e = static_cast<int32_t>((as_bits(dd * (1.0f / 0.75f)) >> 23) & 0xffu) - 0x7f;
  const float m = as_float(as_bits(dd) - (static_cast<uint32_t>(e) << 23));
  e = tiny ? e - 64 : e;
  const float x = (m - 1.0f) / (m + 1.0f);
  const float x2 = x * x;
  float t = 0.2392828464508056640625f;
  t = t * x2 + 0.28518211841583251953125f;
  t = t * x2 + 0.400005877017974853515625f;
  t = t * x2 + 0.666666686534881591796875f;
  t = t * x2 + 2.0f;
  float r = x * t + 0.693147180559945286226764f * static_cast<float>(e);
  r = d == INFINITY ? INFINITY : r;
  r = (d < 0.0f || d != d) ? NAN : r;
  return d == 0.0f ? -INFINITY : r;
}

// log(1 + u) with the rounding error of 1 + u compensated (Goldberg's trick).
KP_INLINE float log1p(float u) {
  const float w = 1.0f + u;
  const float r = w == 1.0f ? u : kp::log(w) * (u / (w - 1.0f));
  return u == INFINITY ? u : r;
}

// Rational approximation on [-4, 4] (Eigen's generic_fast_erf_float); erf is +-1 in float beyond.
KP_INLINE float erf(float a) {
  float x = a < -4.0f ? -4.0f : a;
  x = x > 4.0f ? 4.0f : x;
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return a == a ? x * p / q : a;
}

KP_INLINE float abs(float x) { return std::fabs(x); }
// Scalar libm calls: correct, but they keep their loop from vectorizing (sqrt too: it may set
// errno, and -fno-math-errno cannot be set from the source).
KP_INLINE float sqrt(float x) { return std::sqrt(x); }
KP_INLINE float sin(float x) { return std::sin(x); }
KP_INLINE float cos(float x) { return std::cos(x); }
KP_INLINE float pow(float x, float y) { return std::pow(x, y); }

}  // namespace kp
"""
