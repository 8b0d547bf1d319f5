"""``Ir2Torch``: rebuild ``nn.Module``s from an IR through overridable builders."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from common.collector import collector_paused
from common.errors import BuildError, HandlerNotFoundError, IRError, IRFormatError, UnsafeTargetError
from common.flat import FlatIR
from common.ir import IR, Implementation
from common.notes import custom_backward_names, unreached_experts, warn_rebuild_notes
from common.opaque import OPAQUE_TYPE, traced_alone
from common.registry import Registry, Where
from common.safety import Allowlist
from common.validate import validate
from ir2torch.codegen.shared import CodeCache
from ir2torch.documents import as_flat, as_ir
from ir2torch.flat.run import Executor, build_flat_module, new_executor_registry
from ir2torch.flat.state import weight_budget
from ir2torch.guards.root import guard_builder_root
from ir2torch.guards.specs import root_guard
from ir2torch.handlers.graph import from_graph
from ir2torch.handlers.opaque import check_allowed as check_opaque_allowed
from ir2torch.handlers.owned import kept_quantizers, restore_attributes, take_owned
from ir2torch.handlers.quant import restore_quantization
from ir2torch.rebuild.assemble import (
    attach_children,
    restore_modes,
    restore_state_layout,
    restore_tensors,
    restore_unsaved,
)
from ir2torch.rebuild.base_class import apply_bases
from ir2torch.rebuild.device import building_on, measured_on_meta
from ir2torch.rebuild.graphs import graph_module
from ir2torch.rebuild.leaf_copies import LeafCopies
from ir2torch.rebuild.opaque_reads import apply_reads
from ir2torch.rebuild.pt2e_prepared import restore_pt2e_prepared
from ir2torch.rebuild.state import StateMap, load_into, read_state
from ir2torch.run_safety.budget import (
    AVAILABLE,
    Budget,
    check_budget,
    int8_constructor_bytes,
    records_bytes,
    target_device,
)
from ir2torch.run_safety.flops import AUTO, FlopBudget
from ir2torch.run_safety.forward_budget import install_budgets, static_guard

Builder = Callable[[Implementation], nn.Module]


class _Unset:
    def __repr__(self) -> str:
        return "<the converter's budget>"


_CONVERTER_BUDGET: Any = _Unset()


@dataclass(frozen=True)
class BuilderEntry:
    """A registered builder and, for overrides that change parameter names or layout,
    the ``state_map(impl, {name: tensor}) -> {new name: tensor}`` that converts the
    original entries of one implementation."""

    build: Builder
    state_map: StateMap | None = None

    def __call__(self, impl: Implementation) -> nn.Module:
        return self.build(impl)


class Ir2Torch:
    """Rebuilds an ``nn.Module`` tree from an IR.

    Implementations whose ``type`` has a builder are built by it (``builder(impl)``
    returns the module); any other implementation with a graph becomes a
    ``torch.fx.GraphModule`` running that graph. Each converter has its own registry and
    allow-list: registering on one never changes another.

    A :class:`~common.flat.FlatIR` is executed instead (see :mod:`ir2torch.flat.run`); ``executors``
    holds the executors of its ops by op name (``register`` / ``register_override``, scoped by
    ``module_path``), tried before the allow-list.

    ``max_bytes`` is the memory budget of :meth:`convert` (see :mod:`ir2torch.run_safety.budget`): ``"available"``
    (default: the memory available when converting), a number of bytes, or ``None`` (no check); ``max_flops`` its
    compute budget per call (:mod:`ir2torch.run_safety.flops`): ``"auto"`` (default), FLOPs, or ``None``.
    """

    def __init__(self) -> None:
        self.builders: Registry[str, BuilderEntry] = Registry("IR type")
        self.allowlist = Allowlist()
        self.executors: Registry[str, Executor] = new_executor_registry()
        self.max_bytes: Budget = AVAILABLE
        self.max_flops: FlopBudget = AUTO
        #: builders of opaque leaves by qualified class name (:meth:`register_opaque`), before the default one
        self.opaque_builders: dict[str, Builder] = {}

    def register(self, type: str, builder: Builder | None = None, *, state_map: StateMap | None = None) -> Any:
        """Add the builder of IR ``type`` (decorator or direct call); refuses a duplicate."""

        def add(fn: Builder) -> Builder:
            self.builders.register(type, BuilderEntry(fn, state_map))
            return fn

        return add if builder is None else add(builder)

    def register_override(
        self, type: str, builder: Builder | None = None, *, where: Where = None, state_map: StateMap | None = None
    ) -> Any:
        """Replace the builder of ``type``, everywhere or only for implementation paths matching ``where``.

        Args:
            type: an IR type that already has a builder.
            builder: ``impl -> nn.Module``; omit to use as a decorator.
            where: ``None`` (all), a glob over implementation keys (``"encoder.layer.*"``) or a predicate.
            state_map: converts the original state entries of each implementation built by
                this override: ``state_map(impl, {name: tensor}) -> {new name: tensor}``.
        """

        def add(fn: Builder) -> Builder:
            self.builders.register_override(type, BuilderEntry(fn, state_map), where=where)
            return fn

        return add if builder is None else add(builder)

    def register_opaque(self, qualname: str, builder: Builder | None = None) -> Any:
        """Build the opaque leaves of module class ``qualname`` (``"package.module.Class"``) with ``builder``
        (``impl -> nn.Module``; decorator or direct call) instead of the default construction
        (:mod:`ir2torch.handlers.opaque`). A class with a builder needs no ``allow=``: nothing is imported for it.

        Raises:
            UnsafeTargetError: ``qualname`` is not a dotted Python class name.
        """
        from common.opaque import is_class_name

        if not is_class_name(qualname):
            raise UnsafeTargetError(f"{str(qualname)[:100]!r} is not a dotted Python class name",
                                    hint="write 'package.module.Class'")

        def add(fn: Builder) -> Builder:
            self.opaque_builders[qualname] = fn
            return fn

        return add if builder is None else add(builder)

    def copy(self) -> Ir2Torch:
        """An independent converter with the same builders and allow-list."""
        new = type(self)()
        new.opaque_builders = dict(self.opaque_builders)
        new.builders = self.builders.copy()
        new.allowlist = self.allowlist.copy()
        new.executors = self.executors.copy()
        new.max_bytes = self.max_bytes
        new.max_flops = self.max_flops
        return new

    def convert(
        self,
        ir: IR | FlatIR | Mapping[str, Any] | str | os.PathLike,
        state_dict: Mapping[str, torch.Tensor] | str | os.PathLike | None = None,
        *,
        device: torch.device | str | None = None,
        strict: bool = True,
        max_bytes: Budget = _CONVERTER_BUDGET,
        guard_inputs: bool = True,
        allow: Iterable[str] | None = None,
        fold_constants: bool = True,
        max_flops: FlopBudget | _Unset = _CONVERTER_BUDGET,
    ) -> nn.Module:
        r"""Rebuild the model described by ``ir``, optionally loading state.

        Args:
            ir: an :class:`~common.ir.IR`, its plain dict form, a :class:`~common.flat.FlatIR`
                (executed as an fx ``GraphModule``, see :mod:`ir2torch.flat.run`), or a saved JSON
                file's path (either format, told apart by its header).
            state_dict: the *original* model's state dict, or a ``.safetensors`` path
                (memory-mapped); remapped to the rebuild's keys and through overrides'
                state maps before loading (for a FlatIR: looked up through
                ``weight_name_mapping``; the original model itself is accepted too).
            device: where parameters are created. ``"meta"`` allocates nothing; with a
                state dict, its tensors are then assigned, not copied.
            strict: ``True``: every recorded state entry must be in ``state_dict`` and every key
                of ``state_dict`` must be one (at its original path, its implementation key or an
                alias; non-persistent buffers and constants included), else one
                :class:`~common.errors.StateDictError` lists all of them. For an IR you rewrote
                (modules removed), pass ``remap_state_dict(state_dict, ir)``, which keeps only its
                entries. ``False``: missing entries stay uninitialised and unknown keys are ignored.
                Either way, a tensor only ever lands on a recorded state entry, and must have the
                shape and dtype recorded for it.
            max_bytes: the memory budget (:mod:`ir2torch.run_safety.budget`); default: this converter's
                ``max_bytes`` (``"available"``: the memory available now). Checked before anything
                is built, for every device but ``"meta"``; ``None`` disables it.
            guard_inputs: check every call's inputs against the recorded ones (shapes or dynamic
                ranges, dtypes, structure; see :mod:`ir2torch.guards.check`) and raise
                :class:`~common.errors.InputMismatchError` on a mismatch. ``False`` leaves the check out:
                a call with other inputs then runs the graph as it is, with no guarantee of its result.
            allow: operators of other namespaces to accept besides this converter's allow-list
                (``"transformers::grouped_mm_fallback"``, ``"quantized_decomposed::*"``); resolved only
                among operators registered in this process.
            fold_constants: compute each graph's input-independent values (built from literals only, such as
                a relative-position index or an all-true mask) once per module and reuse them on later calls
                (:mod:`ir2torch.codegen.constant_fold`), and run attention on repeated key/value heads on the
                grouped heads where that is exact (:mod:`ir2torch.codegen.grouped_attention`), with the exact
                fast paths of a decoding step checked at each call (an all-true attention mask made in one op,
                :mod:`ir2torch.codegen.causal_mask`; transformers' experts product as ``torch._grouped_mm`` and size
                reads, :mod:`ir2torch.codegen.fast_paths`); tracers, modes and transforms still see every op.
                ``False`` recomputes them on every call, as the IR's graph does.
                Not used for a FlatIR.
            max_flops: the compute budget of one call (:mod:`ir2torch.run_safety.flops`), counted on fake tensors
                with the memory probe before anything runs: ``"auto"`` (65 536 FLOPs per parameter, at least
                10**12), FLOPs, or ``None`` (not counted); default: this converter's ``max_flops``.

        Raises:
            IRError: the IR is malformed or unsafe, a type has no builder, or the state
                dict does not fit (:class:`~common.errors.StateDictError` lists every key).
            ResourceBudgetError: the model would allocate more than ``max_bytes`` (nothing was
                allocated; it names the largest implementations).

        Warns:
            CustomBackwardWarning: the original model's forward called custom ``autograd.Function``\ s (the root's
                ``meta["custom_backward"]``, :mod:`common.notes`): outputs are exact, gradients through them are
                not their own backward's.
        """
        if allow:
            worker = self.copy()
            worker.allowlist = self.allowlist.extended(allow)
            return worker.convert(ir, state_dict, device=device, strict=strict, max_bytes=max_bytes,
                                  guard_inputs=guard_inputs, fold_constants=fold_constants, max_flops=max_flops)
        budget = self.max_bytes if isinstance(max_bytes, _Unset) else max_bytes
        flat = as_flat(ir, self.allowlist, self.executors.keys())
        if flat is not None:
            with weight_budget(budget):
                model = build_flat_module(flat, state_dict, device=device, strict=strict, allowlist=self.allowlist,
                                          executors=self.executors, guard_inputs=guard_inputs)
        else:
            # loading and building allocate much and free little; the model is kept (see common.collector)
            with collector_paused(long_lived=True):
                ir = as_ir(ir, self.allowlist)
                notes = custom_backward_names(ir.root.meta) if "root" in ir else [], unreached_experts(ir.values())
                model = self._convert_ir(ir, state_dict, device, strict, budget, guard_inputs, fold_constants)
                del ir  # one read from a file is freed now, before the collector walks what was built
        with collector_paused():  # one small object per generated module: nothing to collect
            install_budgets(model, budget, target_device(device), guarded=static_guard(model),
                            flops=self.max_flops if isinstance(max_flops, _Unset) else max_flops)
        if flat is None:
            warn_rebuild_notes(*notes)
        return model

    def _convert_ir(self, ir: IR, state_dict: Mapping[str, torch.Tensor] | str | os.PathLike | None,
                    device: torch.device | str | None, strict: bool, budget: Any, guard_inputs: bool,
                    fold_constants: bool = True) -> nn.Module:
        """:meth:`convert` of an :class:`~common.ir.IR` (see there; raises the same errors)."""
        validate(ir, allowlist=self.allowlist)
        check_opaque_allowed(ir, self.allowlist, self.opaque_builders)  # before anything is imported or built
        if "root" not in ir:
            raise IRFormatError("the IR has no 'root' implementation", hint="the top-level module's key is 'root'")
        check_budget({}, budget, target_device(device), what="implementation", measure=lambda: self.declared_sizes(ir))
        maps: dict[str, StateMap] = {}
        codes = CodeCache()  # identical graphs (repeated layers) share their generated code
        leaves = LeafCopies() if target_device(device).type == "meta" else None  # alike leaves on meta: copies
        # the root, and each module traced on its own below an opaque leaf, checks its inputs
        guarded = {"root", *traced_alone(ir)} if guard_inputs else set()
        modules = {key: self._build_one(impl, device, maps, key in guarded, codes, fold_constants, leaves)
                   for key, impl in ir.items()}
        take_owned(ir, modules)  # modules an opaque leaf's constructor made (a brevitas layer's quantizers)
        apply_bases(ir, modules, self.builders)  # a subclass of a torch.nn class stays one (common.base_class)
        root = attach_children(ir, modules)
        apply_reads(ir, modules)  # what an opaque leaf's code reads of a child traced on its own
        restore_quantization(ir, modules)
        restore_pt2e_prepared(ir, root)  # what convert_pt2e reads (common.pt2e_prepared)
        restore_state_layout(ir, modules)
        restore_tensors(ir, modules, device if state_dict is None else None)
        restore_modes(ir, modules)
        if state_dict is not None:
            state = read_state(state_dict)
            with kept_quantizers(ir):
                load_into(root, ir, state, maps, strict=strict, retie=lambda: restore_state_layout(ir, modules))
            restore_unsaved(ir, modules, state)
            restore_attributes(ir, modules)  # as the original was, whatever loading its state changed
        return root

    def declared_sizes(self, ir: IR) -> dict[str, int]:
        """Bytes each implementation of ``ir`` allocates when rebuilt, computed without allocating.

        The larger of its state records and, for a type with a builder, of the parameters and
        buffers the builder creates from ``impl.data`` when run on ``meta``.
        """
        sizes: dict[str, int] = {}
        for key, impl in ir.items():
            size = records_bytes(impl.state)
            entry = self._entry(impl)
            if entry is not None and impl.type != OPAQUE_TYPE:  # an opaque leaf's class is not imported
                size = max(size, int8_constructor_bytes(impl.type, impl.data),
                           measured_on_meta(lambda entry=entry, impl=impl: entry.build(impl)))
            sizes[key] = size
        return sizes

    def _entry(self, impl: Implementation) -> BuilderEntry | None:
        """The builder of ``impl`` (overrides scoped to its path first); ``None`` when it is rebuilt from its graph."""
        if impl.type not in self.builders:
            return None
        entry = self.builders.get(impl.type, impl.name)
        return None if entry.build is from_graph else entry  # the default of "module" (ir2torch.handlers.graph)

    def _build_one(self, impl: Implementation, device: torch.device | str | None,
                   maps: dict[str, StateMap], guard_inputs: bool = False,
                   codes: CodeCache | None = None, fold_constants: bool = True,
                   leaves: LeafCopies | None = None) -> nn.Module:
        entry = self._entry(impl)
        if entry is not None:
            if impl.variant_count:
                raise BuildError(f"type {impl.type!r} is built by its builder, which has one forward, but the IR "
                                 f"gives it {impl.variant_count + 1} per-call graphs", implementation=impl.name,
                                 hint="only modules rebuilt from their graphs can run per-call graphs")
            if impl.type == OPAQUE_TYPE and impl.data.get("class") in self.opaque_builders:
                entry = BuilderEntry(self.opaque_builders[impl.data["class"]])
            try:
                module = None if leaves is None else leaves.copy(entry.build, impl)
                if module is None:
                    with building_on(device):  # on meta, without the random fills (ir2torch.rebuild.device)
                        module = entry.build(impl)
                    if leaves is not None:
                        leaves.keep(entry.build, impl, module)
            except IRError:
                raise
            except Exception as exc:
                raise BuildError(f"the builder of type {impl.type!r} failed: {type(exc).__name__}: {exc}",
                                 implementation=impl.name,
                                 hint="the implementation's attributes do not fit its type's builder") from exc
            if not isinstance(module, nn.Module):
                raise BuildError(f"builder for {impl.type!r} returned {type(module).__name__}, not an nn.Module",
                                 implementation=impl.name, hint="a builder returns an nn.Module")
            if entry.state_map is not None:
                maps[impl.name] = entry.state_map
            guard = root_guard(impl) if guard_inputs else None
            if guard is not None:  # checked as a generated root checks (no generated code of its own to hold it)
                guard_builder_root(module, impl, guard)
            return module
        if impl.node_count or impl.type == "module":
            # a "module" never called has no graph: it only holds its state and children
            guard = root_guard(impl) if guard_inputs else None
            try:
                gm = graph_module(impl, self.allowlist, device=device, guard=guard, codes=codes, fold=fold_constants)
            except IRError:
                raise
            except Exception as exc:
                raise BuildError(f"cannot build the graph module: {type(exc).__name__}: {exc}",
                                 implementation=impl.name, hint="check the implementation's state records") from exc
            if guard is not None:
                guard.attach(gm)
            return gm
        raise HandlerNotFoundError(
            f"no builder for type {impl.type!r} and no graph to rebuild it from",
            implementation=impl.name,
            hint=f"register one: converter.register({impl.type!r})(lambda impl: MyModule(**impl.data))",
        )


def get_default_converter() -> Ir2Torch:
    """A fresh converter with the default builders (registering on it changes only it)."""
    from ir2torch.handlers import register_defaults

    converter = Ir2Torch()
    register_defaults(converter)
    return converter


def convert(
    ir: IR | FlatIR | Mapping[str, Any] | str | os.PathLike,
    state_dict: Mapping[str, torch.Tensor] | str | os.PathLike | None = None,
    *,
    device: torch.device | str | None = None,
    strict: bool = True,
    max_bytes: Budget = AVAILABLE,
    guard_inputs: bool = True,
    allow: Iterable[str] | None = None,
    fold_constants: bool = True,
    max_flops: FlopBudget = AUTO,
) -> nn.Module:
    """Rebuild ``ir`` with a default converter (see :meth:`Ir2Torch.convert`)."""
    return get_default_converter().convert(ir, state_dict, device=device, strict=strict, max_bytes=max_bytes,
                                           guard_inputs=guard_inputs, allow=allow, fold_constants=fold_constants,
                                           max_flops=max_flops)
