"""The benchmarks (``bench/*_bench.py``, run by ``make bench``) and their helpers."""
