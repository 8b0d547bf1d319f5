"""Preconditions checked where a graph's node needs them, not by a dispatch mode over the whole call.

A probe on fake tensors sees no index, label or offset, so the values a kernel reads from data
(:data:`~ir2torch.run_safety.op_preconditions.PRECONDITIONS`: :mod:`~ir2torch.run_safety.index_checks`,
``repeat_interleave``, ``ctc_loss``...) are tested on the real arguments. Only a few nodes of a graph can reach
such an operator; code generation (:mod:`ir2torch.codegen`) asks :func:`checked_target` for each
``call_function`` target and :func:`module_needs_checks` (at each call) for a module that is not generated code:

- an ATen overload with a precondition and its own kernel: its precondition is tested on the node's arguments,
  then the overload runs (:class:`CheckedCall`, one Python call more than the bare op); an ``index`` /
  ``index_put`` whose indices the graph proves in range (:mod:`~ir2torch.run_safety.index_provenance`) has their
  shapes compared instead of their values read, where that settles it;
- an overload that is a composite (``CompositeImplicitAutograd``: its C++ decomposition calls other operators)
  and is not known to reach no precondition (:data:`PRECONDITION_FREE_COMPOSITES`), a Python-level function of
  torch that dispatches to operators, a ``getitem`` with a computed index, and a module whose code is not
  generated and not known to reach no data-reading operator (an embedding, a loss, an opaque leaf): the node
  runs under :class:`~ir2torch.run_safety.op_modes.DataChecks`, which tests every operator the node dispatches,
  as the whole call did before (a plain ``nn.Embedding``, which dispatches one ``aten.embedding``, has that
  operator's precondition tested directly: :func:`call_data_checked`);
- an overload that writes an argument in place (``add_``, ``detach_``, an ``out=`` overload): before it runs, its
  written arguments are tested against the storages of the caller's tensors
  (:data:`~ir2torch.run_safety.writes.CALLER`, recorded for a model some graph of which may write a tensor that is
  not the graph's own, :func:`~ir2torch.run_safety.writes.foreign_writes`): after a probe, which saw the writes on
  fake tensors, and without a forward budget, where no probe runs (so a trusted rebuild with in-place nodes runs
  bare, not op by op);
- anything else (nearly every node): runs as it is.

Preconditions that depend only on shapes (batch norm's statistics, FFT dims...) are also tested by the forward's
probe on fake tensors for each input signature; without a memory or compute budget, a module naming such an
operator is still run op by op (:mod:`~ir2torch.run_safety.forward_budget`).
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch
from torch import fx, nn
from torch.nn.modules import module as _module

from ir2torch.run_safety.checked import Checked as _Checked
from ir2torch.run_safety.index_checks import bind
from ir2torch.run_safety.index_provenance import INDEXING, check_proven, proven_indices
from ir2torch.run_safety.op_modes import DataChecks, Tally, no_caller_write
from ir2torch.run_safety.op_preconditions import PRECONDITIONS, check_preconditions, qualified
from ir2torch.run_safety.writes import CALLER, writes_in_place

_compiling = torch.compiler.is_compiling
_exporting = torch.compiler.is_exporting
_jit_tracing = torch._C._get_tracing_state
_stack_len = torch._C._len_torch_dispatch_stack
_MODULE_CALL = nn.Module._wrapped_call_impl  # what __call__ is, also if this is imported while a tracer patches it

#: Composite overloads of the default surface whose decomposition reaches no operator of
#: :data:`~ir2torch.run_safety.op_preconditions.PRECONDITIONS` reading data (reviewed: each decomposes into
#: elementwise, view, reduction, matrix, convolution, pooling, normalization, sampling or upsampling kernels; batch
#: norm and the FFTs reach kernels whose preconditions depend on shapes only, tested by the forward's probe). A
#: composite not listed here runs under :class:`DataChecks`. Every composite of the default surface is either listed
#: here or has a precondition of its own (``tests/security/test_composite_reach.py`` fails otherwise, and records
#: the operators the composites added since the first review reach on sample arguments: none with a precondition;
#: ``grid_sampler``'s kernels clamp or zero-pad every coordinate, NaN and infinite ones included).
PRECONDITION_FREE_COMPOSITES = frozenset({
    "aten.__and__.Tensor", "aten.__iand__.Scalar", "aten.__ior__.Tensor", "aten.__ixor__.Tensor",
    "aten.__or__.Tensor", "aten.__xor__.Tensor", "aten._upsample_bicubic2d_aa.vec", "aten._upsample_bilinear2d_aa.vec",
    "aten._upsample_nearest_exact1d.vec", "aten._upsample_nearest_exact2d.vec", "aten._upsample_nearest_exact3d.vec",
    "aten.adaptive_avg_pool1d.default", "aten.adaptive_avg_pool2d.default", "aten.adaptive_avg_pool3d.default",
    "aten.argsort.default", "aten.batch_norm.default", "aten.bilinear.default", "aten.broadcast_to.default",
    "aten.cdist.default", "aten.chunk.default", "aten.concat.default", "aten.contiguous.default",
    "aten.conv1d.default", "aten.conv2d.default", "aten.conv2d.padding", "aten.conv3d.default", "aten.diff.default",
    "aten.dropout.default", "aten.dropout_.default", "aten.einsum.default", "aten.expand_as.default",
    "aten.fake_quantize_per_tensor_affine.tensor_qparams", "aten.fft_fftn.default", "aten.fft_irfft.default",
    "aten.fft_rfft.default", "aten.flatten.using_ints", "aten.fused_moving_avg_obs_fake_quant.default",
    "aten.group_norm.default", "aten.gru.input", "aten.instance_norm.default", "aten.item.default",
    "aten.layer_norm.default", "aten.linear.default", "aten.log_softmax.int", "aten.lstm.input",
    "aten.matmul.default", "aten.max.other", "aten.max_pool2d.default", "aten.meshgrid.indexing", "aten.min.other",
    "aten.multiply.Tensor", "aten.numpy_T.default", "aten.pad.default", "aten.real.default", "aten.reshape.default",
    "aten.reshape_as.default", "aten.resolve_conj.default", "aten.rms_norm.default",
    "aten.scaled_dot_product_attention.default", "aten.softmax.int", "aten.square.default", "aten.stft.default",
    "aten.sym_numel.default", "aten.sym_size.int", "aten.tensor_split.indices", "aten.to.device", "aten.to.dtype",
    "aten.to.dtype_layout", "aten.type_as.default", "aten.unflatten.int", "aten.upsample_bicubic2d.vec",
    "aten.upsample_bilinear2d.vec", "aten.upsample_nearest2d.vec", "aten.view_as.default", "aten.where.Scalar",
    "aten.where.ScalarOther",
    # added with the surface's growth (issue 50), their decompositions recorded by test_composite_reach
    "aten.broadcast_tensors.default", "aten.clip.default", "aten.grid_sampler.default", "aten.linalg_norm.default",
    "aten.log_sigmoid.default", "aten.max_pool1d.default", "aten.movedim.int", "aten.narrow.default",
    "aten.outer.default", "aten.swapaxes.default", "aten.tile.default", "aten.upsample_linear1d.vec",
    "aten.where.ScalarSelf", "aten.var.dim", "aten.isclose.default", "aten.conv_transpose1d.default",
})

#: Python-level functions (:mod:`common.python_functions`) that compute on Python numbers, symbolic sizes or
#: dispatch to no data-reading operator; ``operator.getitem`` / ``operator.index`` only with constant indices.
_PLAIN_MODULES = ("operator", "_operator", "math")
_INDEXING = (operator.getitem, operator.setitem)

#: Modules of ``torch.nn.modules`` whose classes may reach an operator reading data (embeddings, losses' labels,
#: ``AdaptiveLogSoftmaxWithLoss``); ``MaxUnpool*`` by name. The recurrent layers' ``index_select`` permutes a
#: ``PackedSequence``, which only the caller can pass (a file cannot make one: ``_pack_padded_sequence`` is refused).
_DATA_MODULES = ("torch.nn.modules.sparse", "torch.nn.modules.loss", "torch.nn.modules.adaptive",
                 "torch.nn.modules.linear_cross_entropy")


def tracing() -> bool:
    """Whether a tracer runs the call (torch.compile, torch.export, ``jit.trace``, fx): it sees the plain ops."""
    return bool(_compiling() or _exporting() or _jit_tracing() is not None or nn.Module.__call__ is not _MODULE_CALL)


def _covered() -> bool:
    """Whether one of run_safety's modes already tests every op of this call (a probe, a checked run)."""
    if not _stack_len():
        return False
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return any(isinstance(m, (DataChecks, Tally, _Checked)) for m in _get_current_dispatch_mode_stack())


