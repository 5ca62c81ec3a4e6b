"""kernelpilot's benchmark suite: ``python -m bench NAME`` from the repository root
(``python -m bench --help`` lists the benchmarks). Each writes one results record
(bench/results_format.py)."""

# Set by ``python -m bench reference --repo DIR`` when it runs the command again to measure
# DIR's harness: bench/__main__.py then puts DIR first on the path.
REPO_ENV = "KP_BENCH_REPO"
