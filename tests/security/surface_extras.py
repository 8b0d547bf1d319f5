"""Reviewed additions to the default operator surface (:mod:`common.surface`) beyond what the model corpus emits.

Each entry is an ATen overload the operator classes allow that the project's own tests and toy layers convert
and load by default (tests/torch2ir, tests/ir2torch, tests/flat, tests/property, the docs' examples), with why
it belongs: common layers real models use that the corpus happens not to exercise. ``python -m
tests.security.op_corpus --write-surface`` adds them to ``common/default_ops.txt``.
"""

from __future__ import annotations

#: ``aten.<op>.<overload>`` -> why it is in the default surface although no corpus model emits it.
EXTRA_SURFACE: dict[str, str] = {}
