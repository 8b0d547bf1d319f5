"""``reparameterize``: parallel branches of one input summed (RepVGG, MobileOne, ...) merged into one convolution.

In every graph, a sum (``aten.add.Tensor`` / ``aten.add_.Tensor``) whose terms are all convolutions of one value,
each possibly followed by an eval-mode batch norm, and that value itself (possibly through a batch norm: RepVGG's
identity branch) or a number, becomes one call of a new Conv1d/2d/3d ``<graph owner>.reparam_conv`` (as timm's own
``reparameterize()`` names it), its weight and bias computed in float64 (:mod:`common.rewrite.branch`). A branch
may run through module calls (timm's ``ConvNormAct`` of a conv and a ``BatchNormAct2d`` whose activation is the
identity) and through identity modules; the modules of the branches go with their state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from common.ir import IR, Implementation
from common.values import Ref

from .branch import Branch, affine, conv_branch, identity, shifted, summed
from .core import Match, NodeRef, Where, all_graphs, call_sites, callee, matches_where
from .fold import bn_affine, has_running_stats
from .fold_own import EVAL_BATCH_NORMS, STATE_NAMES, eval_form
from .ops import replace_nodes
from .passes import Rewritten
from .session import Session

CONVS = ("conv1d", "conv2d", "conv3d")
NORMS = ("batchnorm1d", "batchnorm2d", "batchnorm3d")
ADDS = ("aten.add.Tensor", "aten.add_.Tensor")
CONTAINERS = ("modulelist", "moduledict", "sequential")
#: a value: ``(source node, branch or None for the source itself, the nodes of the graph it covers)``
Value = tuple[str, "Branch | None", frozenset]


class _Evaluator:
    """Values of one graph's nodes as branches of a source, reading tensors from ``view``."""

    def __init__(self, ir: IR, view: Mapping[str, torch.Tensor]) -> None:
        self.ir, self.view = ir, view
        #: where an identity branch's tensors live: with the state's (cpu, or meta for a model built on meta)
        self.device = next((t.device for t in view.values() if isinstance(t, torch.Tensor)), torch.device("cpu"))

    def _path(self, key: str, name: str) -> str:
        return name if key == "root" else f"{key}.{name}"

    def graph(self, owner: str, graph: Implementation) -> dict[str, Value]:
        """The value of every node of ``graph`` that is a branch of some source."""
        g = graph.graph
        values: dict[str, Value] = {}
        shapes = {n: (a.get("meta") or {}).get("shape") for n, a in g.nodes(data=True)}

        def lookup(arg: Any) -> Value | None:
            if not isinstance(arg, Ref) or arg.index is not None:
                return None
            return values.get(arg.node, (arg.node, None, frozenset()))

        def solid(value: Value, channels: int | None = None) -> Branch | None:
            source, branch, _ = value
            if branch is not None:
                return branch
            shape = shapes.get(source)
            if not (isinstance(shape, list) and len(shape) >= 3 and all(isinstance(d, int) for d in shape)):
                return None
            if channels is not None and shape[1] != channels:
                return None
            return identity(shape[1], len(shape) - 2, self.device)

        for node, attrs in g.nodes(data=True):
            value = self._node(owner, graph, node, attrs, lookup, solid)
            if value is not None:
                values[node] = value
        return values

    def _node(self, owner, graph, node, attrs, lookup, solid) -> Value | None:
        kind, args, kwargs = attrs.get("type"), list(attrs.get("args") or []), dict(attrs.get("kwargs") or {})
        key = callee(attrs)
        mine = frozenset({node})
        if key is not None:
            if len(args) != 1 or kwargs:
                return None
            arg = lookup(args[0])
            if arg is None:
                return None
            impl = self.ir[key]
            if kind in CONVS:
                return self._conv(key, impl, arg, mine)
            if kind in NORMS:
                if not has_running_stats(impl):
                    return None
                scale, shift = bn_affine(self.view, key, affine=bool(impl.data.get("affine", True)),
                                         eps=float(impl.data.get("eps", 1e-5)))
                branch = solid(arg, int(scale.shape[0]))
                out = affine(branch, scale, shift) if branch is not None else None
                return (arg[0], out, arg[2] | mine) if out is not None else None
            if kind == "identity":
                return (arg[0], arg[1], arg[2] | mine)
            if impl.graph is not None and len(impl.graphs()) == 1:
                return self._call(key, impl, arg, mine, solid)
            return None
        if kind == "function" and attrs.get("implementation") in ADDS and len(args) == 2 and \
                kwargs.get("alpha", 1) == 1 and set(kwargs) <= {"alpha"}:
            if attrs["implementation"] == "aten.add_.Tensor" and isinstance(args[0], Ref) and \
                    lookup(args[0]) == (args[0].node, None, frozenset()):
                return None  # x.add_(...) changes x itself, which others may read after it
            return self._add(args, lookup, solid, mine)
        if kind == "function" and attrs.get("implementation") in EVAL_BATCH_NORMS and not kwargs:
            return self._batch_norm_op(owner, graph, attrs, args, lookup, solid, mine)
        return None

    def _conv(self, key: str, impl: Implementation, arg: Value, mine: frozenset) -> Value | None:
        data = impl.data
        if arg[1] is not None or data.get("padding_mode", "zeros") != "zeros":
            return None  # a convolution of something else than the source itself
        prefix = self._path(key, "")
        weight = self.view.get(prefix + "weight")
        bias = self.view.get(prefix + "bias") if data.get("bias") else None
        if weight is None or (data.get("bias") and bias is None):
            return None
        branch = conv_branch(weight, bias, stride=data.get("stride"), padding=data.get("padding"),
                             dilation=data.get("dilation"), groups=data.get("groups", 1))
        return (arg[0], branch, arg[2] | mine) if branch is not None else None

    def _call(self, key: str, impl: Implementation, arg: Value, mine: frozenset, solid) -> Value | None:
        """A module call: the branch its graph computes of its one input, after the argument's branch."""
        g = impl.graph
        inputs = [n for n, a in g.nodes(data=True) if a.get("type") == "input"]
        outputs = [a for _, a in g.nodes(data=True) if a.get("type") == "output"]
        if len(inputs) != 1 or len(outputs) != 1:
            return None
        out = (outputs[0].get("args") or [None])[0]
        out = out[0] if isinstance(out, list) and len(out) == 1 else out
        if not isinstance(out, Ref) or out.index is not None:
            return None
        inner = self.graph(key, impl).get(out.node, (out.node, None, frozenset()))
        if inner[0] != inputs[0]:
            return None
        if inner[1] is None:
            return (arg[0], arg[1], arg[2] | mine)
        if arg[1] is None:
            return (arg[0], inner[1], arg[2] | mine)
        b = inner[1]
        per_channel = b.convs == 0 and b.groups == b.in_channels == b.out_channels and \
            all(k == 1 for k in b.kernel) and all(s == 1 for s in b.stride) and all(p == 0 for p in b.padding)
        out_branch = affine(arg[1], b.weight.flatten(), b.bias) if per_channel else None
        return (arg[0], out_branch, arg[2] | mine) if out_branch is not None else None

    def _add(self, args: list[Any], lookup, solid, mine: frozenset) -> Value | None:
        refs = [a for a in args if isinstance(a, Ref)]
        numbers = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
        if len(refs) == 2:
            a, b = lookup(refs[0]), lookup(refs[1])
            if a is None or b is None or a[0] != b[0] or (a[1] is None and b[1] is None):
                return None
            x, y = solid(a), solid(b)
            total = summed(x, y) if x is not None and y is not None else None
            return (a[0], total, a[2] | b[2] | mine) if total is not None else None
        if len(refs) == 1 and len(numbers) == 1:
            a = lookup(refs[0])
            if a is None or a[1] is None:
                return None
            return (a[0], shifted(a[1], float(numbers[0])), a[2] | mine)
        return None

    def _batch_norm_op(self, owner, graph, attrs, args, lookup, solid, mine) -> Value | None:
        """An eval-form batch-norm op of the graph owner's own statistics (timm's ``BatchNormAct2d``)."""
        positions, training, eps_at, tuple_out = EVAL_BATCH_NORMS[attrs["implementation"]]
        if tuple_out or len(args) <= eps_at or \
                (training is not None and not eval_form(attrs["implementation"], args[training])):
            return None
        arg = lookup(args[0])
        if arg is None:
            return None
        tensors: dict[str, torch.Tensor] = {}
        for position, name in zip(positions, STATE_NAMES):
            ref = args[position]
            if ref is None and name in ("weight", "bias"):
                continue
            if not isinstance(ref, Ref) or graph.graph.nodes[ref.node].get("type") != "get_attr":
                return None
            target = graph.graph.nodes[ref.node].get("implementation")
            value = self.view.get(self._path(owner, str(target)))
            if value is None:
                return None
            tensors[name] = value
        eps = args[eps_at]
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or ("weight" in tensors) != ("bias" in tensors):
            return None
        mean, var = tensors["running_mean"].to(torch.float64), tensors["running_var"].to(torch.float64)
        gamma = tensors["weight"].to(torch.float64) if "weight" in tensors else torch.ones_like(mean)
        beta = tensors["bias"].to(torch.float64) if "bias" in tensors else torch.zeros_like(mean)
        scale = gamma / torch.sqrt(var + float(eps))
        branch = solid(arg, int(scale.shape[0]))
        out = affine(branch, scale, beta - mean * scale) if branch is not None else None
        return (arg[0], out, arg[2] | mine) if out is not None else None


