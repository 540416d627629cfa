"""Which layout to train with: every (dp_replicate, dp_shard, tp, pp, AC, micro-batch) the GPUs allow,
its memory per GPU, its communication per step and an MFU estimate; the best one that fits.

The arithmetic is the Ultra-Scale Playbook's (the seeds in ../shared/seeds/ summarise it):

- model states, mixed precision with fp32 master weights and Adam: 4 (fp32 weights) + 4 (fp32 grads)
  + 8 (Adam m, v) = 16 bytes per parameter (what this trainer keeps: FSDP2 holds fp32 shards and
  reduces in fp32), divided by tp x pp (the stage's slice of every matrix) and by dp_shard (ZeRO-3);
  replicas (dp_replicate) do not divide it. In flight, unsharded in bf16: the params of two blocks
  (current and prefetched) and the grads of one, and the root group's (embeddings and head: this
  trainer does not reshard the root after forward) params and grads.
- activations per layer (Korthikanti et al. 2022, bf16): s b h (34 + 5 a s / h) bytes; selective
  recomputation drops the 5 a s^2 b attention term (FlashAttention's SDPA never stores it either);
  full recomputation keeps each block's input (2 s b h) plus one block's working set; tensor +
  sequence parallel divides all of it by tp. Under 1F1B the first stage holds pp micro-batches in
  flight, so pp does not shrink it: L / pp layers x pp micro-batches.
- logits: fp32 and their gradient, 8 s b V bytes, vocab-split by tp (loss parallel); under PP they
  live on the last stage but are added to the first's (an upper bound on the busiest GPU).
- communication per GPU per step, ring collectives ((n - 1) / n of the message per GPU): FSDP
  all-gathers the bf16 params twice per micro-batch (forward and backward: blocks are resharded) and
  reduce-scatters fp32 grads once (accumulation syncs only the last micro-batch); HSDP all-reduces
  the sharded grads across replicas; TP + SP all-gathers / reduce-scatters the activations four
  times per layer and micro-batch (forward and backward: 8 s b h x 2 bytes); PP sends activations
  forward and their grads back at each stage boundary (2 x 2 s b h bytes per micro-batch).
- MFU estimate: the kernels' MFU (`mfu`) stretched by recomputation (full: one more forward, 8/6;
  selective: about 2.7 %, the Playbook's figure), the 1F1B bubble ((pp - 1) / micro-batches),
  TP's collectives (on the critical path) and whatever FSDP / HSDP / PP traffic compute cannot hide.
  Bandwidths: NVLink within a node, the NIC across nodes (datasheets, below).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config import ModelConfig
from trainer.metrics import PEAK_FLOPS, flops_per_token

GB = 1e9
# Per-GPU memory (datasheets; bytes), NVLink bandwidth per direction and the NIC per GPU across nodes.
GPU_MEMORY = {"h100": 80e9, "h200": 141e9, "a100": 80e9}
NVLINK_BPS = {"h100": 450e9, "h200": 450e9, "a100": 300e9}  # NVLink 4 900 GB/s, NVLink 3 600 GB/s, both ways
NIC_BPS = {"h100": 50e9, "h200": 50e9, "a100": 25e9}  # one 400 Gb/s NDR (200 Gb/s HDR on A100) per GPU
USABLE_MEMORY = 0.9  # the allocator's fragmentation, CUDA context and NCCL buffers take the rest
SELECTIVE_RECOMPUTE = 1.027  # Playbook: selective recomputation costs ~2.7 % compute
FULL_RECOMPUTE = 8 / 6  # one more forward (2 of the 6 FLOPs per param and token)
AC_MODES = ("none", "selective", "full")
MICRO_BATCHES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Layout:
    """One way to lay out the job (the trainer's flags) and how many micro-batches a step takes."""

    dp_replicate: int
    dp_shard: int
    tp: int
    pp: int
    ac: str
    micro_batch: int
    grad_accum: int

    @property
    def flags(self) -> str:
        return (
            f"--dp-replicate {self.dp_replicate} --dp-shard {self.dp_shard} --tp {self.tp} --pp {self.pp} "
            f"--ac {self.ac} --micro-batch {self.micro_batch} --grad-accum {self.grad_accum}"
        )


@dataclass
class LayoutEstimate:
    """Bytes per GPU (the busiest one: the first pipeline stage), traffic per GPU per step, MFU."""

    layout: Layout
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    in_flight_bytes: float
    activations_bytes: float
    logits_bytes: float
    comm_bytes: dict[str, float]
    step_seconds: float
    mfu: float
    fits: bool
    notes: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> float:
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.in_flight_bytes
            + self.activations_bytes
            + self.logits_bytes
        )


