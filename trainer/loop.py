"""The training loop: prepare the data, build the engine, resume, step through the epoch, save, export.

Each concern lives in its own module (`prepare`, `engine`, `checkpoint`, `metrics`, `export_hf`);
this one only orders them, so the whole run reads top to bottom in `_run`; `stability`, `profiling` and
`init_from` are the long-run operations it calls (spike guard and rollback, traces, a phase from trained weights).
"""

from __future__ import annotations

import json
import logging
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from common.lock import FolderUnavailable
from evals.tasks import Task, load_tasks
from trainer.checkpoint import TRAINER_STATE, Checkpointer
from trainer.distributed import DistInfo, init_distributed, rank0_verdict, shutdown
from trainer.engine import TrainEngine
from trainer.eval_tasks import TaskEvaluator, eval_record
from trainer.export_hf import export_live
from trainer.init_from import init_from, mixture_record
from trainer.mesh import ParallelDims
from trainer.metric_sinks import open_sinks, parse_sinks
from trainer.metrics import DataIndexWriter, MetricsLogger, Throughput
from trainer.model_spec import model_label
from trainer.moe_export import moe_format
from trainer.output_lock import lock_output, lock_shards
from trainer.pipeline_parallel import export_from_checkpoint
from trainer.preemption import stop_requested
from trainer.prepare import PreparedData, prepare_data
from trainer.profiling import StepProfiler, oom_snapshot
from trainer.qk_clip import check_qk_clip
from trainer.rerun import OutputInUse, check_output, clear_outputs
from trainer.stability import SpikeConfig, SpikeGuard, injected_loss_scales
from trainer.store import StoreRun, staged
from trainer.train_config import TrainConfig, flat_record

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What a finished (or stopped) run reports back to its caller."""

    steps_done: int
    epoch_steps: int
    losses: list[tuple[int, float]]
    val_losses: list[tuple[int, float]]
    checkpoint: Path | None
    hf_dir: Path | None


def train(cfg: TrainConfig) -> TrainResult:
    """Run (or resume) the epoch; collective over the current torchrun job, or one rank in-process."""
    info = init_distributed(cfg.device, ParallelDims.of(cfg))
    try:
        with staged(cfg, info) as (local_cfg, store):  # URL inputs/outputs: local copies (trainer/store.py)
            return _train(local_cfg, info, store)
    finally:
        shutdown(info)


def _setup_logging(info: DistInfo) -> None:
    logging.basicConfig(
        level=logging.INFO if info.is_main else logging.WARNING,
        format=f"[rank{info.rank}] %(asctime)s %(name)s: %(message)s",
        stream=sys.stdout,
        force=True,
    )


def schedule_steps(cfg: TrainConfig, epoch_steps: int) -> int:
    """Steps the LR schedule spans: the epoch, or `--max-steps` with `--schedule-span max_steps`."""
    if cfg.schedule_span == "epoch":
        return epoch_steps
    if cfg.max_steps is None:
        raise ValueError("--schedule-span max_steps needs --max-steps")
    return min(cfg.max_steps, epoch_steps)


def _build_engine(cfg: TrainConfig, info: DistInfo, data: PreparedData) -> TrainEngine:
    total = schedule_steps(cfg, data.plan.steps)
    eot = data.eos_id if cfg.document_masking else None
    engine = TrainEngine(
        data.model_cfg,
        info,
        cfg.optim,
        total,
        seed=cfg.seed,
        bf16=cfg.bf16,
        ac=cfg.ac,
        compile=cfg.compile,
        pp_schedule=cfg.pp_schedule,
        document_eot=eot,
    )
    log.info(
        "model %s: %.2fM params, training windows of %d tokens (positions up to max_seq_len), %s",
        model_label(cfg),
        data.model_cfg.num_params() / 1e6,
        data.plan.seq_len,
        data.model_cfg,
    )
    return engine


def _run_meta(cfg: TrainConfig, data: PreparedData) -> dict[str, Any]:
    """What a checkpoint needs to be exported on its own (written next to every checkpoint)."""
    return {
        "model_config": data.model_cfg.to_dict(),
        "tokenizer": {
            "path": str(data.tokenizer_file.resolve()),
            "sha256": data.tokenizer_sha256,
            "eos_id": data.eos_id,
            "bos_id": data.bos_id,
        },
        "train_config": flat_record(cfg),
        "mixture": mixture_record(Path(cfg.shards)),
    }


def _spike_guard(cfg: TrainConfig) -> SpikeGuard | None:
    if not cfg.spike_guard:
        return None
    return SpikeGuard(SpikeConfig(True, cfg.spike_window, cfg.spike_sigma, cfg.spike_rollback_after))


def _task_evaluator(
    cfg: TrainConfig, info: DistInfo, data: PreparedData, tasks: dict[str, Task]
) -> TaskEvaluator | None:
    """The --eval-task tasks (loaded before any work: a bad file is a one-line error) with the run's encoder."""
    if not tasks:
        return None
    ids = (data.bos_id, data.eos_id)
    limit, batch = cfg.eval_limit, cfg.eval_batch_size
    return TaskEvaluator.build(tasks, info, data.tokenizer_file, ids, data.model_cfg.max_seq_len, limit, batch)


