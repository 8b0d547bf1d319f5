"""Shared test configuration: one torch thread per process, hypothesis profiles.

Profiles (``HYPOTHESIS_PROFILE=...``):

- ``default``: random draws, so every local run explores new examples;
- ``ci``: seeded from each test's source (``derandomize``), used by ``.ci/run`` so that a landing
  is decided by the code, not by a seed; a failure still prints its reproduction blob. Draws can
  still differ with the project modules already imported (hypothesis mines them for constants),
  so no test may rely on a fixed sample;
- ``long``: random draws and 10 times the examples of every property test.
"""

from __future__ import annotations

import gc
import os

# One intra-op thread per test process (and per command a test starts, which inherits the variable): the
# suite runs one pytest-xdist worker per core, and the ops of these small models are too small to gain from
# more threads, while threads waiting for a busy core cost several times the work itself (a CNN's forward
# passes took 3.5x the CPU time with 2 threads on 2 loaded cores). Set OMP_NUM_THREADS to choose another count.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch  # after the variable, so that torch reads it
from hypothesis import HealthCheck, settings

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # also when torch was imported before this file

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, print_blob=True
)
settings.register_profile("long", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 1


def examples(n: int) -> int:
    """Example count for a property test: ``n`` by default, ``10 * n`` under the long profile."""
    return n * SCALE



def _torchvision_schemas() -> None:
    """transformers imports torchvision when it is installed (image processors, ViT, DETR, LLaVA): where
    torchvision's compiled extension does not load with this torch build, that import fails unless the
    extension's two operator schemas are defined first (see ``tests/ecosystems/load.py``)."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is not None:
        from tests.ecosystems.load import torchvision

        torchvision()


class _Scheduling:
    """Under ``--dist loadgroup``, the tests that share work go to one worker (see ``tests/scheduling.py``)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") != "loadgroup":
            return None
        from tests.scheduling import GroupScheduling

        return GroupScheduling(config, log)


def pytest_collection_finish(session):
    """Collect less often during the tests: what collection built (torch, transformers, the test modules) is
    frozen out of the collector's walks, and a collection starts after 20000 allocations instead of 700 (the
    tests allocate many short-lived graphs; full collections walked the whole heap about every 10 s)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


#: What ``make test`` leaves to ``make test-zoo`` (``.ci/run`` runs both): the real-model corpora and the tests that
#: run real models end to end, the quantization stacks, the fresh-venv install, the meta-device memory and large-file
#: checks, the documentation's commands, and the long property and fuzz runs. A test id that starts with one of these
#: gets the ``zoo`` mark (``-m zoo`` / ``-m "not zoo"``). ``make test`` keeps every unit, guard, security-refusal,
#: CLI and handler test, and stays within a few minutes on 2 cores.
ZOO = (
    # real models
    "tests/real/",
    "tests/ecosystems/",
    "tests/flat/test_execute.py",
    "tests/rewrite/test_batchnorm.py::test_fold_batchnorm_on_corpus_cnns",
    "tests/ir2torch/test_constant_fold_real.py",
    "tests/loop/test_structural_names.py::test_decoders_with_dynamic_batch_and_sequence_reach_a_fixpoint",
    "tests/loop/test_structural_names.py::test_m2m100_position_bodies_reach_a_fixpoint_under_a_dynamic_batch",
    "tests/loop/test_symbolic_arguments.py::test_jetmoe_experts_and_router_keep_their_signatures",
    # quantization stacks
    "tests/quant/test_pt2e.py",
    "tests/quant/test_pt2e_handoff.py",
    "tests/quant/test_brevitas.py",
    # environment, memory and size
    "tests/cli/test_install.py",
    "tests/flat/test_meta_memory.py",
    "tests/torch2ir/test_meta_memory.py",
    "tests/common/test_load_budget.py",
    "tests/common/test_atomic_files.py::test_kill_9_at_random_points_of_saves_never_leaves_a_mixed_pair",
    "tests/docs/test_docs_run.py",
    # long property and fuzz runs
    "tests/property/test_random_models.py",
    "tests/loop/test_fixpoint.py::test_random_models_convert_back_to_their_ir",
    "tests/rewrite/test_property.py",
    "tests/common/test_serialize.py::test_mutated_documents_raise_only_ir_errors",
    "tests/common/test_serialize.py::test_random_valid_irs_save_load_identity_and_determinism",
    "tests/security/test_fuzz.py",
    "tests/security/test_op_fuzz.py",
    "tests/security/test_default_surface.py::test_the_whole_corpus_derives_the_checked_in_table",
)


def pytest_collection_modifyitems(config, items):
    """Mark the tests of :data:`ZOO` with ``zoo``."""
    import pytest

    for item in items:
        if item.nodeid.startswith(ZOO):
            item.add_marker(pytest.mark.zoo)


def pytest_configure(config):
    _torchvision_schemas()
    if config.pluginmanager.hasplugin("xdist"):  # the hook is xdist's: unknown without it (-p no:xdist)
        config.pluginmanager.register(_Scheduling(), "torch2ir-scheduling")



def _clear_leaked_state() -> list[str]:
    """Process-wide torch state a test left behind that changes how later tests' rebuilt models run (dispatch or
    function modes still entered, global module hooks, a JIT tracing state): named, and cleared."""
    from torch.nn.modules import module
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

    found = []
    if _get_current_dispatch_mode_stack():
        found.append(f"{len(_get_current_dispatch_mode_stack())} torch dispatch mode(s) still entered")
        while _get_current_dispatch_mode_stack():
            _pop_mode()
    if torch._C._len_torch_function_stack():
        found.append(f"{torch._C._len_torch_function_stack()} torch function mode(s) still entered")
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
    for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks", "_global_forward_hooks_with_kwargs",
                 "_global_forward_hooks_always_called"):
        table = getattr(module, name, None)
        if table:
            found.append(f"nn.modules.module.{name} holds {len(table)} hook(s)")
            table.clear()
    if torch._C._get_tracing_state() is not None:
        found.append("a torch.jit tracing state is set")
        torch._C._set_tracing_state(None)
    return found


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test (its fixtures undone: this runs after pytest's own teardown), process-wide torch state it
    left is cleared and named in a warning on that test: the tests after it in the same worker would otherwise run
    differently (a rebuilt model routes its calls by hooks and modes), which made results depend on test order."""
    leaked = _clear_leaked_state()
    if leaked:
        import warnings

        warnings.warn(f"{item.nodeid} left process-wide torch state, cleared: {'; '.join(leaked)}", stacklevel=1)
