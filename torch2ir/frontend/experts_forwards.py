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


__all__ = ["longcat_flash", "openai_privacy_filter"]
