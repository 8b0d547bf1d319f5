"""Random models as small *programs*: a list of steps over numbered values, run by a plain ``forward``.

:class:`RandomModel` is what :func:`common.testing.models` draws. Its ``forward`` interprets its steps
(``torch.export`` unrolls the loop), its submodules are ordinary attributes, so the module hierarchy, the
state dict and the exported graph are those of a hand-written model. ``repr(model)`` prints the program,
which is what hypothesis shows for a (shrunk) counterexample::

    RandomModel(x: seq[2, 5, 8], *, z: flat[2, 4])
      linear0 = Linear(in_features=8, out_features=4, bias=True)
      v2 = linear0(v0)                      # seq[2, 5, 4]
      v3 = v2 * buffer0                     # seq[2, 5, 4]
      return {'out0': v3, 'out1': v1}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

# How a step combines its input values. "call*" steps call the submodule at ``target``.
OPS = ("call", "call_attention", "call_rnn", "add", "mul", "cat", "add_param", "mul_buffer", "mean", "flatten")


@dataclass(frozen=True)
class Value:
    """An intermediate value: its family (``flat`` (B, F), ``seq`` (B, T, F), ``img`` (B, C, H, W),
    ``tokens`` (B, T) int64) and its shape."""

    kind: str
    shape: tuple[int, ...]

    @property
    def features(self) -> int:
        """The size of the dimension layers act on (channels for images, last dim otherwise)."""
        return self.shape[1] if self.kind == "img" else self.shape[-1]

    def __str__(self) -> str:
        return f"{self.kind}{list(self.shape)}"


@dataclass(frozen=True)
class Step:
    """``v<n> = op(values[inputs...])``; ``target`` names the submodule, parameter or buffer used."""

    op: str
    inputs: tuple[int, ...]
    target: str = ""

    def render(self, out: int) -> str:
        """The step as one line of pseudo code producing value ``out``."""
        a = [f"v{i}" for i in self.inputs]
        text = {
            "call": f"{self.target}({a[0]})",
            "call_attention": f"{self.target}({a[0]}, {a[0]}, {a[0]}, need_weights=False)[0]",
            "call_rnn": f"{self.target}({a[0]})[0]",
            "add": " + ".join(a),
            "mul": " * ".join(a),
            "cat": f"torch.cat([{', '.join(a)}], dim={self.target})",
            "add_param": f"{a[0]} + {self.target}",
            "mul_buffer": f"{a[0]} * {self.target}",
            "mean": f"{a[0]}.mean(dim=1)",
            "flatten": f"{a[0]}.flatten(1)",
        }[self.op]
        return f"v{out} = {text}"


class Program(nn.Module):
    """Runs ``steps`` over a list of values that starts with the forward inputs."""

    def __init__(self, steps: Sequence[Step], types: Sequence[Value]) -> None:
        super().__init__()
        self.steps = tuple(steps)
        self.types = tuple(types)  # one per value: inputs first, then one per step

    def run(self, values: list[torch.Tensor]) -> list[torch.Tensor]:
        """Append the value of every step to ``values`` (in place) and return it."""
        for step in self.steps:
            v = [values[i] for i in step.inputs]
            if step.op == "call":
                out = self.get_submodule(step.target)(v[0])
            elif step.op == "call_attention":
                out = self.get_submodule(step.target)(v[0], v[0], v[0], need_weights=False)[0]
            elif step.op == "call_rnn":
                out = self.get_submodule(step.target)(v[0])[0]
            elif step.op == "add":
                out = v[0] + v[1]
            elif step.op == "mul":
                out = v[0] * v[1]
            elif step.op == "cat":
                out = torch.cat(v, dim=int(step.target))
            elif step.op == "add_param":
                out = v[0] + getattr(self, step.target)
            elif step.op == "mul_buffer":
                out = v[0] * getattr(self, step.target)
            elif step.op == "mean":
                out = v[0].mean(dim=1)
            elif step.op == "flatten":
                out = v[0].flatten(1)
            else:  # pragma: no cover - steps are built by common.testing.models only
                raise ValueError(f"unknown step op {step.op!r}")
            values.append(out)
        return values

    def program_lines(self, first: int) -> list[str]:
        """Module definitions and steps as pseudo code; values are numbered from ``first``."""
        lines = []
        for name, module in self.named_children():
            if isinstance(module, RandomBlock):
                lines.append(f"{name} = RandomBlock:")
                lines += ["  " + line for line in module.program_lines(0)]
            else:
                lines.append(f"{name} = {module!r}".replace("\n", "\n  "))
        owner: dict[int, str] = {}  # tied weights: "tied0.weight is linear0.weight"
        for name, p in self.named_parameters(remove_duplicate=False):
            if id(p) in owner and "." in name and name.split(".")[0] != owner[id(p)].split(".")[0]:
                lines.append(f"{name} is {owner[id(p)]}")
            owner.setdefault(id(p), name)
        for name, p in self.named_parameters(recurse=False):
            lines.append(f"{name} = Parameter{list(p.shape)}")
        for name, b in self.named_buffers(recurse=False):
            lines.append(f"{name} = buffer{list(b.shape)}")
        for i, step in enumerate(self.steps):
            out = first + i
            lines.append(f"{step.render(out):<40}# {self.types[out]}")
        return lines


class RandomBlock(Program):
    """A nested module: a chain of steps over one input, with an optional residual connection."""

    def __init__(self, steps: Sequence[Step], types: Sequence[Value], residual: bool) -> None:
        super().__init__(steps, types)
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.run([x])[-1]
        return x + out if self.residual else out

    def program_lines(self, first: int = 0) -> list[str]:
        lines = super().program_lines(1)
        lines.insert(0, f"def forward(v0):  # {self.types[0]}")
        last = f"v{len(self.types) - 1}"
        lines.append(f"return v0 + {last}" if self.residual else f"return {last}")
        return lines

    def __repr__(self) -> str:
        return "RandomBlock:\n  " + "\n  ".join(self.program_lines())


class RandomModel(Program):
    """A random model: inputs ``x``, optional ``y`` (positional) and keyword-only ``z``; outputs a tensor,
    a tuple or a dict of values.

    Args:
        inputs: ``{name: Value}`` of the forward inputs in value order (``x``, then ``y``/``z`` when used).
        steps: the program.
        types: the :class:`Value` of every value (inputs first).
        outputs: indices of the returned values.
        output_format: ``"tensor"`` (one output), ``"tuple"`` or ``"dict"``.
    """

    def __init__(
        self,
        inputs: Mapping[str, Value],
        steps: Sequence[Step],
        types: Sequence[Value],
        outputs: Sequence[int],
        output_format: str,
    ) -> None:
        super().__init__(steps, types)
        self.inputs = dict(inputs)
        self.outputs = tuple(outputs)
        self.output_format = output_format

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None, *, z: torch.Tensor | None = None) -> Any:
        given = {"x": x, "y": y, "z": z}
        values = self.run([given[name] for name in self.inputs])
        outs = [values[i] for i in self.outputs]
        if self.output_format == "tensor":
            return outs[0]
        if self.output_format == "tuple":
            return tuple(outs)
        return {f"out{k}": o for k, o in enumerate(outs)}

    def example_inputs(self, seed: int = 0, scale: float = 1.0) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
        """Deterministic ``(args, kwargs)`` for this model: normal values times ``scale``, tokens in [0, 16)."""
        gen = torch.Generator().manual_seed(seed)
        tensors = {}
        for name, value in self.inputs.items():
            if value.kind == "tokens":
                tensors[name] = torch.randint(0, VOCAB, value.shape, generator=gen)
            else:
                tensors[name] = torch.randn(value.shape, generator=gen) * scale
        args = tuple(tensors[n] for n in ("x", "y") if n in tensors)
        kwargs = {"z": tensors["z"]} if "z" in tensors else {}
        return args, kwargs

    def program(self) -> str:
        """The whole model as pseudo code (also its ``repr``)."""
        sig = [f"{n}: {v}" for n, v in self.inputs.items() if n != "z"]
        if "z" in self.inputs:
            sig.append(f"*, z: {self.inputs['z']}")
        mode = "" if self.training is False else "  [train mode]"
        lines = [f"RandomModel({', '.join(sig)}){mode}"]
        lines += ["  " + line for line in self.program_lines(len(self.inputs))]
        outs = [f"v{i}" for i in self.outputs]
        if self.output_format == "tensor":
            ret = outs[0]
        elif self.output_format == "tuple":
            ret = f"({', '.join(outs)},)"
        else:
            ret = "{" + ", ".join(f"'out{k}': {o}" for k, o in enumerate(outs)) + "}"
        lines.append(f"  return {ret}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.program()


VOCAB = 16