def _data(branch: Branch) -> dict[str, Any]:
    return {"in_channels": branch.in_channels, "out_channels": branch.out_channels, "kernel_size": branch.kernel,
            "stride": branch.stride, "padding": branch.padding, "dilation": branch.dilation,
            "groups": branch.groups, "bias": True, "padding_mode": "zeros"}


def _candidates(s: Session, owner: str, graph: Implementation, skipped: list[str]) -> list[tuple[str, Value]]:
    """The sums of ``graph`` to merge: each the last of its sum, every value it covers read only inside it."""
    g = graph.graph
    if not any(a.get("type") == "function" and a.get("implementation") in ADDS for _, a in g.nodes(data=True)):
        return []
    values = _Evaluator(s.ir, s.view()).graph(owner, graph)
    out = []
    for node, value in values.items():
        attrs = g.nodes[node]
        if attrs.get("type") != "function" or attrs.get("implementation") not in ADDS or value[1] is None or \
                value[1].convs == 0:
            continue
        if any(v in values and values[v][0] == value[0] and node in values[v][2] for v in g._succ[node]):
            continue  # a later sum covers it
        covered = value[2]
        leaks = [(u, v) for u in covered if u != node for v in g._succ[u] if v not in covered]
        if leaks:
            skipped.append(f"{owner}:{node}: not merged: {leaks[0][0]} is also read by {leaks[0][1]}")
            continue
        sites = call_sites(s.ir)
        shared = [callee(g.nodes[u]) for u in covered if callee(g.nodes[u]) is not None and
                  len(sites.get(str(callee(g.nodes[u])), [])) != 1]
        if shared:
            skipped.append(f"{owner}:{node}: not merged: the module {shared[0]} is called more than once")
            continue
        out.append((node, value))
    return out


