"""Traceable forwards of transformers' eager experts loops, written here for the reviewed sources that
:mod:`torch2ir.frontend.transformers_experts` names (issue 49).

transformers' eager experts loop over ``expert_hit``, the experts some token was routed to, a tensor whose length
is read from data: ``torch.export`` cannot trace that loop. Each forward here runs the same body for **every**
expert, ``range(n)`` in the same increasing order as ``expert_hit`` (which ``nonzero`` returns sorted), on the same
token subset (``torch.where`` of the same mask: a size computed from data, which the trace keeps symbolic). An
expert no token was routed to runs on empty tensors and adds nothing (``index_add_`` of an empty index leaves the
sum as it is), so the sum gets the same terms in the same order: the same values, bit for bit. Each line keeps the
original's op and arguments, but for (each commented): the loop and the skips of an expert with no token;
``torch.where(mask)`` written as what ATen computes for it, ``mask.nonzero().unbind(1)``, and the in-place
``index_add_`` into the loop's own fresh zeros tensor as ``index_add`` (the same sum), so that the trace names
overloads of the default operator surface (``aten.where.default`` and ``aten.index_add_.default`` are not in it);
what the original computes only to decide its loop (``expert_hit``), which reaches no output, is not computed.
Gradients are the original's too; the experts that get no token add exact zeros (a ``-0.0`` entry of a gradient
with one expert hit in all may read ``+0.0``, equal under ``torch.equal``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def longcat_flash(self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                  top_k_weights: torch.Tensor) -> torch.Tensor:
    """``LongcatFlashExperts.forward`` (transformers 5.23.0, 5.24.0), traceable; the identity ("zero") experts,
    ``expert_idx >= num_routed_experts``, are decided per expert in Python as the original decides them."""
    final_hidden_states = torch.zeros_like(hidden_states)
    if top_k_index.numel() == 0:
        return final_hidden_states

    expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.total_experts).permute(2, 1, 0)

    # the original loops over expert_hit (the experts with a token, increasing); here over every expert, in order
    for expert_idx in range(self.total_experts):
        # torch.where(mask) is mask.nonzero().unbind(1) (ATen's nonzero_numpy), written so
        selection_idx, token_idx = expert_mask[expert_idx].squeeze(0).nonzero().unbind(1)
        # the original skips an expert with no token (never one of expert_hit); here it adds nothing
        current_state = hidden_states[token_idx]

        if expert_idx >= self.num_routed_experts or self.gate_up_proj is None:
            current_hidden_states = self.identity_expert(current_state)
        else:
            gate, up = F.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = self.act_fn(gate) * up
            current_hidden_states = F.linear(current_hidden_states, self.down_proj[expert_idx])

        current_hidden_states = current_hidden_states * top_k_weights[token_idx, selection_idx, None]
        # index_add_ into the fresh zeros tensor: its out-of-place form, the same sum
        final_hidden_states = final_hidden_states.index_add(0, token_idx, current_hidden_states.to(hidden_states.dtype))
    return final_hidden_states


def openai_privacy_filter(self: Any, hidden_states: torch.Tensor, router_indices: Any = None,
                          routing_weights: Any = None) -> torch.Tensor:
    """``OpenAIPrivacyFilterExperts``' eager forward (transformers 5.23.0, 5.24.0; the one its model chooses),
    traceable. The original's ``torch.no_grad()`` block computes only integer tensors (the routing mask), which
    carry no gradient either way, so it is left out (a grad-mode switch in the trace is not needed)."""
    original_dtype = hidden_states.dtype

    # Accumulate over fp32
    next_states = torch.zeros_like(hidden_states, dtype=torch.float32, device=hidden_states.device)
    expert_mask = torch.nn.functional.one_hot(router_indices, num_classes=self.num_experts)
    expert_mask = expert_mask.permute(2, 1, 0)

    # the original loops over expert_hit (increasing); its skip of index num_experts never applies there (one_hot
    # refuses that index); here every expert in order, one with no token adding nothing
    for expert_idx in range(self.num_experts):
        top_k_pos, token_idx = expert_mask[expert_idx].nonzero().unbind(1)  # torch.where(mask), as above
        current_state = hidden_states[token_idx]
        gate_up = (
            current_state.float() @ self.gate_up_proj[expert_idx].float()
            + self.gate_up_proj_bias[expert_idx].float()
        )
        gated_output = self._apply_gate(gate_up).float()
        out = gated_output.float() @ self.down_proj[expert_idx].float() + self.down_proj_bias[expert_idx].float()
        weighted_output = out * routing_weights[token_idx, top_k_pos, None].float()
        next_states = next_states.index_add(0, token_idx, weighted_output)  # index_add_, as above

    return next_states.to(original_dtype)


def switch_transformers(self: Any, hidden_states: torch.Tensor, selected_experts: torch.Tensor,
                        routing_weights: torch.Tensor) -> torch.Tensor:
    """``SwitchTransformersExperts.forward`` (transformers 5.23.0, 5.24.0), traceable: each expert is its own
    child module, called on its token subset (an empty one for an expert no token was routed to). Unlike the
    stacked experts above, such an expert's own parameters get a gradient of exact zeros where the original, never
    calling it, leaves their ``.grad`` as it was (``None`` after ``zero_grad()``): docs/opaque.md says so."""
    final_hidden_states = torch.zeros_like(hidden_states)
    expert_mask = selected_experts.permute(2, 1, 0)

    # the original loops over expert_hit (the experts with a token, increasing); here over every expert, in order
    for expert_idx in range(self.num_experts):
        idx, top_x = expert_mask[expert_idx].nonzero().unbind(1)  # torch.where(mask), as above
        # the original skips an expert with no token (never one of expert_hit); here it adds nothing
        current_state = hidden_states[None, top_x].reshape(-1, hidden_states.shape[-1])
        current_hidden_states = self[f"expert_{expert_idx}"](current_state) * routing_weights[top_x, idx, None]
        # index_add_ into the fresh zeros tensor: its out-of-place form, the same sum
        final_hidden_states = final_hidden_states.index_add(0, top_x, current_hidden_states.to(hidden_states.dtype))
    return final_hidden_states


def _to_changes_nothing(module: Any, dtype: Any) -> bool:
    """Whether ``module.to(dtype)`` returns ``module`` with its tensors as they are: an ``nn.Linear`` itself (no
    override of ``to`` or ``_apply``), a floating or complex ``dtype`` (else ``to`` raises), every floating or complex
    parameter, buffer and gradient of that dtype already (``Tensor.to`` returns each itself, ``_apply`` sets each's
    data to itself), and neither of torch's future flags that make ``_apply`` swap or overwrite parameters."""
    if type(module) is not nn.Linear or not isinstance(dtype, torch.dtype):
        return False
    if not (dtype.is_floating_point or dtype.is_complex):
        return False
    if torch.__future__.get_swap_module_params_on_conversion() or \
            torch.__future__.get_overwrite_module_params_on_conversion():
        return False
    params = list(module.parameters())
    tensors = [*params, *(p.grad for p in params if p.grad is not None), *module.buffers()]
    return all(t.dtype == dtype for t in tensors if t.is_floating_point() or t.is_complex())


