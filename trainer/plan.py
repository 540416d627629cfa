"""Back-of-the-envelope plan for a pretraining run: compute, tokens, wall time, memory per GPU, layout.

    python -m trainer.plan --params 1e9 --tokens 20e9 --gpus 64 --gpu h100 --mfu 0.4
    python -m trainer.plan --model 70B --gpus 256 --gpu h100 --seq-len 4096 --explain

The layouts section (`trainer.layouts`) lists the feasible (dp_replicate, dp_shard, tp, pp, AC,
micro-batch) layouts with memory per GPU, traffic per step and an MFU estimate, and recommends one.

The arithmetic is the standard one (Kaplan/Chinchilla C = 6ND, the Ultra-Scale Playbook's memory
accounting, Korthikanti et al. 2022 for activations); every assumption is printed with the result.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass, replace

from common.cli import ArgumentParser, errors_as_one_line, fail, integer, real
from trainer.config import MAX_RANKS, MAX_SEQ_LEN, PRESETS, ModelConfig
from trainer.layouts import explain, rank_layouts, table
from trainer.metrics import PEAK_FLOPS

GIB = 2**30
CHINCHILLA_TOKENS_PER_PARAM = 20
# Shapes to plan with beyond the trainer's presets: Llama-2-70B (Touvron et al. 2023, GQA 64:8, untied).
SHAPES: dict[str, ModelConfig] = {
    **PRESETS,
    "70B": ModelConfig(
        dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim=28672, tie_embeddings=False, max_seq_len=4096
    ),
}
GLOBAL_BATCH_TOKENS = 4e6  # ~4M tokens per step, the seeds' typical pretraining batch (Llama-2: 4M)


def derive_shape(params: float, vocab: int, aspect: int = 128, head_dim: int = 128) -> ModelConfig:
    """A Llama-like shape with ~`params` non-embedding weights: N = 12 L d^2 and d = aspect * L.

    d is rounded to a multiple of 2 heads so the head count stays even.
    """
    unit = 2 * head_dim
    dim = max(unit, round((params * aspect / 12) ** (1 / 3) / unit) * unit)
    layers = max(1, round(params / (12 * dim * dim)))
    ffn = round(8 * dim / 3 / 256) * 256
    heads = dim // head_dim
    return ModelConfig(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=heads, ffn_dim=ffn, vocab_size=vocab)


@dataclass(frozen=True)
class Plan:
    """All figures of a plan (bytes are per GPU)."""

    params: float
    tokens: float
    gpus: int
    gpu: str
    mfu: float
    seq_len: int
    micro_batch: int
    shape: dict
    compute_6nd: float
    compute_with_attention: float
    chinchilla_tokens: float
    tokens_per_param: float
    wall_seconds: float
    gpu_hours: float
    cluster_tokens_per_s: float
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    unsharded_block_bytes: float
    activations_bytes: dict
    logits_bytes: float
    total_bytes: dict
    moe: dict | None = None  # `moe_terms` for a mixture-of-experts shape


def make_plan(
    params: float,
    tokens: float | None,
    gpus: int,
    gpu: str,
    mfu: float,
    seq_len: int = 2048,
    micro_batch: int = 1,
    shape: ModelConfig | None = None,
    vocab: int = 50304,
    ep: int = 1,
) -> Plan:
    """Compute the plan; `shape` defaults to a Llama-like one derived from `params`."""
    if gpu not in PEAK_FLOPS:
        raise KeyError(f"unknown GPU {gpu!r}; known: {sorted(PEAK_FLOPS)}")
    cfg = shape or derive_shape(params, vocab)
    n, d = params, tokens if tokens is not None else CHINCHILLA_TOKENS_PER_PARAM * params
    attn_per_token = 12 * cfg.n_layers * cfg.dim * seq_len
    moe = moe_terms(cfg, seq_len, micro_batch, ep) if cfg.moe_experts else None
    c_6nd = 6 * (n * cfg.active_params() / cfg.num_params() if moe else n) * d  # a token runs its top_k experts
    c_all = c_6nd + attn_per_token * d
    sustained = gpus * PEAK_FLOPS[gpu] * mfu
    wall = c_all / sustained

    # FSDP (ZeRO-3) with bf16 compute and fp32 master weights: every persistent byte is sharded.
    weights, grads, optim = 4 * n / gpus, 4 * n / gpus, 8 * n / gpus
    block_params = cfg.num_params(include_embedding=False) / cfg.n_layers
    # in flight: bf16 params of the current and the prefetched block + bf16 grads of one block
    unsharded = 2 * (2 * block_params) + 2 * block_params
    s, b, h, a, layers = seq_len, micro_batch, cfg.dim, cfg.n_heads, cfg.n_layers
    per_layer_selective = s * b * h * 34  # Korthikanti: 34 sbh bytes per layer, attention recomputed
    per_layer_none = s * b * h * (34 + 5 * a * s / h)  # + the a*s^2 score/softmax/dropout tensors
    activations = {
        "none": layers * per_layer_none,
        "selective": layers * per_layer_selective,
        "full": layers * 2 * s * b * h + per_layer_selective,  # block inputs (bf16) + one block recomputed
    }
    logits = 2 * 4 * s * b * cfg.vocab_size  # fp32 logits and their gradient
    base = weights + grads + optim + unsharded + logits
    return Plan(
        params=n,
        tokens=d,
        gpus=gpus,
        gpu=gpu,
        mfu=mfu,
        seq_len=seq_len,
        micro_batch=micro_batch,
        shape=cfg.to_dict(),
        compute_6nd=c_6nd,
        compute_with_attention=c_all,
        chinchilla_tokens=CHINCHILLA_TOKENS_PER_PARAM * n,
        tokens_per_param=d / n,
        wall_seconds=wall,
        gpu_hours=wall * gpus / 3600,
        cluster_tokens_per_s=d / wall,
        weights_bytes=weights,
        grads_bytes=grads,
        optimizer_bytes=optim,
        unsharded_block_bytes=unsharded,
        activations_bytes=activations,
        logits_bytes=logits,
        total_bytes={k: base + v for k, v in activations.items()},
        moe=moe,
    )


def moe_terms(cfg: ModelConfig, seq_len: int, micro_batch: int, ep: int) -> dict[str, float]:
    """What a mixture of experts changes: total vs active parameters, the experts' share of the
    16 B/param states, and the all-to-all bytes per GPU per micro-batch under expert parallelism.

    All-to-all: each MoE layer sends every token's k assignments (bf16, d values) to the experts' ranks
    and back (dispatch + combine), in forward and again in backward: 4 x s b k d x 2 bytes, of which the
    (ep - 1) / ep that leave the rank cross the network (DeepSeek-V3 / torchtitan's token dispatch).
    """
    expert_params = cfg.n_moe_layers * cfg.moe_experts * 3 * cfg.dim * cfg.expert_ffn_dim
    per_layer = 4 * seq_len * micro_batch * cfg.moe_top_k * cfg.dim * 2 * (ep - 1) / ep
    return {
        "total_params": cfg.num_params(),
        "active_params": cfg.active_params(),
        "expert_params": expert_params,
        "expert_state_bytes_per_ep_rank": 16 * expert_params / ep,
        "all_to_all_bytes_per_micro_batch": cfg.n_moe_layers * per_layer,
        "ep": ep,
    }


def _render_moe(moe: dict[str, float]) -> list[str]:
    return [
        "",
        f"Mixture of experts (expert parallel {moe['ep']:.0f})",
        f"  parameters: {moe['total_params']:.3g} total, {moe['active_params']:.3g} active per token "
        f"(compute uses the active ones); experts {moe['expert_params']:.3g}",
        f"  expert states (16 B/param) per EP rank before FSDP: {moe['expert_state_bytes_per_ep_rank'] / GIB:.2f} GiB",
        f"  all-to-all per GPU per micro-batch (dispatch + combine, fwd + bwd): "
        f"{moe['all_to_all_bytes_per_micro_batch'] / GIB:.3f} GiB",
    ]


def _human_time(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def render(p: Plan) -> str:
    """The plan as text, assumptions first."""
    sh = p.shape
    peak = PEAK_FLOPS[p.gpu]
    lines = [
        "Assumptions",
        "  C = 6 N D: forward 2 FLOPs per parameter per token, backward twice that (Kaplan et al. 2020)",
        f"  attention adds 12 L d T = {12 * sh['n_layers'] * sh['dim'] * p.seq_len:.3g} FLOPs/token "
        "(PaLM convention); wall time uses C with it",
        f"  {p.gpu.upper()} dense bf16 peak {peak / 1e12:.0f} TFLOP/s x MFU {p.mfu:.0%} = "
        f"{peak * p.mfu / 1e12:.0f} TFLOP/s sustained per GPU",
        f"  model shape: dim {sh['dim']}, {sh['n_layers']} layers, {sh['n_heads']} heads, "
        f"ffn {sh['ffn_dim']}, vocab {sh['vocab_size']}; seq_len {p.seq_len}, "
        f"micro-batch {p.micro_batch} per GPU",
        "  FSDP / ZeRO-3, bf16 compute: fp32 master weights 4 B + fp32 grads 4 B + Adam m, v 8 B",
        f"  = 16 B/param, all sharded over {p.gpus} GPUs; plus bf16 params of 2 blocks and grads of",
        "  1 block unsharded in flight",
        "  activations (Korthikanti et al. 2022, bf16): s b h (34 + 5 a s / h) bytes per layer; selective",
        "  recomputation (or FlashAttention) drops the 5 a s^2 b score term; full recomputation keeps only",
        "  each block's input (2 s b h) plus one block's working set",
        "",
        "Compute",
        f"  C = 6 x {p.params:.3g} x {p.tokens:.3g} = {p.compute_6nd:.3g} FLOPs "
        f"({p.compute_with_attention:.3g} with attention)",
        f"  Chinchilla-optimal tokens ~ 20 N = {p.chinchilla_tokens:.3g}; this run: {p.tokens_per_param:.1f} "
        f"tokens/param ({p.tokens / p.chinchilla_tokens:.2f}x optimal)",
        f"  wall time on {p.gpus} GPUs: {_human_time(p.wall_seconds)} ({p.wall_seconds:.3g} s); "
        f"{p.gpu_hours:,.0f} GPU-hours; {p.cluster_tokens_per_s:,.0f} tokens/s "
        f"({p.cluster_tokens_per_s / p.gpus:,.0f} per GPU)",
        "",
        f"Memory per GPU (GiB, sharded over {p.gpus})",
        f"  weights (fp32 shard)      {p.weights_bytes / GIB:8.2f}",
        f"  gradients (fp32 shard)    {p.grads_bytes / GIB:8.2f}",
        f"  optimizer (Adam m, v)     {p.optimizer_bytes / GIB:8.2f}",
        f"  unsharded blocks (bf16)   {p.unsharded_block_bytes / GIB:8.2f}",
        f"  logits + grad (fp32)      {p.logits_bytes / GIB:8.2f}",
    ]
    for mode in ("none", "selective", "full"):
        lines.append(
            f"  activations, AC {mode:<9} {p.activations_bytes[mode] / GIB:8.2f}   "
            f"-> total {p.total_bytes[mode] / GIB:8.2f}"
        )
    lines.append(f"  (without sharding, the 16 B/param states alone are {16 * p.params / GIB:.1f} GiB per GPU)")
    if p.moe:
        lines += _render_moe(p.moe)
    return "\n".join(lines)


MAX_GPUS = MAX_RANKS
MAX_PARAMS = 1e13  # five times the largest dense models announced; the derived shape stays within ModelConfig's


def check_plan_args(args: argparse.Namespace) -> None:
    """Counts >= 1, sizes finite and > 0, the MFU in (0, 1]: one `error:` line, exit 2 (a NaN or a zero
    used to end in a ZeroDivisionError or OverflowError traceback)."""
    at_least_one = {"--gpus": args.gpus, "--seq-len": args.seq_len, "--micro-batch": args.micro_batch,
                    "--vocab": args.vocab, "--gpus-per-node": args.gpus_per_node}  # fmt: skip
    for flag, value in at_least_one.items():
        if value < 1:
            fail(f"{flag} must be >= 1, got {value}")
    if args.gpus > MAX_GPUS:  # the layouts are enumerated over the GPU count: 1e12 GPUs never ended
        fail(f"--gpus must be <= {MAX_GPUS:,}, got {args.gpus:,}")
    if args.layouts < 0:
        fail(f"--layouts must be >= 0, got {args.layouts}")
    sizes = {"--params": args.params, "--tokens": args.tokens, "--global-batch-tokens": args.global_batch_tokens}
    for flag, value in sizes.items():
        if value is not None and not 0 < value < math.inf:
            fail(f"{flag} must be finite and > 0, got {value}")
    if not 0 < args.mfu <= 1:
        fail(f"--mfu must be in (0, 1], got {args.mfu}")


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--params", type=real(1, MAX_PARAMS), help="parameter count N, e.g. 1e9 (default: the --model's)"
    )
    parser.add_argument("--tokens", type=real(1, 1e17), help="training tokens D (default: Chinchilla 20 N)")
    parser.add_argument("--gpus", type=integer(1, MAX_GPUS), required=True)
    parser.add_argument("--gpu", choices=sorted(PEAK_FLOPS), default="h100")
    parser.add_argument("--mfu", type=real(0, 1, open_low=True), default=0.4)
    parser.add_argument("--seq-len", type=integer(1, MAX_SEQ_LEN), default=2048)
    parser.add_argument("--micro-batch", type=integer(1, 1 << 20), default=1, help="sequences per GPU per micro-step")
    parser.add_argument("--model", choices=sorted(SHAPES), help="use this shape (else derived from --params)")
    parser.add_argument("--vocab", type=integer(1, 1 << 32), default=50304)
    parser.add_argument(
        "--moe-experts", type=integer(0, 1 << 16), default=0, help="make the --model shape a MoE of E experts"
    )
    parser.add_argument("--moe-top-k", type=integer(1, 1 << 16), default=2)
    parser.add_argument(
        "--ep", type=integer(1, MAX_GPUS), default=1, help="expert-parallel degree for the all-to-all term"
    )
    parser.add_argument("--gpus-per-node", type=integer(1, 1 << 10), default=8)
    parser.add_argument("--global-batch-tokens", type=real(1, 1 << 40), default=GLOBAL_BATCH_TOKENS)
    parser.add_argument("--layouts", type=integer(0, 1 << 20), default=10, help="how many layouts to list (0: none)")
    parser.add_argument("--explain", action="store_true", help="print the arithmetic of the recommended layout")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    args = parser.parse_args(argv)
    if args.params is None and args.model is None:
        parser.error("give --params or --model")
    check_plan_args(args)
    shape = SHAPES[args.model].with_vocab(args.vocab) if args.model else None
    if args.moe_experts:
        if shape is None:
            parser.error("--moe-experts needs --model")
        shape = replace(shape, moe_experts=args.moe_experts, moe_top_k=args.moe_top_k)
    params = args.params if args.params is not None else shape.num_params()  # type: ignore[union-attr]
    plan = make_plan(
        params,
        args.tokens,
        args.gpus,
        args.gpu,
        args.mfu,
        args.seq_len,
        args.micro_batch,
        shape,
        args.vocab,
        args.ep,
    )
    if args.json:
        print(json.dumps(asdict(plan), indent=1))
        return
    layouts = ""
    if args.layouts:
        cfg = shape or derive_shape(params, args.vocab)
        with errors_as_one_line(ValueError):  # a global batch of fewer sequences than GPUs: no layout, one line
            layouts = "\n" + render_layouts(cfg, args, plan.seq_len)
    print(render(plan) + ("\n" + layouts if layouts else ""))


def render_layouts(cfg: ModelConfig, args: argparse.Namespace, seq_len: int) -> str:
    """The ranked layouts, the recommendation and (with --explain) its arithmetic."""
    global_batch = 2 ** max(0, round(math.log2(args.global_batch_tokens / seq_len)))  # sequences, a power of 2
    ranked = rank_layouts(cfg, args.gpus, args.gpu, seq_len, global_batch, args.gpus_per_node, args.mfu)
    best = ranked[0]
    lines = [
        f"Layouts on {args.gpus} x {args.gpu.upper()} ({args.gpus_per_node} per node), global batch {global_batch} "
        f"sequences of {seq_len} tokens, kernels at MFU {args.mfu:.0%}",
        table(ranked, args.layouts),
        "",
        ("recommended: " if best.fits else "nothing fits; closest: ") + best.layout.flags,
    ]
    if args.explain:
        lines.append(explain(cfg, best, seq_len, args.gpu))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
