"""Exact fast paths of a rebuilt module's folded forward: size reads, and transformers' grouped matrix product as
eager runs it.

:func:`rewrite` changes nodes of a copy of a graph: the module's folded forward (:mod:`ir2torch.codegen.fold_cache`),
which runs only when no tracer, mode or transform is active. The graph itself (``code``, tracers, probes,
re-export) keeps every op as the IR has it. Each function below computes bit for bit what the node it replaces
computes, and checks at every call that the arguments are ones where that holds; for any other arguments it runs the
node's op as the graph has it (through the same run-time checks).

- :func:`tensor_size` (``aten.sym_size.int``): ``Tensor.size(dim)`` of a plain tensor reads the size the
  operator's kernel reads, without a trip through the dispatcher (about 1 us a call; a decoding step of a small
  Llama has 15 of them).
- :func:`tensor_index` (``aten.index.Tensor`` with one index tensor, the experts' gathers: 12 calls a Mixtral
  step): ``Tensor.__getitem__`` of a plain tensor by one integer (int64 or int32) index tensor of at least one
  dimension dispatches exactly ``aten.index.Tensor(self, [index])`` (``THPVariable_getitem`` records the tensor as
  the only advanced index, slices nothing, and calls ``at::index``; a 0-dim integer index would become a
  ``select``, a bool or byte one a mask: those, and anything else, run the overload), about 1 us less than the
  overload's boxed call. The node's index check runs first, as before.
- :func:`to_dtype` (``aten.to.dtype`` with no other argument: RMS norms' and the experts' casts, mostly to the
  dtype the tensor has: 16 fewer ``aten::to`` dispatched in a 2-layer Mixtral step, 10 in Llama's): the kernel
  returns its input itself when the dtype is already the tensor's (``to_will_alias``: same dtype, layout and
  device, no copy, memory format preserved), which a plain tensor of that dtype gets here without the binding's
  argument parsing (0.07 us instead of 0.74); any other tensor or dtype runs the binding.
- every other ATen overload the folded forward calls without a Python binding (:mod:`ir2torch.run_safety.fast_ops`:
  a Llama or Mixtral step's ``slice.Tensor``, 16 and 17 calls) is called through ``OpOverload._op``, the entry
  ``OpOverload.__call__`` itself calls (the same overload, one Python frame less; dynamo cannot trace it, which is
  why the graph itself does not: the folded forward never runs under dynamo).
- the checks of the nodes that have one (:mod:`ir2torch.run_safety.node_checks`: a precondition, proven indices,
  writes) are made at every call without first testing whether a tracer runs the call
  (:func:`~ir2torch.run_safety.node_checks.untraced`): the folded forward runs only where none does.
- a module with no other reason for a folded forward gets one for these entries alone when it has at least
  :data:`MIN_ENTRIES` of them (Gemma-2's eager attention: 3 size reads and 4 or 6 slices a layer; GPT-2's
  ``Conv1D`` and Mixtral's MoE blocks: 2 size reads; one is not worth the folded forward's per-call check).
- :func:`grouped_mm` (``transformers.grouped_mm_fallback``, the experts' product of transformers' mixture-of-experts
  layers, :mod:`common.known_ops`): eager transformers calls ``torch._grouped_mm`` on the CPU, and picks its
  Python fallback only while compiling or exporting (float32 weights), so the IR has the fallback: a custom
  operator whose kernel is a Python loop ``torch.mm(input[a:b], weight[i], out=output[a:b])`` over the groups of
  ``offs.tolist()`` into a zero-filled output. ATen's CPU ``_grouped_mm`` is the same loop in C++
  (``at::mm_out`` of the same slices into an output it allocates, every group, empty ones included, which write
  nothing), so the two are equal whenever every row of the output is written by one group (``offs`` non-decreasing
  from 0 and ending at the number of rows) and ATen's output has the fallback's contiguous layout (its row stride is
  padded to 16 bytes: the number of columns a multiple of ``16 / element size``). :func:`grouped_mm` checks those,
  ATen's own argument checks (int32 ``offs``, dtypes, strides) and that the operator still runs transformers' own
  Python kernel of a version whose code was read (5.23.0); anything else runs the operator, checked as before.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import fx

from ir2torch.codegen.direct_op import DirectOp
from ir2torch.run_safety.node_checks import CheckedCall, checked_target, untraced, with_call

_aten = torch.ops.aten
_SYM_SIZE = _aten.sym_size.int
_INDEX = _aten.index.Tensor
_TO_DTYPE = _aten.to.dtype
_TENSOR = torch.Tensor
_INDEX_DTYPES = (torch.int64, torch.int32)
_function_modes = torch._C._is_torch_function_mode_enabled
_grouped_mm = torch._grouped_mm
_to = torch.Tensor.to  # the binding ``aten.to.dtype`` runs through (``ir2torch.run_safety.fast_ops``)
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_STRIDED = torch.strided
_EXPERTS_OP = "transformers.grouped_mm_fallback.default"
#: transformers versions whose ``_grouped_mm_fallback`` was read (the loop the module's text describes).
READ_TRANSFORMERS = frozenset({"5.23.0", "5.24.0"})


def _overload(node: fx.Node) -> Any:
    target = node.target
    return getattr(target, "overload", target) if node.op == "call_function" else None


def find(graph: fx.Graph) -> list[fx.Node]:
    """The experts' products of ``graph``: each is worth a folded forward (a size read alone is not: the folded
    forward's per-call check costs more than one saves)."""
    return [node for node in graph.nodes
            if str(_overload(node)) == _EXPERTS_OP and len(node.args) == 3 and not node.kwargs]


