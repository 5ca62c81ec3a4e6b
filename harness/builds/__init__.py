"""Building candidates' kernels: load_inline behind a content-hash cache, built by the trusted side
in the compiler's sandbox."""
