"""A Llama-style decoder in plain PyTorch: the model knows nothing of parallelism or precision.

Conventions match Hugging Face's Llama (RoPE with rotate_half, RMSNorm in fp32, SwiGLU MLP) so
the export is a rename, not a weight permutation. With `qk_norm` the attention applies a per-head
RMSNorm to q and k before RoPE, as Qwen3 does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig
from trainer.moe import Experts, MoE, moe_layers
from trainer.mup import Readout, query_scale


class RMSNorm(nn.Module):
    """y = w * x / sqrt(mean(x^2) + eps), computed in fp32 then cast back (as in HF Llama)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def rope_cos_sin(
    head_dim: int, seq_len: int, theta: float, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (seq_len, head_dim): angle_{t,i} = t * theta^(-2i/head_dim), halves duplicated."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def document_layout(tokens: torch.Tensor, eot: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention mask (B, 1, T, T), positions (B, T)) for windows that hold several documents.

    A document ends with its `eot` token; position t may attend to s <= t of the same document only,
    and positions restart at 0 with each document, so a document scores as it would alone.
    """
    b, t = tokens.shape
    ends = tokens == eot
    doc = torch.cumsum(ends, dim=1) - ends.long()  # the EOT belongs to the document it ends
    index = torch.arange(t, device=tokens.device).expand(b, t)
    starts = torch.zeros_like(ends)
    starts[:, 1:] = ends[:, :-1]
    first = torch.cummax(torch.where(starts, index, torch.zeros_like(index)), dim=1).values
    causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
    mask = (doc[:, :, None] == doc[:, None, :]) & causal
    return mask[:, None], index - first


@torch.no_grad()
def head_max_logits(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None, block: int = 2**24
) -> torch.Tensor:
    """Per query head, the largest pre-softmax logit q.k / sqrt(hd) that attention lets through (causal, or
    `mask`), over the batch: (H,) in fp32. SDPA never exposes its logits, so they are recomputed here in
    blocks of query rows (~`block` logits each), in q's dtype; only MuonClip's QK-clip asks (`trainer.qk_clip`)."""
    b, h, t, hd = q.shape
    if k.shape[1] != h:  # grouped-query: query head i reads key head i // (H / H_kv), as SDPA's enable_gqa
        k = k.repeat_interleave(h // k.shape[1], dim=1)
    best = torch.full((h,), -math.inf, device=q.device)
    rows = max(1, block // (b * h * t))
    for start in range(0, t, rows):
        stop = min(t, start + rows)
        logits = (q[:, :, start:stop] @ k[:, :, :stop].mT).float() / math.sqrt(hd)
        if mask is None:
            allowed = torch.ones(stop - start, stop, dtype=torch.bool, device=q.device).tril(diagonal=start)
        else:
            allowed = mask[:, :, start:stop, :stop]
        best = torch.maximum(best, logits.masked_fill(~allowed, -math.inf).amax(dim=(0, 2, 3)))
    return best


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+d/2}) by the position angle; x is (B, H, T, hd)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Causal grouped-query attention: n_kv_heads key/value heads shared by n_heads query heads.

    `qk_max`, None unless MuonClip's QK-clip tracks it (`trainer.qk_clip`), is the running per-head maximum
    of the training forwards' logits (`head_max_logits`)."""

    qk_max: torch.Tensor | None = None

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.q_scale = query_scale(cfg.head_dim, cfg.mup_base_dim > 0)  # μP's 1/head_dim scores (trainer/mup.py)

    def project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values (B, heads, T, hd), normed and rotated: shared with the evaluators' cached
        attention (`evals.models.block_step`) so the two cannot drift apart."""
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.q_scale != 1.0:
            q = q * self.q_scale
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.project(x, cos, sin)
        if self.qk_max is not None and self.training:
            self.qk_max = torch.maximum(self.qk_max, head_max_logits(q, k, mask))
        gqa = self.n_kv_heads != self.n_heads
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:  # document masking: causal within each document (`document_layout`)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then + mlp(norm(x)); the mlp is a MoE on MoE layers."""

    def __init__(self, cfg: ModelConfig, index: int = 0) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward: nn.Module = MoE(cfg) if cfg.is_moe_layer(index) else FeedForward(cfg)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return x + self.feed_forward(self.ffn_norm(x))


def _drawn_then_zeroed(init: Callable[[torch.Tensor], torch.Tensor], tensor: torch.Tensor) -> torch.Tensor:
    return init(tensor).zero_()


# One step of the initialisation: (module, parameter name, in-place init of a full tensor).
InitStep = tuple[nn.Module, str, Callable[[torch.Tensor], torch.Tensor]]


class Transformer(nn.Module):
    """Token ids (B, T) -> logits (B, T, vocab).

    Built on the meta device, it holds no memory; `trainer.materialize` then allocates it sharded
    and replays `init_plan` shard by shard (the full-model path below draws the same numbers).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size <= 0:
            raise ValueError("ModelConfig.vocab_size must be set (from the tokenizer)")
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = (  # μP: logits / m (trainer/mup.py)
            Readout(cfg.dim, cfg.vocab_size, 1.0 / cfg.mup_width_mult)
            if cfg.mup_base_dim
            else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        )
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_cos_sin(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights()

    def init_plan(self) -> Iterator[InitStep]:
        """N(0, 0.02) everywhere; residual output projections (attention wo, every SwiGLU's w2, the
        experts' included) scaled by 1/sqrt(2 L) (GPT-2); norms 1.

        Under μP (`trainer.mup`) the hidden matrices' stds are divided by sqrt(m) and the query starts at 0.
        In the order the random numbers are drawn: whoever replays the plan in this order on full
        tensors after seeding gets the same weights.
        """
        std = self.cfg.init_std
        scaled_std = std / math.sqrt(2 * self.cfg.n_layers)
        yield self.tok_embeddings, "weight", partial(nn.init.normal_, std=std)
        if not self.cfg.tie_embeddings:
            yield self.output, "weight", partial(nn.init.normal_, std=std)
        # μP: hidden matrices' variance 1/fan_in relative to the base width, and the query zero (trainer/mup.py)
        zero_query = self.cfg.mup_base_dim > 0 and not self.cfg.qk_norm
        if self.cfg.mup_base_dim:
            std, scaled_std = std / math.sqrt(self.cfg.mup_width_mult), scaled_std / math.sqrt(self.cfg.mup_width_mult)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear) and name != "output":
                scaled = name.endswith(("attention.wo", "feed_forward.w2", "feed_forward.shared.w2"))
                init = partial(nn.init.normal_, std=scaled_std if scaled else std)
                if zero_query and name.endswith("attention.wq"):  # drawn, then zeroed: later draws stay SP's
                    init = partial(_drawn_then_zeroed, init)
                yield module, "weight", init
            elif isinstance(module, Experts):
                for weight in ("w1", "w3", "w2"):
                    yield module, weight, partial(nn.init.normal_, std=scaled_std if weight == "w2" else std)
            elif isinstance(module, RMSNorm):
                yield module, "weight", nn.init.ones_

    @torch.no_grad()
    def init_weights(self) -> None:
        """Apply `init_plan` to this (full, unsharded) model."""
        for module, name, init in self.init_plan():
            init(getattr(module, name))

    @torch.no_grad()
    def init_buffers(self) -> None:
        """Recompute the RoPE tables in place (after `to_empty`, buffers hold garbage)."""
        cos, sin = rope_cos_sin(self.cfg.head_dim, self.cfg.max_seq_len, self.cfg.rope_theta, self.rope_cos.device)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)
        for layer in moe_layers(self):
            layer.init_buffers()

    def forward(self, tokens: torch.Tensor, document_eot: int | None = None) -> torch.Tensor:
        """With `document_eot`, attention and positions stop at that token (document masking, off by default)."""
        t = tokens.shape[1]
        if t > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {t} tokens exceeds max_seq_len {self.cfg.max_seq_len}")
        h = self.tok_embeddings(tokens)
        mask = None
        if document_eot is None:
            cos, sin = self.rope_cos[:t].to(h.dtype), self.rope_sin[:t].to(h.dtype)
        else:
            mask, positions = document_layout(tokens, document_eot)
            cos, sin = self.rope_cos[positions][:, None].to(h.dtype), self.rope_sin[positions][:, None].to(h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(self.norm(h))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
    """Mean next-token cross-entropy in fp32, plus z_loss * mean(logsumexp^2) (PaLM) to keep logits small."""
    logits = logits.float().flatten(0, -2)
    targets = targets.flatten()
    if z_loss <= 0:
        return F.cross_entropy(logits, targets)
    lse = torch.logsumexp(logits, dim=-1)
    nll = lse - logits.gather(1, targets[:, None]).squeeze(1)
    return nll.mean() + z_loss * lse.pow(2).mean()