#: Fewest calls :func:`rewrite` changes (size reads, boxed calls, index entries) that give a module without another
#: reason for one a folded forward: each saves about 0.7-0.9 us; the folded forward's per-call check of a module
#: with nothing folded (no values, so no key of global state to read: ``fold_cache.FoldState.ready``) costs about
#: 0.4 us and its call about as much as the plain one (a GPT-2 ``Conv1D``'s 2 reads: 8.5 -> 7.8 us a call).
MIN_ENTRIES = 2


def entries(graph: fx.Graph) -> int:
    """How many calls of ``graph`` :func:`rewrite` would change into a fast entry (:func:`find`'s not counted)."""
    return sum(1 for node in graph.nodes if node.op == "call_function" and _entry(node) is not None)


def _entry(node: fx.Node) -> Any:
    """The fast entry a ``call_function`` node's target becomes (:func:`rewrite`), or ``None``."""
    target = node.target
    if _overload(node) is _SYM_SIZE and len(node.args) == 2 and not node.kwargs:
        return tensor_size
    if _overload(node) is _TO_DTYPE and len(node.args) == 2 and not node.kwargs and \
            (target is _TO_DTYPE or isinstance(target, DirectOp)):  # (a checked call keeps its check)
        return to_dtype
    if isinstance(target, CheckedCall) and target.overload is _INDEX and len(node.args) == 2 and not node.kwargs:
        return with_call(target, tensor_index)  # the node's index check, then the fast entry
    if isinstance(target, torch._ops.OpOverload) or (isinstance(target, DirectOp) and target.func is target.overload):
        return boxed(getattr(target, "overload", target))
    return None


def rewrite(graph: fx.Graph) -> int:
    """Make each node of :func:`find` and each ``aten.sym_size.int`` of ``graph`` (a copy the folded forward runs)
    call its fast path; returns how many."""
    count = 0
    for node in find(graph):
        node.target = grouped_mm
        count += 1
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        node.target = untraced(node.target)  # its check made at every call, without the tracer test (not counted)
        if (entry := _entry(node)) is not None:
            node.target = entry
            count += 1
    return count


@functools.cache
def boxed(overload: Any) -> DirectOp:
    """``overload`` called through ``overload._op``, what ``OpOverload.__call__`` calls (module's text)."""
    op = DirectOp(overload._op)
    op.overload = overload
    op.__module__ = overload.namespace  # fx binds the object itself (see DirectOp)
    op.__name__ = op.__qualname__ = f"{overload._opname}.{overload._overloadname}"
    return op


def tensor_index(self: Any, indices: Any) -> Any:
    """``aten.index.Tensor(self, indices)``: ``self[index]`` where that dispatches exactly this overload (module's
    text), the overload otherwise."""
    if len(indices) == 1 and type(self) is torch.Tensor and self.dim() > 0 and not _function_modes():
        index = indices[0]
        if type(index) is torch.Tensor and index.dim() > 0 and index.dtype in _INDEX_DTYPES:
            return self[index]
    return _INDEX(self, indices)


def tensor_size(tensor: Any, dim: int) -> Any:
    """``aten.sym_size.int(tensor, dim)``: read directly for a plain tensor."""
    if type(tensor) is torch.Tensor:
        return tensor.size(dim)
    return _SYM_SIZE(tensor, dim)