def _ring(n: int) -> float:
    """Share of a message each GPU sends in a ring all-gather / reduce-scatter over n ranks."""
    return (n - 1) / n


def _spans_nodes(inner: int, size: int, gpus_per_node: int) -> bool:
    """A mesh dim of `size` whose ranks are `inner` apart (the product of the dims inside it)."""
    return size > 1 and inner * size > gpus_per_node


def block_params(cfg: ModelConfig) -> int:
    """Parameters of one block: attention, SwiGLU, its norms (the model's count less embeddings, head, final norm)."""
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.dim
    return (cfg.num_params(include_embedding=False) - head - cfg.dim) // cfg.n_layers


def activation_bytes_per_layer(cfg: ModelConfig, seq_len: int, micro_batch: int, tp: int, ac: str) -> float:
    """Korthikanti et al.: s b h (34 + 5 a s / h) bytes, selective drops 5 a s / h, full keeps 2 s b h."""
    s, b, h, a = seq_len, micro_batch, cfg.dim, cfg.n_heads
    if ac == "none":
        return s * b * h * (34 + 5 * a * s / h) / tp
    if ac == "selective":
        return s * b * h * 34 / tp
    return 2 * s * b * h / tp  # full: only the block input is kept (plus one block, added once)


def estimate(
    cfg: ModelConfig,
    layout: Layout,
    seq_len: int,
    gpu: str,
    gpus_per_node: int = 8,
    mfu: float = 0.5,
    bf16: bool = True,
) -> LayoutEstimate:
    """The figures of one layout; see the module docstring for each formula.

    `bf16=False` (fp32 compute, as the CPU runs): in-flight params and activations take 4 bytes, not 2.
    """
    lt, n_layers = layout, cfg.n_layers
    block = block_params(cfg)
    emb = cfg.vocab_size * cfg.dim
    head = 0 if cfg.tie_embeddings else emb
    # The first stage: its share of the blocks plus the embedding (pp = 1: the whole model).
    stage_params = block * n_layers / lt.pp + emb + (head + cfg.dim if lt.pp == 1 else 0)
    shard = stage_params / (lt.tp * lt.dp_shard)
    params, grads, optim = 4 * shard, 4 * shard, 8 * shard
    width = 1 if bf16 else 2  # the formulas count 2-byte activations and in-flight params
    root = emb + (head if lt.pp == 1 else 0)  # the root FSDP group: gathered for the whole step
    in_flight = (3 * block + 2 * root) * 2 * width / lt.tp  # params of 2 blocks, grads of 1; the root's both
    per_layer = activation_bytes_per_layer(cfg, seq_len, lt.micro_batch, lt.tp, lt.ac) * width
    in_flight_micro = min(lt.pp, lt.grad_accum)  # 1F1B: stage 0 holds pp micro-batches
    activations = per_layer * (n_layers / lt.pp) * in_flight_micro
    if lt.ac == "full":
        activations += activation_bytes_per_layer(cfg, seq_len, lt.micro_batch, lt.tp, "selective") * width
    logits = 8 * seq_len * lt.micro_batch * cfg.vocab_size / lt.tp  # the last stage's; counted as if on stage 0

    # Traffic per GPU per step (bytes sent), and where it goes (mesh order pp, dp_replicate, dp_shard, tp).
    k, s, b, h = lt.grad_accum, seq_len, lt.micro_batch, cfg.dim
    stage_local = stage_params / lt.tp
    comm = {
        "fsdp": (2 * k * 2 * stage_local + 4 * stage_local) * _ring(lt.dp_shard),
        "hsdp": 2 * 4 * stage_local / lt.dp_shard * _ring(lt.dp_replicate),
        "tp": k * (n_layers / lt.pp) * 8 * s * b * h * 2 * _ring(lt.tp),
        "pp": k * 2 * 2 * s * b * h / lt.tp if lt.pp > 1 else 0.0,
    }
    tp_inner, shard_inner = 1, lt.tp
    replicate_inner, pp_inner = lt.tp * lt.dp_shard, lt.tp * lt.dp_shard * lt.dp_replicate
    bw = {
        "tp": NIC_BPS[gpu] if _spans_nodes(tp_inner, lt.tp, gpus_per_node) else NVLINK_BPS[gpu],
        "fsdp": NIC_BPS[gpu] if _spans_nodes(shard_inner, lt.dp_shard, gpus_per_node) else NVLINK_BPS[gpu],
        "hsdp": NIC_BPS[gpu] if _spans_nodes(replicate_inner, lt.dp_replicate, gpus_per_node) else NVLINK_BPS[gpu],
        "pp": NIC_BPS[gpu] if _spans_nodes(pp_inner, lt.pp, gpus_per_node) else NVLINK_BPS[gpu],
    }
    tokens_per_gpu = k * b * s / (lt.tp * lt.pp)  # each GPU does 1 / (tp pp) of its replica's work
    model_flops = tokens_per_gpu * flops_per_token(cfg, seq_len)
    recompute = {"none": 1.0, "selective": SELECTIVE_RECOMPUTE, "full": FULL_RECOMPUTE}[lt.ac]
    compute = model_flops * recompute / (PEAK_FLOPS[gpu] * mfu)
    bubble = (lt.pp - 1) / k if lt.pp > 1 else 0.0
    hidden = {name: comm[name] / bw[name] for name in ("fsdp", "hsdp", "pp")}
    exposed = max(0.0, sum(hidden.values()) - compute)  # overlapped with compute up to its length
    step = compute * (1 + bubble) + comm["tp"] / bw["tp"] + exposed
    est_mfu = model_flops / (step * PEAK_FLOPS[gpu])
    fits = params + grads + optim + in_flight + activations + logits <= USABLE_MEMORY * GPU_MEMORY[gpu]
    notes = [name for name, b_ in bw.items() if b_ == NIC_BPS[gpu] and comm[name] > 0]
    crossing = [f"{n} crosses nodes" for n in notes]
    return LayoutEstimate(lt, params, grads, optim, in_flight, activations, logits, comm, step, est_mfu, fits, crossing)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(cfg: ModelConfig, gpus: int, global_batch: int, gpus_per_node: int = 8) -> list[Layout]:
    """Every layout the trainer can run: degrees multiplying to `gpus`, TP within a node and dividing the
    heads, at least one block per stage, and a whole number of micro-batches (>= pp under PP) per step."""
    out = []
    for tp in _divisors(gpus):
        if tp > gpus_per_node or cfg.n_heads % tp or cfg.n_kv_heads % tp or cfg.ffn_dim % tp:
            continue
        for pp in _divisors(gpus // tp):
            if pp > cfg.n_layers or pp > 16:
                continue
            dp = gpus // (tp * pp)
            for replicate in _divisors(dp):
                shard = dp // replicate
                for b in MICRO_BATCHES:
                    if global_batch % (b * dp):
                        continue
                    accum = global_batch // (b * dp)
                    if accum < pp:
                        continue
                    out += [Layout(replicate, shard, tp, pp, ac, b, accum) for ac in AC_MODES]
    return out


def rank_layouts(
    cfg: ModelConfig,
    gpus: int,
    gpu: str,
    seq_len: int,
    global_batch: int,
    gpus_per_node: int = 8,
    mfu: float = 0.5,
) -> list[LayoutEstimate]:
    """All candidates, estimated; fitting ones first, best MFU first (ties: fewer parallel dims, less memory)."""
    if gpu not in GPU_MEMORY:
        raise KeyError(f"unknown GPU {gpu!r}; known: {sorted(GPU_MEMORY)}")
    layouts = candidate_layouts(cfg, gpus, global_batch, gpus_per_node)
    found = [estimate(cfg, lt, seq_len, gpu, gpus_per_node, mfu) for lt in layouts]
    if not found:
        raise ValueError(f"no layout of {gpus} GPUs fits a global batch of {global_batch} sequences")

    def key(e: LayoutEstimate) -> tuple:
        used = sum(d > 1 for d in (e.layout.dp_replicate, e.layout.tp, e.layout.pp))
        return (not e.fits, -round(e.mfu, 3), used, e.total_bytes)

    return sorted(found, key=key)


def explain(cfg: ModelConfig, e: LayoutEstimate, seq_len: int, gpu: str) -> str:
    """The arithmetic behind one estimate, term by term (GiB = 2^30 bytes)."""
    lt, g = e.layout, 2**30
    s, b, h, a, n_layers = seq_len, lt.micro_batch, cfg.dim, cfg.n_heads, cfg.n_layers
    lines = [
        f"layout {lt.flags}",
        f"  model states: 16 B/param x stage params / (tp {lt.tp} x dp_shard {lt.dp_shard}) = "
        f"{(e.params_bytes + e.grads_bytes + e.optimizer_bytes) / g:.2f} GiB "
        f"(weights {e.params_bytes / g:.2f}, grads {e.grads_bytes / g:.2f}, Adam {e.optimizer_bytes / g:.2f})",
        f"  in flight (bf16: 2 blocks' params, 1 block's grads, the root's both) / tp: {e.in_flight_bytes / g:.2f} GiB",
        f"  activations: {n_layers}/{lt.pp} layers x {min(lt.pp, lt.grad_accum)} micro-batch(es) in flight x "
        f"s {s} b {b} h {h} x "
        + {"none": f"(34 + 5 a {a} s / h)", "selective": "34", "full": "2 (+ one block at 34)"}[lt.ac]
        + f" / tp {lt.tp} = {e.activations_bytes / g:.2f} GiB",
        f"  logits (fp32 + grad) 8 s b V / tp: {e.logits_bytes / g:.2f} GiB",
        f"  total {e.total_bytes / g:.2f} GiB of {USABLE_MEMORY:.0%} x {GPU_MEMORY[gpu] / GB:.0f} GB: "
        + ("fits" if e.fits else "does NOT fit"),
        "  traffic per GPU per step: "
        + ", ".join(f"{k} {v / GB:.2f} GB" for k, v in e.comm_bytes.items() if v)
        + (f" ({'; '.join(e.notes)})" if e.notes else ""),
        f"  step {e.step_seconds * 1e3:.0f} ms, estimated MFU {e.mfu:.1%}",
    ]
    return "\n".join(lines)


def table(estimates: list[LayoutEstimate], limit: int = 12) -> str:
    names = ("dp_rep", "dp_shard", "tp", "pp", "ac", "mb", "accum", "GiB/GPU", "fits", "MFU")
    widths = (6, 8, 3, 3, 9, 3, 5, 8, 5, 6)
    rows = [" ".join(f"{n:>{w}}" for n, w in zip(names, widths, strict=True))]
    for e in estimates[:limit]:
        lt = e.layout
        rows.append(
            f"{lt.dp_replicate:>6} {lt.dp_shard:>8} {lt.tp:>3} {lt.pp:>3} {lt.ac:>9} {lt.micro_batch:>3} "
            f"{lt.grad_accum:>5} {e.total_bytes / 2**30:>8.1f} {'yes' if e.fits else 'no':>5} {e.mfu:>6.1%}"
        )
    return "\n".join(rows)