def _saved_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / TRAINER_STATE).read_text())


def _train(cfg: TrainConfig, info: DistInfo, store: StoreRun | None) -> TrainResult:
    _setup_logging(info)
    with oom_snapshot(cfg.oom_snapshot, Path(cfg.out), info.rank, info.device), ExitStack() as held:
        return _run(cfg, info, held, store)


def _run(cfg: TrainConfig, info: DistInfo, held: ExitStack, store: StoreRun | None) -> TrainResult:
    """The run; `held` releases what it takes (the `--out` lock) when the run ends, even in-process. With
    `store`, `cfg.out` is its local staging: checkpoints, records and the export are copied to the store."""
    if cfg.init_optimizer and cfg.init_from is None:
        raise ValueError("--init-optimizer needs --init-from")
    cfg.check()
    tasks = load_tasks(cfg.eval_task, "--eval-task")  # before anything is written to `out`
    parse_sinks(cfg.log_to)
    out = Path(cfg.out)
    # a rerun erases nothing; a live run there is named (FolderLocked) before what it wrote
    rank0_verdict(lambda: check_output(out, cfg.resume, cfg.overwrite), (OutputInUse, FolderUnavailable))
    profiler = StepProfiler(cfg.profile_steps, out, info.rank, info.device)
    for shards in (cfg.shards, cfg.val_shards):  # no `mixtures.build --overwrite` of them while this run reads
        reading = lock_shards(str(shards), info) if shards is not None else None
        if reading is not None:
            held.callback(reading.release)
    data = prepare_data(cfg, info)
    held.callback(data.loader.index.reader.close)  # a store's reader: its fetch ahead over before the scratch goes
    if cfg.export_hf and data.model_cfg.moe_experts:
        moe_format(data.model_cfg)  # a MoE no transformers format routes like: refused before step 1
    if cfg.optim.muon_qk_clip:
        check_qk_clip(cfg.optim.optimizer, data.model_cfg, info.dims.cp)  # before `out` is locked or written
    lock = lock_output(out, info)  # one run writes `out` (checkpoints, metrics) until this one ends
    if lock is not None:
        held.callback(lock.release)
    if cfg.overwrite:  # under the lock: no other run writes `out` while its previous outputs go
        removed = rank0_verdict(lambda: clear_outputs(out), OSError)
        if removed:
            log.info("--overwrite: removed the previous run's %s from %s", ", ".join(removed), out)
    plan, loader = data.plan, data.loader
    engine = _build_engine(cfg, info, data)
    keep, bg = cfg.keep_checkpoints, cfg.async_checkpoint  # bg: saves written in the background
    ckpt = Checkpointer(out / "checkpoints", keep, bg) if store is None else store.checkpointer(keep, bg)
    meta = _run_meta(cfg, data) if store is None else store.name_origins(_run_meta(cfg, data))
    guard = _spike_guard(cfg)
    loss_scales = injected_loss_scales()
    evaluator = _task_evaluator(cfg, info, data, tasks)

    def save(step: int) -> None:
        saved = {**meta, "spike_guard": guard.state_dict()} if guard is not None else meta
        ckpt.save(step, engine.model, engine.optimizer, engine.scheduler, loader.state_dict(), saved)
        # with a store --out, the records up to `step` go with the checkpoint, before its commit (trainer/store.py)

    def load(path: Path) -> dict[str, Any]:
        state = ckpt.load(path, engine.model, engine.optimizer, engine.scheduler, loader.state_dict())
        guard_state = _saved_state(path).get("spike_guard")
        if guard is not None and guard_state is not None:
            guard.load_state_dict(guard_state)
        return state

    latest = ckpt.latest() if cfg.resume else None
    if latest is not None:
        loader.load_state_dict(load(latest))
        log.info("resumed from %s at step %d", latest, loader.step)
        if "init_from" in _saved_state(latest):
            meta["init_from"] = _saved_state(latest)["init_from"]
    elif cfg.init_from is not None:
        optimizer = engine.optimizer if cfg.init_optimizer else None
        meta["init_from"] = init_from(Path(cfg.init_from), engine.model, data.model_cfg, optimizer)
        log.info("phase starts from %s", meta["init_from"])
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "run_config.json").write_text(json.dumps(meta, indent=1, default=str))

    sinks = open_sinks(cfg.log_to, out, info.is_main, loader.step)
    metrics = MetricsLogger(out / "metrics.jsonl", info.is_main, start_step=loader.step, sinks=sinks)
    indices = DataIndexWriter(out / "data_indices", info.rank) if cfg.save_data_indices else None
    throughput = Throughput(data.model_cfg, plan, cfg.gpu, info, loader.step)
    losses: list[tuple[int, float]] = []
    val_losses: list[tuple[int, float]] = []
    evaluated: list[int] = []
    evaluates = bool(data.val) or evaluator is not None

    def evaluate(step: int) -> None:
        record: dict[str, Any] = {"step": step}
        if data.val:
            val_losses.append((step, engine.evaluate(data.val)))
            record["val_loss"] = val_losses[-1][1]
        if evaluator is not None:
            record.update(eval_record(evaluator.run(engine.model, data.model_cfg.vocab_size)))
        metrics.log(record)
        evaluated.append(step)

    last_saved = loader.step if latest is not None else -1
    stop = cfg.max_steps if cfg.max_steps is not None else plan.steps
    loader.last_step = stop
    # rank 0 only; tqdm turns itself off when stderr is not a terminal (logs, CI)
    bar = tqdm(total=stop, initial=loader.step, desc="training", unit="step", disable=None if info.is_main else True)

    def roll_back(step: int) -> None:
        """Reload the last checkpoint's weights, optimizer and schedule; keep the data position."""
        assert guard is not None
        ckpt.finish()  # a save in flight is the latest checkpoint once committed
        target = ckpt.latest()
        if target is None:
            raise RuntimeError(
                f"{guard.in_a_row} steps in a row were skipped as spikes (to step {step}) and there is no "
                "checkpoint to roll back to; set --checkpoint-every or raise --spike-rollback-after"
            )
        saved = load(target)
        guard.in_a_row = 0
        first = int(saved["consumed_samples"])
        back = first // plan.global_batch
        for _ in range(step - back):  # the schedule is a function of the step: bring it back to this one
            engine.scheduler.step()
        skipped = [first, loader.consumed]
        log.warning("rolled back to %s (step %d); permutation slots %s..%s are skipped", target, back, *skipped)
        metrics.log({"step": step, "rollback": str(target), "rollback_to_step": back, "skipped_windows": skipped})

    stopped = False
    for micro in loader:
        step = loader.step  # steps completed once this batch is applied (1-based)
        profiler.before_step(step)
        result = engine.train_step([tokens for _, tokens in micro], guard, loss_scales.get(step, 1.0))
        profiler.after_step(step)
        bar.update(1)
        if indices is not None:
            indices.write(step, [ids for ids, _ in micro])
        if result.spike is not None:
            log.warning("step %d skipped: %s", step, result.spike)
            metrics.log(result.spike.record(step))
            if guard is not None and guard.should_roll_back:
                roll_back(step)
        elif step % cfg.log_every == 0 or step in (1, plan.steps, stop):
            losses.append((step, float(result.loss)))
            record = {"step": step, "loss": losses[-1][1], "grad_norm": float(result.grad_norm), "lr": result.lr}
            moe = result.moe.record() if result.moe is not None else {}
            qk = result.qk.record() if result.qk is not None else {}
            metrics.log({**record, **throughput.measure(step), **moe, **qk})
        if evaluates and cfg.eval_every and step % cfg.eval_every == 0:
            with throughput.excluded():  # not charged to the next step's tokens/s and MFU
                evaluate(step)
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            with throughput.excluded():
                save(step)
            last_saved = step
        if cfg.stop_file is not None and step < stop and stop_requested(Path(cfg.stop_file), info.device):
            log.warning("step %d: %s appeared: checkpoint, then stop (the job resumes from it)", step, cfg.stop_file)
            stopped = True
            break
        if step >= stop:
            break
    bar.close()

    step = loader.step
    profiler.close(step)
    if evaluates and not stopped and (not evaluated or evaluated[-1] != step):
        evaluate(step)
    if last_saved != step:
        save(step)
    ckpt.finish()  # --async-checkpoint: the last save committed before the export and the result
    hf_dir = None
    if cfg.export_hf and step == plan.steps:
        tokenizer = {"tokenizer": data.tokenizer_file, "eos_id": data.eos_id, "bos_id": data.bos_id}
        if info.dims.pp > 1:  # each rank holds only its stages: export the checkpoint just saved
            hf_dir = export_from_checkpoint(ckpt.latest(), out / "hf")  # type: ignore[arg-type]
        else:
            hf_dir = export_live(engine.model, data.model_cfg, out / "hf", **tokenizer)
    metrics.close()
    fetched = data.loader.index.reader.fetch_summary()  # a store's --shards: bytes and requests, this rank's
    if fetched is not None:
        log.info(fetched)
    if indices is not None:
        indices.close()
    if store is not None:
        store.publish_records()
        store.publish_export(hf_dir)
    return TrainResult(step, plan.steps, losses, val_losses, ckpt.latest(), hf_dir)
