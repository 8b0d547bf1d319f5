"""An all-true attention mask of a decoding step made in one op instead of built, in a rebuilt module's folded forward
(what eager transformers skips when nothing is padded and one token is decoded).

transformers builds the boolean mask of sdpa attention from the 2-dim ``attention_mask``, the cache position and the
sizes: ``kv_idx <= q_idx`` (causal) and ``attention_mask[batch, kv_idx]`` (padding), broadcast from ``arange``s and
``expand``ed to ``[batch, 1, q_len, kv_len]``: about 28 small ops (70 us a step on the benchmark's CPU). Eager
transformers passes no mask at all when the ``attention_mask`` is all ones and ``q_len`` is 1; the traced graph always
builds it.

:func:`find` reads a graph as an abstract interpretation of those ops only: an integer tensor is known by a range
``[lo, hi]`` of its values and its shape, a boolean one as all-true with its shape, where ranges, shapes and sizes are
sums of the module's inputs' sizes, its integer inputs and literals (never a value of a file reaching code: these are
numbers the rebuilder computes). Each op is one of a short list (``arange``, ``add`` / ``sub`` of an integer,
``unsqueeze``, ``new_ones``, ``le``, ``gt``, ``__and__``, ``index``, ``expand``, ``to`` a boolean CPU tensor,
``sym_size``, ``sym_max``); the one tensor input it reads must be all non-zero, ``le(a, b)`` is all-true when ``a``'s
largest value is at most ``b``'s smallest, ``gt(a, b)`` when ``b``'s largest plus one is at most ``a``'s smallest,
``index`` needs its indices within the sizes, and ``sym_max(a, b)`` is ``b`` when ``a <= b`` (Gemma-2's sliding-window
mask: its first key position is ``max(past - window + 1, 0)``, so the mask is made in one op while the past is at most
``window - 1`` tokens; beyond, it is built). Those conditions are recorded, not assumed: :class:`MaskSkip` evaluates
them on the call's actual sizes and reads the input's values (``min() != 0``), and only when every one holds does the
module run the forward where the mask is ``torch.ones(shape, dtype=torch.bool)``: the same values, shape, dtype, device
and (contiguous) strides as the ops produce (``tests/ir2torch/test_decoding_fast_paths.py`` compares them over batches
and lengths; the ``expand`` must keep its input's sizes, so no size is broadcast with a zero stride), read only by
submodule calls or as the condition of ``where(mask, other, float)`` (eager attention's float mask, Gemma-2's:
``where`` reads its condition, its output is fresh and takes its layout from the same sizes and strides), as the built
one was (never returned by the module); a module may build several (Gemma-2: full and sliding-window layers), each made
in one op when every condition of all of them holds. Any other call (a padded batch, a prompt of several tokens, sizes
that would raise) runs the folded forward that builds the mask.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from common import python_functions

_aten = torch.ops.aten
_CPU = torch.device("cpu")
#: A sum ``const + sum(coeff * symbol)``; a symbol is ``(input index, dim)`` (a size) or ``(input index, -1)``
#: (an integer input).
Lin = tuple[int, tuple[tuple[int, int, int], ...]]
_ONE: Lin = (1, ())


def _lin_add(a: Lin, b: Lin, sign: int = 1) -> Lin:
    terms: dict[tuple[int, int], int] = {}
    for i, d, c in a[1]:
        terms[i, d] = terms.get((i, d), 0) + c
    for i, d, c in b[1]:
        terms[i, d] = terms.get((i, d), 0) + sign * c
    return a[0] + sign * b[0], tuple(sorted((i, d, c) for (i, d), c in terms.items() if c))


def evaluate(lin: Lin, args: tuple) -> int:
    """The value of ``lin`` for the call's inputs ``args`` (their types checked by :meth:`MaskSkip.applies`)."""
    total = lin[0]
    for i, d, c in lin[1]:
        total += c * (args[i] if d < 0 else args[i].size(d))
    return total


class _Ints:
    """An integer tensor: values within ``[lo, hi]``, of ``shape``."""

    def __init__(self, lo: Lin, hi: Lin, shape: list[Lin]) -> None:
        self.lo, self.hi, self.shape = lo, hi, shape