def switch_transformers_router(self: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                              torch.Tensor]:
    """``SwitchTransformersTop1Router.forward`` (transformers 5.23.0, 5.24.0), traceable when its
    ``self.classifier = self.classifier.to(self.dtype)`` changes nothing: every floating tensor of the classifier
    has that dtype already, so ``Module.to`` returns the classifier itself, its tensors as they are (``torch.export``
    cannot trace that call: it fails to swap the weight). It is then not made; otherwise it is, as in the
    original (whose trace then fails as before). The rest is the original's, line for line."""
    self.input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(self.dtype)
    if self.training and self.jitter_noise > 0:
        hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
    if not _to_changes_nothing(self.classifier, self.dtype):
        self.classifier = self.classifier.to(self.dtype)  # as the original (fails to trace, as before)
    router_logits = self.classifier(hidden_states)

    router_probs = nn.functional.softmax(router_logits, dim=-1, dtype=self.dtype).to(self.input_dtype)
    expert_index = torch.argmax(router_probs, dim=-1)
    expert_index = torch.nn.functional.one_hot(expert_index, num_classes=self.num_experts)
    token_priority = torch.cumsum(expert_index, dim=-2)
    expert_capacity_mask = token_priority <= self.expert_capacity
    expert_index = expert_index * expert_capacity_mask
    router_probs = torch.max(router_probs, dim=-1).values.unsqueeze(-1)
    return expert_index, router_probs, router_logits


__all__ = ["longcat_flash", "openai_privacy_filter", "switch_transformers", "switch_transformers_router"]
