"""Qwen2-VL / Qwen2.5-VL vision towers with every window attended in one call, for ``egoplan_hf``'s model.

transformers 5.x's Qwen-VL vision attention, under any attention implementation but flash-attention,
splits each block's packed sequence into its segments (Qwen2-VL: one per frame; Qwen2.5-VL: one per
112-pixel window, or per frame in its four full-attention blocks) and calls the attention once per segment,
after reading the segment lengths to the host three times (``lengths.tolist()`` per query, key and value):
at Qwen2.5-VL-7B's shape on EgoPlan's 8 frames and observation image, 2,260 attention calls and 192 device
synchronisations a question (docs/upstream/transformers/qwen-vl-packed-vision-attention.md).

``pack_vision_attention(model)`` gives each such vision attention module of one loaded model a forward
that gathers the segments into one padded batch (segment x longest segment, padded keys masked out) and
calls ``scaled_dot_product_attention`` once, the same arithmetic on the same values; where every segment has the
same length (windows and frames whose sides are multiples of 112 pixels, as at the speed bench's 448), the packed
sequence is viewed as that batch: no gathering, no scattering back, no mask. The segment layout
(one host read of the longest segment) is computed once per ``cu_seqlens`` tensor, which the tower shares
between its blocks. transformers' ``AttentionInterface`` cannot do it: the loop runs in the module's forward
before the interface is called, and only an implementation whose name contains "flash" receives the
segments in one call, which makes transformers load a flash-attention kernel for it.

Scoped: the forward is set on the module instances of the model egoplan_hf loaded (no class is changed, so no
other model in the process is affected); guarded by release (transformers 5) and by behaviour (the module's
own forward still holds the per-segment loop, its attention implementation is ``sdpa``, accelerate has not hooked
its forward); anything else is left as it is.
"""

from __future__ import annotations

import functools
import inspect
import sys

import torch
from torch.nn import functional

# The vision attention classes whose forward loops over segments (transformers 5.x, checked by behaviour below).
PACKED_CLASSES = ("VisionAttention", "Qwen2_5_VLVisionAttention")  # qwen2_vl, qwen2_5_vl
PER_SEGMENT_LOOP = "torch.split(tensor, lengths.tolist(), dim=2)"
# The last tensors' layouts kept (a tower passes two: its full-attention and its window segments).
KEPT_LAYOUTS = 2


class SegmentLayout:
    """Where each token of a packed sequence goes in the padded (segment, position) batch, and back; or, where every
    segment has the same length (``uniform``: Qwen2.5-VL's windows and frames on sides that are multiples of 112
    pixels), no gathering: the packed sequence is that batch already, a view."""

    def __init__(self, cu_seqlens: torch.Tensor, tokens: int, longest: int | None = None):
        lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        self.segments = lengths.shape[0]
        # The longest segment: given (egoplan_hf computes it on the host with the tower's layout), else the one host
        # read per layout.
        self.longest = int(lengths.max()) if longest is None else int(longest)
        # The lengths sum to ``tokens``: all equal exactly when the longest times their number does.
        self.uniform = self.longest * self.segments == tokens
        if self.uniform:
            return
        offsets = torch.arange(self.longest, device=cu_seqlens.device)
        starts = cu_seqlens[:-1].long()
        # Padding positions read the last token (any valid index); the key mask keeps them out.
        self.gather = (starts[:, None] + offsets[None, :]).clamp(max=tokens - 1)
        self.key_mask = (offsets[None, :] < lengths[:, None])[:, None, None, :]
        positions = torch.arange(tokens, device=cu_seqlens.device)
        segment = torch.searchsorted(cu_seqlens[1:].long(), positions, right=True)
        self.scatter = segment * self.longest + positions - starts[segment]

    def batched(self, tokens: torch.Tensor) -> torch.Tensor:
        """(tokens, heads, dim) -> (segments, heads, longest, dim): a view where ``uniform``, else gathered."""
        if self.uniform:
            return tokens.unflatten(0, (self.segments, self.longest)).transpose(1, 2)
        return tokens[self.gather].transpose(1, 2)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
        """Each segment's attention, in one ``scaled_dot_product_attention`` call, back in packed order (tokens,
        heads x dim); unmasked where ``uniform`` (no padding), which leaves a GPU its flash-attention kernel."""
        mask = None if self.uniform else self.key_mask
        output = functional.scaled_dot_product_attention(*map(self.batched, (query, key, value)), attn_mask=mask,
                                                         scale=scale)
        output = output.transpose(1, 2).reshape(self.segments * self.longest, -1)
        return output if self.uniform else output[self.scatter]


class PackedVisionAttention:
    """The packed forward's state, shared by the vision attention modules of one model."""

    def __init__(self):
        self.enabled = True  # False: each module's own forward (the per-segment loop)
        self._layouts: list[tuple[torch.Tensor, SegmentLayout]] = []

    def layout(self, cu_seqlens: torch.Tensor, tokens: int, longest: int | None = None) -> SegmentLayout:
        for known, layout in self._layouts:
            if known is cu_seqlens:
                return layout
        layout = SegmentLayout(cu_seqlens, tokens, longest)
        self._layouts = [*self._layouts[-(KEPT_LAYOUTS - 1):], (cu_seqlens, layout)]
        return layout

    def attend(self, module, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None, **kwargs):
        """The module's forward (qkv, vision rotary embedding, attention, projection) with one attention call."""
        if not self.enabled or module.training:
            return module._per_segment_forward(hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
        tokens = hidden_states.shape[0]
        query, key, value = module.qkv(hidden_states).reshape(tokens, 3, module.num_heads, -1).permute(1, 0, 2, 3)
        cos, sin = position_embeddings
        # Looked up when called, as the module's own forward does: fused_elementwise compiles it meanwhile.
        query, key = sys.modules[type(module).__module__].apply_rotary_pos_emb_vision(query, key, cos, sin)
        return module.proj(self.layout(cu_seqlens, tokens, max_seqlen).attend(query, key, value, module.scaling))


def pack_vision_attention(model, enabled: bool = True) -> PackedVisionAttention | None:
    """Gives ``model``'s Qwen-VL vision attention modules the packed forward (see the module docstring), on
    while ``enabled``; None where the model has none that this release of transformers loops over."""
    import transformers

    if int(transformers.__version__.split(".")[0]) != 5:
        return None
    modules = [m for m in model.modules() if type(m).__name__ in PACKED_CLASSES and _loops_over_segments(m)]
    if not modules:
        return None
    packed = PackedVisionAttention()
    packed.enabled = enabled
    for module in modules:
        module._per_segment_forward = module.forward
        module.forward = functools.partial(packed.attend, module)
    return packed


def _loops_over_segments(module) -> bool:
    # A module with accelerate's own hook on its forward (device_map placement) keeps that forward.
    return (module.config._attn_implementation == "sdpa" and not hasattr(module, "_hf_hook")
            and PER_SEGMENT_LOOP in inspect.getsource(type(module).forward)
            and all(hasattr(module, name) for name in ("qkv", "proj", "num_heads", "scaling")))