class _True:
    """A boolean tensor whose elements are all true, of ``shape``."""

    def __init__(self, shape: list[Lin]) -> None:
        self.shape = shape


class _MaskView:
    """``view(mask, [size(0), -1])`` of the 2-dim mask input ``index`` (its first size checked on each call)."""

    def __init__(self, index: int) -> None:
        self.index = index


def _condition_of_where(user: fx.Node, mask: fx.Node) -> bool:
    """``user`` is ``where(mask, other, float)`` reading ``mask`` as its condition only (a read: a fresh output)."""
    target = getattr(user.target, "overload", user.target)
    return user.op == "call_function" and target is _aten.where.ScalarOther and len(user.args) == 3 and \
        not user.kwargs and user.args[0] is mask and user.args[1] is not mask and type(user.args[2]) is float


class _Reader:
    """The abstract interpretation of one graph (see the module's text)."""

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self.inputs = {n: i for i, n in enumerate(n for n in graph.nodes if n.op == "placeholder")}
        self.values: dict[fx.Node, Any] = {}
        self.checks: list[tuple[Lin, Lin]] = []  # each ``a <= b``
        self.masks: set[int] = set()  # 2-dim inputs whose values must all be non-zero
        self.ints: set[int] = set()  # integer inputs
        self.tensors: set[int] = set()  # tensor inputs whose sizes are read

    def equal(self, a: Lin, b: Lin) -> Lin:
        if a != b:
            self.checks += [(a, b), (b, a)]
        return a

    def broadcast(self, a: list[Lin], b: list[Lin]) -> list[Lin]:
        """The shape both broadcast to (sizes that are not literal ones must be equal: checked on each call)."""
        out = []
        for k in range(1, max(len(a), len(b)) + 1):
            x = a[-k] if k <= len(a) else _ONE
            y = b[-k] if k <= len(b) else _ONE
            out.append(y if x == _ONE else x if y == _ONE else self.equal(x, y))
        return out[::-1]

    def lin(self, value: Any) -> Lin | None:
        if type(value) is int:
            return value, ()
        if isinstance(value, fx.Node):
            found = self.values.get(value)
            if isinstance(found, tuple):
                return found
            if value in self.inputs:
                self.ints.add(self.inputs[value])  # an integer input (its type is checked on each call)
                return 0, ((self.inputs[value], -1, 1),)
        return None

    def read(self, node: fx.Node) -> Any:
        """The abstract value of ``node`` (one case per op of the module's list), or ``None``."""
        target = getattr(node.target, "overload", node.target)
        args, kwargs = node.args, dict(node.kwargs)
        if node.op != "call_function":
            return None
        if target is _aten.sym_size.int and len(args) == 2 and not kwargs and args[0] in self.inputs and \
                type(args[1]) is int and args[1] >= 0:
            self.tensors.add(self.inputs[args[0]])
            return 0, ((self.inputs[args[0]], args[1], 1),)
        if target in (python_functions.bounded_add, operator.add, operator.sub) and len(args) == 2 and not kwargs:
            a, b = self.lin(args[0]), self.lin(args[1])
            return None if a is None or b is None else _lin_add(a, b, -1 if target is operator.sub else 1)
        if target is torch.sym_max and len(args) == 2 and not kwargs:
            a, b = self.lin(args[0]), self.lin(args[1])
            if a is None or b is None:
                return None
            self.checks.append((a, b))  # max(a, b) is b when a <= b (checked on each call)
            return b
        if target is _aten.arange.default and len(args) == 1 and kwargs == {"device": _CPU, "pin_memory": False}:
            n = self.lin(args[0])
            if n is None:
                return None
            self.checks.append((_ONE, n))  # at least one value: [0, n - 1] is a range
            return _Ints((0, ()), _lin_add(n, (-1, ())), [n])
        x = self.values.get(args[0]) if args and isinstance(args[0], fx.Node) else None
        if target is _aten.add.Tensor and len(args) == 2 and not kwargs and isinstance(x, _Ints):
            c = self.lin(args[1])
            return None if c is None else _Ints(_lin_add(x.lo, c), _lin_add(x.hi, c), x.shape)
        if target is _aten.sub.Tensor and len(args) == 2 and not kwargs and isinstance(x, _Ints):
            c = self.lin(args[1])
            return None if c is None else _Ints(_lin_add(x.lo, c, -1), _lin_add(x.hi, c, -1), x.shape)
        if target is _aten.unsqueeze.default and len(args) == 2 and not kwargs and type(args[1]) is int and \
                isinstance(x, (_Ints, _True)) and -len(x.shape) - 1 <= args[1] <= len(x.shape):
            d = args[1] if args[1] >= 0 else args[1] + len(x.shape) + 1
            shape = [*x.shape[:d], _ONE, *x.shape[d:]]
            return _Ints(x.lo, x.hi, shape) if isinstance(x, _Ints) else _True(shape)
        if target is _aten.new_ones.default and len(args) == 2 and args[1] == [] and \
                kwargs == {"dtype": torch.bool, "pin_memory": False} and isinstance(x, (_Ints, _True)):
            return _True([])  # on the CPU, as every tensor of this interpretation
        y = self.values.get(args[1]) if len(args) > 1 and isinstance(args[1], fx.Node) else None
        if target is _aten.le.Tensor and len(args) == 2 and not kwargs and isinstance(x, _Ints) and \
                isinstance(y, _Ints):
            self.checks.append((x.hi, y.lo))
            return _True(self.broadcast(x.shape, y.shape))
        if target is _aten.gt.Tensor and len(args) == 2 and not kwargs and isinstance(x, _Ints) and \
                isinstance(y, _Ints):
            self.checks.append((_lin_add(y.hi, _ONE), x.lo))  # integers: x > y where y's largest + 1 <= x's least
            return _True(self.broadcast(x.shape, y.shape))
        if target is _aten.__and__.Tensor and len(args) == 2 and not kwargs and isinstance(x, _True) and \
                isinstance(y, _True):
            return _True(self.broadcast(x.shape, y.shape))
        if target is _aten.view.default and len(args) == 2 and not kwargs and args[0] in self.inputs and \
                isinstance(args[1], (list, tuple)) and len(args[1]) == 2 and args[1][1] == -1:
            first = self.lin(args[1][0])
            if first is None:
                return None
            index = self.inputs[args[0]]  # a 2-dim mask keeps its shape when its first size is the one asked
            self.tensors.add(index)
            self.equal((0, ((index, 0, 1),)), first)
            return _MaskView(index)
        if target is _aten.to.device and tuple(args[1:]) == (_CPU, torch.bool) and not kwargs and \
                (args[0] in self.inputs or isinstance(x, _MaskView)):
            # the 2-dim attention mask: all non-zero, checked on each call
            index = x.index if isinstance(x, _MaskView) else self.inputs[args[0]]
            self.masks.add(index)
            self.tensors.add(index)
            return _True([(0, ((index, 0, 1),)), (0, ((index, 1, 1),))])
        if target is _aten.to.dtype_layout and len(args) == 1 and \
                kwargs == {"dtype": torch.bool, "layout": torch.strided, "device": _CPU}:
            return x if isinstance(x, _True) else None
        if target is _aten.index.Tensor and len(args) == 2 and not kwargs and isinstance(x, _True) and \
                len(x.shape) == 2 and isinstance(args[1], (list, tuple)) and len(args[1]) == 2 and \
                all(isinstance(self.values.get(i), _Ints) for i in args[1]):
            shape: list[Lin] = []
            for dim, node in enumerate(args[1]):  # indices within the sizes: the values read are all true
                ints = self.values[node]
                self.checks += [((0, ()), ints.lo), (_lin_add(ints.hi, _ONE), x.shape[dim])]
                shape = ints.shape if dim == 0 else self.broadcast(shape, ints.shape)
            return _True(shape)
        if target is _aten.expand.default and len(args) == 2 and not kwargs and isinstance(x, _True) and \
                isinstance(args[1], (list, tuple)) and len(args[1]) >= len(x.shape):
            lead = len(args[1]) - len(x.shape)
            out = []
            for k, size in enumerate(args[1]):  # sizes kept, leading ones of 1: a view with x's strides
                lin = None if size == -1 and k >= lead else self.lin(size)
                if lin is None:
                    if size != -1 or k < lead:
                        return None
                    out.append(x.shape[k - lead])
                    continue
                out.append(self.equal(_ONE if k < lead else x.shape[k - lead], lin))
            return _True(out)
        return None

    def run(self) -> list[fx.Node]:
        """The nodes holding the masks to make (all true, used outside the interpreted ops); empty
        when there is none or one is read by anything but a submodule call or as the condition of a ``where``."""
        for node in self.graph.nodes:
            value = self.read(node)
            if value is not None:
                self.values[node] = value
        known = set(self.values)
        outside = [n for n, v in self.values.items() if isinstance(v, _True) and n.users.keys() - known]
        # the all-true values read outside (the masks), by submodule calls or as the condition of a where only (never
        # an output of the module); the others are read only by interpreted ops
        if not outside or not self.masks or self.ints & self.tensors or \
                not all(u.op == "call_module" or _condition_of_where(u, n) for n in outside for u in n.users):
            return []
        return outside


