"""Benchmarks of torch2ir / ir2torch (issue #8): run ``python benchmarks/run.py --quick`` or see docs/performance.md.

Not part of the test suite: nothing here asserts a timing.
"""