def is_composite(overload: Any) -> bool:
    """Whether ``overload`` runs a C++ decomposition (``CompositeImplicitAutograd``) that dispatches other ops."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), "CompositeImplicitAutograd")


class CheckedCall(functools.partial):
    """``call(*args, **kwargs)`` after ``overload``'s precondition accepts the arguments (raises ``RuntimeError``,
    which the generated code reports as an ``ExecutionError`` naming the node). Compares and hashes equal to the
    overload, as :class:`~ir2torch.codegen.direct_op.DirectOp` does."""

    overload: Any

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CheckedCall):
            return self.overload is other.overload and self.args == other.args
        return self.overload is other

    def __hash__(self) -> int:
        return hash(self.overload)

    def __repr__(self) -> str:
        return f"CheckedCall({self.overload})"


def _run_precondition(key: str, call: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    if not tracing():  # the precondition by name: a CheckedCall holds no local function (it pickles)
        problem = PRECONDITIONS[key](*args, **kwargs)
        if problem is not None:
            raise RuntimeError(f"{name}: {problem}; refused before it runs")
    return call(*args, **kwargs)


def _run_index_proven(key: str, proofs: tuple[tuple[int, int, int], ...], call: Any, name: str, *args: Any,
                      **kwargs: Any) -> Any:
    """:func:`_run_precondition` of an ``index`` / ``index_put`` node some of whose indices are proven in range
    (:mod:`~ir2torch.run_safety.index_provenance`): their values are read only when their shapes do not settle it."""
    if not tracing():
        _check_index_proven(key, proofs, name, args, kwargs)
    return call(*args, **kwargs)


def _check_index_proven(key: str, proofs: tuple[tuple[int, int, int], ...], name: str, args: tuple,
                        kwargs: dict[str, Any]) -> None:
    if len(args) >= 2:  # every overload of INDEXING takes ``self, indices`` first: read them positionally
        self, indices = args[0], args[1]
    else:
        bound = bind(key, args, kwargs)
        self, indices = bound.get("self"), bound.get("indices")
    problem = check_proven(self, indices, proofs, lambda: PRECONDITIONS[key](*args, **kwargs))
    if problem is not None:
        raise RuntimeError(f"{name}: {problem}; refused before it runs")


def _run_precondition_untraced(key: str, call: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """:func:`_run_precondition` in a folded forward (:func:`untraced`): the precondition tested at every call."""
    problem = PRECONDITIONS[key](*args, **kwargs)
    if problem is not None:
        raise RuntimeError(f"{name}: {problem}; refused before it runs")
    return call(*args, **kwargs)


def _run_index_proven_untraced(key: str, proofs: tuple[tuple[int, int, int], ...], call: Any, name: str,
                               *args: Any, **kwargs: Any) -> Any:
    """:func:`_run_index_proven` in a folded forward (:func:`untraced`): the check made at every call."""
    _check_index_proven(key, proofs, name, args, kwargs)
    return call(*args, **kwargs)


def _run_write_checked_untraced(overload: Any, call: Any, *args: Any, **kwargs: Any) -> Any:
    """:func:`_run_write_checked` in a folded forward (:func:`untraced`): the writes tested at every call."""
    inputs = CALLER.inputs
    if inputs:
        no_caller_write(overload, args, kwargs, inputs, None)
    return call(*args, **kwargs)


def _run_data_checked(call: Any, *args: Any, **kwargs: Any) -> Any:
    if tracing() or _covered():
        return call(*args, **kwargs)
    with DataChecks():
        return call(*args, **kwargs)


def _run_write_checked(overload: Any, call: Any, *args: Any, **kwargs: Any) -> Any:
    inputs = CALLER.inputs
    if inputs and not tracing():  # raises OverBudget (write=True), which the forward budget reports
        no_caller_write(overload, args, kwargs, inputs, None)
    return call(*args, **kwargs)


#: Each check's form in a folded forward (:func:`untraced`).
_UNTRACED = {_run_precondition: _run_precondition_untraced, _run_index_proven: _run_index_proven_untraced,
             _run_write_checked: _run_write_checked_untraced}


def untraced(target: Any) -> Any:
    """``target`` (a node's target) for a module's folded forward (:mod:`ir2torch.codegen.fold_cache`): a
    precondition's, proven indices' or write check without its :func:`tracing` test, so the check is made at every
    call. The folded forward runs only where none of what :func:`tracing` tests holds (its per-call test,
    ``FoldState.ready``, tests each of them; nothing the forward runs leaves one on), and a check made under a tracer
    would only be one more; any other target is returned as it is."""
    if not isinstance(target, CheckedCall):
        return target
    func = _UNTRACED.get(target.func)
    if func is None:
        return target
    args = target.args
    if target.func is _run_write_checked:
        args = (args[0], untraced(args[1]), *args[2:])
    return _named(CheckedCall(func, *args), target.overload, target.overload)


def _named(wrapper: Any, overload: Any, call: Any) -> Any:
    wrapper.overload = getattr(call, "overload", overload)
    wrapper.__module__ = "checked"  # not under torch: fx binds the object itself (see DirectOp)
    name = getattr(call, "__name__", None) or getattr(overload, "__name__", "call")
    wrapper.__name__ = wrapper.__qualname__ = f"checked_{name}".replace(".", "_")
    return wrapper


def _reproved(call: CheckedCall, node: fx.Node | None) -> Any:
    """A checked call copied into another graph (a folded forward, a variant, whose rewrites may have replaced the
    nodes a proof rested on) keeps the index proofs that graph proves, and no other."""
    if node is None:
        return call
    if call.func in (_run_write_checked, _run_write_checked_untraced):
        inner = _reproved(call.args[1], node)
        return call if inner is call.args[1] else \
            _named(CheckedCall(call.func, call.args[0], inner), call.args[0], inner)
    if call.func not in (_run_index_proven, _run_index_proven_untraced):
        return call
    key, proofs, inner_call, name = call.args
    now = proven_indices(node)
    if now == proofs:
        return call
    untraced_form = call.func is _run_index_proven_untraced  # (a folded forward's: :func:`untraced`)
    proven, plain = (_run_index_proven_untraced, _run_precondition_untraced) if untraced_form else \
        (_run_index_proven, _run_precondition)
    return _named(CheckedCall(proven, key, now, inner_call, name) if now else
                  CheckedCall(plain, key, inner_call, name), call.overload, inner_call)


def with_call(checked: CheckedCall, call: Any) -> CheckedCall:
    """``checked`` (a precondition's or proven indices' check of one overload) running ``call`` once its check
    passed, in place of the overload's own call: the same check, made first at every call."""
    if checked.func in (_run_precondition, _run_precondition_untraced):
        key, _, name = checked.args
        return _named(CheckedCall(checked.func, key, call, name), checked.overload, checked.overload)
    if checked.func in (_run_index_proven, _run_index_proven_untraced):
        key, proofs, _, name = checked.args
        return _named(CheckedCall(checked.func, key, proofs, call, name), checked.overload, checked.overload)
    return checked  # a data-checked or write-checked call: left as it is


def checked_target(call: Any, node: fx.Node | None = None) -> Any:
    """What a ``call_function`` node calling ``call`` runs: ``call`` itself, or a :class:`CheckedCall` (see the
    module docstring). ``call`` may be an ``OpOverload``, a ``DirectOp`` of one, or a Python function."""
    if isinstance(call, CheckedCall):
        return _reproved(call, node)
    overload = getattr(call, "overload", call)
    if isinstance(overload, torch._ops.OpOverload):
        name = qualified(overload)
        composite = is_composite(overload)
        check = PRECONDITIONS.get(name)
        target = call
        if composite and name not in PRECONDITION_FREE_COMPOSITES:
            target = _named(CheckedCall(_run_data_checked, call), overload, call)
        elif check is not None:
            proofs = proven_indices(node) if node is not None and overload in INDEXING else ()
            target = _named(CheckedCall(_run_index_proven, name, proofs, call, str(overload)) if proofs else
                            CheckedCall(_run_precondition, name, call, str(overload)), overload, call)
        if writes_in_place(overload):
            return _named(CheckedCall(_run_write_checked, overload, target), overload, call)
        return target
    if isinstance(overload, torch._ops.HigherOrderOperator) or not callable(call):
        return call  # its bodies are graphs of their own, checked node by node
    owner = getattr(call, "__module__", None) or ""
    if owner.split(".")[0] in ("ir2torch", "common") and not owner.startswith("common.python_functions"):
        return call  # the rebuilder's own helpers (device, variants, guards)
    if owner in _PLAIN_MODULES or owner == "common.python_functions":
        if call in _INDEXING and node is not None and any(isinstance(a, fx.Node) for a in node.args[1:2]):
            return _named(CheckedCall(_run_data_checked, call), call, call)  # x[i] of a computed i: aten.index
        return call
    if owner == "torch" and getattr(call, "__name__", "").startswith("sym_"):
        return call
    return _named(CheckedCall(_run_data_checked, call), call, call)


#: class -> whether a call of one of its modules runs under DataChecks (read once per class).
MODULE_CHECKS: dict[type, bool] = {}


def module_needs_checks(cls: type) -> bool:
    """Whether a module of ``cls``, called from generated code, runs under :class:`DataChecks`: not when its
    ``forward`` is generated code (its nodes are checked there) or a class of ``torch.nn.modules`` that reaches
    no data-reading operator; yes for anything else (embeddings, losses, opaque leaves, quantized modules)."""
    try:
        return MODULE_CHECKS[cls]
    except KeyError:
        pass
    owner = getattr(cls, "__module__", "") or ""
    generated = getattr(cls, "_wrapped_call", None) is not None
    plain = owner.startswith("torch.nn.modules.") and owner not in _DATA_MODULES and \
        not cls.__name__.startswith("MaxUnpool") and _inherits_module_call(cls)
    MODULE_CHECKS[cls] = needs = not (generated or plain)
    return needs


def _inherits_module_call(cls: type) -> bool:
    """Whether ``cls`` calls through ``nn.Module.__call__``: no class of its MRO below ``nn.Module`` defines one.
    Read from the classes' own dictionaries, not by comparing ``cls.__call__`` with torch's: a tracer
    (``torch.fx.symbolic_trace``) replaces ``nn.Module.__call__`` while it runs, and what is read then is cached for
    the process (:data:`MODULE_CHECKS`); whether a tracer runs is tested at each call (:func:`tracing`)."""
    for klass in cls.__mro__:
        if klass is nn.Module:
            return True
        if "__call__" in klass.__dict__:
            return False
    return False


def call_data_checked(call: Any, obj: nn.Module, /, *args: Any, **kwargs: Any) -> Any:
    """``call(obj, *args, **kwargs)`` under :class:`DataChecks` (unless a tracer runs it, or a probe or a
    checked run already tests every op); a plain ``nn.Embedding`` call (:func:`_plain_embedding`) has the
    precondition of the one operator it dispatches tested directly, as :class:`DataChecks` would test it."""
    if tracing() or _covered():
        return call(obj, *args, **kwargs)
    if type(obj) is nn.Embedding and _plain_embedding(obj, args, kwargs):
        check_preconditions(_EMBEDDING, (obj.weight, args[0]), {})
        return obj.forward(args[0])
    with DataChecks():
        return call(obj, *args, **kwargs)


_EMBEDDING = torch.ops.aten.embedding.default
_function_modes = torch._C._is_torch_function_mode_enabled


def _plain_embedding(obj: nn.Embedding, args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether calling ``obj`` (exactly ``nn.Embedding``) dispatches ``aten.embedding`` of its weight and ``args[0]``
    and nothing else: its class's ``forward`` (``F.embedding``) on one plain tensor, no ``max_norm`` (whose
    renormalisation reads the indices too), a plain weight, no hook (module or global) and no torch function mode
    (which could run other operators)."""
    return len(args) == 1 and not kwargs and type(args[0]) is torch.Tensor and obj.max_norm is None and \
        type(obj.weight) in (torch.Tensor, nn.Parameter) and "forward" not in obj.__dict__ and \
        not (obj._forward_hooks or obj._forward_pre_hooks or obj._backward_hooks or obj._backward_pre_hooks
             or _module._global_forward_hooks or _module._global_forward_pre_hooks
             or _module._global_backward_hooks or _module._global_backward_pre_hooks or _function_modes()
             or obj._compiled_call_impl is not None)


__all__ = ["MODULE_CHECKS", "PRECONDITION_FREE_COMPOSITES", "CheckedCall", "call_data_checked", "checked_target",
           "is_composite", "module_needs_checks", "tracing", "untraced", "with_call"]