class MaskSkip:
    """When a call of the module may run the forward where the mask is made in one op (module's text)."""

    def __init__(self, reader: _Reader, nodes: list[fx.Node], forward: Callable[..., Any]) -> None:
        self.forward = forward
        self.count = len(reader.inputs)
        self.shapes = tuple(tuple(reader.values[node].shape) for node in nodes)
        self.checks = tuple(dict.fromkeys(reader.checks))
        self.masks = tuple(sorted(reader.masks))
        self.ints = tuple(sorted(reader.ints))
        self.tensors = tuple(sorted(reader.tensors))

    def applies(self, args: tuple, kwargs: dict[str, Any]) -> bool:
        """Whether this call's mask is all true: every recorded condition holds on its inputs."""
        if kwargs or len(args) != self.count or any(type(args[i]) is not int for i in self.ints) or \
                any(type(args[i]) is not torch.Tensor for i in self.tensors):
            return False
        for i in self.masks:
            mask = args[i]
            if mask.dim() != 2 or not mask.is_cpu or mask.numel() == 0 or mask.is_complex():
                return False
        try:
            if any(evaluate(a, args) > evaluate(b, args) for a, b in self.checks):
                return False
        except (IndexError, RuntimeError):
            return False  # a size the graph reads does not exist: the plain forward raises it
        return all(args[i].min().item() != 0 for i in self.masks)