def reparameterize(ir: IR, state: Mapping[str, torch.Tensor] | None, *, where: Where = None,
                   allow: Iterable[str] | None = None) -> Rewritten:
    """Merge every sum of parallel branches of one value into one convolution (RepVGG / MobileOne, eval mode).

    A sum qualifies when each of its terms is a convolution of the same value (zero padding, no other op
    between), optionally followed by eval-mode batch norms (``nn.BatchNorm*d`` leaves, or a module computing an
    eval-form batch norm of its own statistics, timm's ``BatchNormAct2d`` with an identity activation), or that
    value itself (optionally batch-normed), or a number; with at least one convolution, equal strides and
    dilations, and kernels that line up centred (a 1x1 without padding inside a 3x3 with padding 1). Groups
    become the greatest common divisor of the branches' (an identity branch is depthwise). The sum, its
    branches' nodes and their modules (with their state) become one call ``reparam_conv`` of a new
    ``<owner>.reparam_conv`` Conv with a bias, computed in float64 and stored in the output's dtype; the call
    keeps the sum's shape and dtype. ``where`` selects the graph owners (a glob or a predicate).

    Sums left alone although their terms are branches of one value are listed in ``skipped`` with why (a
    branch value read elsewhere, a module called more than once).

    Raises:
        RewriteError: no state was given, or the result does not validate.
        StateDictError: ``state`` does not fit ``ir``.
    """
    s = Session(ir, state, allow=allow, pass_name="reparameterize")
    s.need_state("reparameterize", "root")
    skipped: list[str] = []
    for owner, variant, graph in list(all_graphs(s.ir)):
        if owner not in s.ir or not matches_where(where, owner):
            continue
        for node, (source, branch, covered) in _candidates(s, owner, graph, skipped):
            assert branch is not None
            order = [n for n in graph.graph.nodes if n in covered]
            if len(order) != len(covered):
                continue  # an earlier merge in this graph took some of its nodes
            dtype = (graph.graph.nodes[node].get("meta") or {}).get("dtype")
            dtype = dtype if isinstance(dtype, torch.dtype) else torch.float32
            tensors = {"weight": branch.weight.to(dtype), "bias": branch.bias.to(dtype)}
            key = "reparam_conv" if owner == "root" else f"{owner}.reparam_conv"
            n = 1
            while key in s.ir:
                key = f"{key.rstrip('0123456789_')}_{n}"
                n += 1
            dims = len(branch.kernel)
            calls = {callee(graph.graph.nodes[u]) for u in order} - {None}
            count = len(s.changes)
            replace_nodes(s, Match(tuple(NodeRef(owner, u, variant) for u in order),
                                   tuple(callee(graph.graph.nodes[u]) for u in order)),
                          type=f"conv{dims}d", key=key, data=_data(branch), state_fn=lambda _o, t=tensors: t,
                          meta={"class": f"torch.nn.modules.conv.Conv{dims}d",
                                "training": bool(s.ir[owner].meta.get("training", False)), "source": key},
                          split=None, record=True, pass_name=None, node_name="reparam_conv")
            del s.changes[count:]
            _drop_empty_containers(s, calls)
            s.changes.append(f"{key}: {owner}:{node}, a sum of {branch.convs} convolution(s) of {source} "
                             f"({len(order)} nodes) -> conv{dims}d "
                             f"{'x'.join(map(str, branch.kernel))}, groups {branch.groups}")
    result = Rewritten(*s.finish(), s.changes)
    result.skipped = skipped
    return result


def _drop_empty_containers(s: Session, removed: set) -> None:
    """Remove the containers (``nn.ModuleList`` / ``ModuleDict`` / ``Sequential``) the merge left without children
    and that nothing calls (MobileOne's list of kxk branches), as timm's own ``reparameterize()`` deletes them."""
    sites = call_sites(s.ir)
    parents = {str(k).rpartition(".")[0] for k in removed}
    empty = [p for p in parents if p in s.ir and s.ir[p].type in CONTAINERS and p not in sites and
             not any(k.startswith(p + ".") for k in s.ir) and not s.ir[p].state]
    if empty:
        tensors = s.ir.tensors
        s.ir = IR([impl for key, impl in s.ir.items() if key not in empty])
        s.ir.tensors = tensors


__all__ = ["reparameterize"]