def to_dtype(tensor: Any, dtype: Any) -> Any:
    """``aten.to.dtype(tensor, dtype)``: ``tensor`` itself for a plain tensor of that dtype (what the kernel returns),
    the tensor's ``to`` otherwise (module's text)."""
    if type(tensor) is _TENSOR and tensor.dtype is dtype:
        return tensor
    return _to(tensor, dtype)


def _valid_strides(strides: tuple[int, ...], sizes: torch.Size, alignment: int) -> bool:
    """ATen's ``check_valid_strides_and_return_transposed`` accepts a matrix of these strides and sizes (it raises
    otherwise); ``alignment`` is ``16 / element size``."""
    rows, columns = strides[-2], strides[-1]
    if rows == 1:
        size = sizes[-2]
        if columns >= (size if size > 1 else 1):
            return columns % alignment == 0
    if columns == 1:
        size = sizes[-1]
        if rows >= (size if size > 1 else 1):
            return rows % alignment == 0
    return False


def _runs_transformers_loop() -> bool:
    """The operator's kernel is transformers' own Python loop, of a version whose code was read (checked at every
    call: a kernel registered later for the operator turns the fast path off)."""
    found = _transformers_kernel()
    if found is None:
        return False
    opdefs, kernel = found
    opdef = opdefs.get("transformers::grouped_mm_fallback")
    return opdef is not None and opdef._init_fn is kernel and len(opdef._backend_fns) == 1 and \
        None in opdef._backend_fns


@functools.cache
def _transformers_kernel() -> tuple[dict[str, Any], Any] | None:
    """torch's table of custom operators and transformers' kernel of the operator, for a version whose code was
    read; ``None`` otherwise."""
    try:
        import transformers
        from torch._library.custom_ops import OPDEFS
        from transformers.integrations import moe
    except ImportError:
        return None
    if transformers.__version__ not in READ_TRANSFORMERS:
        return None
    return OPDEFS, getattr(moe, "_grouped_mm_fallback", None)


def _as_aten(input: Any, weight: Any, offs: Any) -> bool:
    """Whether ``torch._grouped_mm(input, weight, offs)`` computes what the fallback does (module's text)."""
    if type(input) is not torch.Tensor or type(weight) is not torch.Tensor or type(offs) is not torch.Tensor:
        return False
    dtype = input.dtype
    if offs.dtype is not torch.int32 or weight.dtype is not dtype or dtype not in _DTYPES or \
            not (input.is_cpu and weight.is_cpu and offs.is_cpu) or input.layout is not _STRIDED or \
            weight.layout is not _STRIDED or offs.layout is not _STRIDED:
        return False
    sizes, weight_sizes, alignment = input.shape, weight.shape, 16 // weight.element_size()
    if len(sizes) != 2 or len(weight_sizes) != 3 or offs.dim() != 1 or offs.size(0) != weight_sizes[0] or \
            sizes[1] != weight_sizes[1] or weight_sizes[2] % alignment != 0:
        return False
    if (input.requires_grad or weight.requires_grad) and torch.is_grad_enabled():
        return False
    if not (_valid_strides(input.stride(), sizes, alignment) and
            _valid_strides(weight.stride(), weight_sizes, alignment)):
        return False  # (input and weight have one dtype: one alignment)
    ends = offs.tolist()
    if not ends or ends[0] < 0 or ends[-1] != sizes[0] or ends != sorted(ends):
        return False
    return _runs_transformers_loop()


def grouped_mm(input: Any, weight: Any, offs: Any) -> Any:
    """``transformers.grouped_mm_fallback(input, weight, offs)``, run as ``torch._grouped_mm`` where that is exact
    (module's text); otherwise the operator with its run-time checks."""
    if _as_aten(input, weight, offs):
        return _grouped_mm(input, weight, offs=offs)  # the binding of ``aten._grouped_mm.default``
    return _checked_experts_op()(input, weight, offs)


@functools.cache
def _checked_experts_op() -> Any:
    """The operator as the graph calls it: through its precondition (:mod:`ir2torch.run_safety.node_checks`)."""
    return checked_target(torch.ops.transformers.grouped_mm_fallback.default)


__all__ = ["MIN_ENTRIES", "READ_TRANSFORMERS", "boxed", "entries", "find", "grouped_mm", "rewrite", "tensor_index",
           "tensor_size", "to_dtype"]