def all_true(shape: tuple[Lin, ...], *inputs: Any) -> torch.Tensor:
    """The all-true boolean mask of ``shape`` (sums of the module's inputs' sizes) on the CPU: what the ops
    :class:`MaskSkip` skips compute (module's text)."""
    return torch.ones(tuple(evaluate(lin, inputs) for lin in shape), dtype=torch.bool, device=_CPU)


def find(graph: fx.Graph) -> bool:
    """Whether ``graph`` builds masks :class:`MaskSkip` can make in one op each."""
    return bool(_Reader(graph).run())


def skipping(graph: fx.Graph, compile_graph: Callable[[fx.Graph], Callable[..., Any]]) -> MaskSkip | None:
    """A :class:`MaskSkip` for ``graph`` (the folded forward): a copy where the mask node is :func:`all_true` of
    its shape, compiled by ``compile_graph`` (which may rewrite it first); ``None`` when there is no such mask."""
    reader = _Reader(graph)
    nodes = reader.run()
    if not nodes:
        return None
    copy = fx.Graph()
    copy._codegen = graph._codegen
    env: dict[fx.Node, fx.Node] = {}
    for n in graph.nodes:
        env[n] = copy.node_copy(n, env.__getitem__)
    inputs = [env[n] for n in reader.inputs]
    for node in nodes:
        target, value = env[node], reader.values[node]
        args = (tuple(value.shape), *inputs)
        with copy.inserting_after(target):
            made = copy.call_function(all_true, args)
        target.replace_all_uses_with(made)
        made.args = args
    for n in reversed(list(reader.values)):  # the interpreted ops nothing reads any more (all pure)
        if not env[n].users:
            copy.erase_node(env[n])
    return MaskSkip(reader, nodes, compile_graph(copy))


__all__ = ["MaskSkip", "all_true", "evaluate", "find", "skipping"]
