"""``python -m trainer.slurm [Slurm flags] -- [trainer flags]``: write and submit an ``sbatch`` script that
runs ``trainer/fsdp_train.py`` on ``--nodes`` nodes: ``srun`` starts one ``torchrun`` agent per node
(``trainer.launch``), the agents meet by c10d rendezvous on the first node of the allocation, and the
layout is the trainer's own flags (``--dp-replicate``, ``--dp-shard``, ``--tp``, ``--pp``; see
``python -m trainer.plan`` for a recommendation).

Preemption and time limits: the job is ``--requeue``-able and asks Slurm for ``USR1`` 120 s before its
end (``--signal=B:USR1@120``). The script's trap touches ``OUT/slurm/stop-requested`` (the trainer's
``--stop-file``): the ranks agree, save a checkpoint of the step they are at and stop; the script then
requeues the job. Every start passes ``--resume``, so the requeued (or resubmitted) job continues from
that checkpoint with the losses of an uninterrupted run; a first start finds no checkpoint and begins at
step 1. A job killed without the signal resumes from the last periodic checkpoint (``--checkpoint-every``).

The script goes to ``OUT/slurm/train.sbatch`` and its log to ``OUT/slurm/train-<JOB>.out`` (``--out`` of the
trainer flags). Everything is checked before the script is written: Slurm present, the partition, the time
limit, the trainer flags (one line, exit 2).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from common.cli import NODE_CPUS, USAGE_ERROR, ArgumentParser, integer, one_line
from common.config import ConfigError
from common.slurm import (
    REPO,
    SubmissionDeclined,
    check_time_limit,
    choose_partition,
    confirm_submission,
    format_time,
    job_environment,
    parse_time,
    sbatch_directives,
    submit_script,
    wait_for_job,
)

SIGNAL_BEFORE_END_S = 120
STOP_FILE = "stop-requested"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m trainer.slurm",
        description="Train on a Slurm cluster: python -m trainer.slurm [flags] -- [trainer/fsdp_train.py flags]",
    )
    parser.add_argument("--nodes", type=integer(1, 1 << 16), default=1, help="Slurm nodes (default: 1)")
    parser.add_argument(
        "--nproc-per-node", type=integer(1, 1 << 10), default=1, help="ranks per torchrun agent (GPUs per node)"
    )
    parser.add_argument(
        "--gpus-per-node", type=integer(0, 1 << 10), default=0, help="GPUs to request per node (default: none)"
    )
    parser.add_argument(
        "--agents-per-node",
        type=integer(1, 1 << 10),
        default=1,
        help="torchrun agents (srun tasks) per node: 1; more only to rehearse a multi-node rendezvous on one node",
    )
    parser.add_argument("--cpus-per-task", type=NODE_CPUS, default=None, help="CPUs per agent (default: Slurm's)")
    parser.add_argument("--partition", default=None, help="partition (default: the cluster's default)")
    parser.add_argument("--time", default="24:00:00", help="time limit of one start of the job (default: 24:00:00)")
    parser.add_argument("--sbatch-arg", action="append", default=[], metavar="KEY[=VALUE]",
                        help="extra #SBATCH option, e.g. account=abc, qos=high, exclusive (repeatable)")  # fmt: skip
    parser.add_argument(
        "--rdzv-port", type=integer(1, 65535), default=29500, help="c10d rendezvous port on the first node"
    )
    parser.add_argument("--dry-run", action="store_true", help="write and print the script, do not submit it")
    parser.add_argument(
        "--yes", action="store_true", help="submit without asking after the cost line (asked only at a terminal)"
    )
    parser.add_argument("--wait", action="store_true", help="wait for the job to end (through its requeues)")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then the flags of trainer/fsdp_train.py")
    return parser


def trainer_flags(args: argparse.Namespace) -> list[str]:
    """The trainer's flags after ``--``, checked as the trainer would check them (without writing)."""
    from trainer.fsdp_train import CONFIG_ERRORS
    from trainer.train_config import parse_args

    flags = args.train_args[1:] if args.train_args[:1] == ["--"] else list(args.train_args)
    if "--out" not in flags:
        raise ConfigError("give the trainer flags after --, with --out (on storage every node mounts)")
    try:
        cfg = parse_args(flags)
    except SystemExit:
        raise ConfigError(f"the trainer flags after -- are not valid: {shlex.join(flags)}") from None
    try:
        cfg.check()
    except CONFIG_ERRORS as err:
        raise ConfigError(one_line(err)) from None
    for name in ("nodes", "nproc_per_node", "agents_per_node"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("gpus_per_node", "cpus_per_task"):  # 0 / unset: not requested; a negative count is a typo
        if (getattr(args, name) or 0) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if not 1 <= args.rdzv_port <= 65535:
        raise ConfigError(f"--rdzv-port must be a TCP port (1 .. 65535), got {args.rdzv_port}")
    out = Path(flags[flags.index("--out") + 1])
    added = [] if "--resume" in flags else ["--resume"]
    if "--stop-file" not in flags:
        added += ["--stop-file", str(out / "slurm" / STOP_FILE)]
    return [*flags, *added]


def write_script(args: argparse.Namespace, flags: list[str], out: Path) -> Path:
    """``OUT/slurm/train.sbatch``: directives, environment, rendezvous, requeue trap, ``srun`` torchrun."""
    logs = out / "slurm"
    directives = {
        "job-name": "cc2model-train",
        "nodes": str(args.nodes),
        "ntasks-per-node": str(args.agents_per_node),
        "time": args.time,
        "output": f"{logs}/train-%j.out",
        "open-mode": "append",  # a requeued start appends to the same log
        "requeue": "",
        "signal": f"B:USR1@{SIGNAL_BEFORE_END_S}",
    }
    if args.partition:
        directives["partition"] = args.partition
    if args.cpus_per_task:
        directives["cpus-per-task"] = str(args.cpus_per_task)
    if args.gpus_per_node:
        directives["gpus-per-node"] = str(args.gpus_per_node)
    directives.update(sbatch_directives(args.sbatch_arg))
    lines = ["#!/bin/bash", *(f"#SBATCH --{k}={v}" if v else f"#SBATCH --{k}" for k, v in directives.items())]
    stop = shlex.quote(str(out / "slurm" / STOP_FILE))
    launch = [
        "srun", "--kill-on-bad-exit=1", "python", "-m", "trainer.launch", "--nnodes=$SLURM_NTASKS",
        f"--nproc_per_node={args.nproc_per_node}", "--rdzv_backend=c10d", f'--rdzv_endpoint="$head:{args.rdzv_port}"',
        '--rdzv_id="$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}"', "trainer/fsdp_train.py", *map(shlex.quote, flags),
    ]  # fmt: skip
    lines += [
        "# written by python -m trainer.slurm; `sbatch` it again to continue the run from its last checkpoint",
        job_environment(),
        'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"',
        f"cd {shlex.quote(str(REPO))}",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'echo "[slurm] job $SLURM_JOB_ID start ${SLURM_RESTART_COUNT:-0}: $SLURM_NTASKS agents, rendezvous at $head"',
        f"rm -f {stop}",
        "checkpoint_and_stop() {",
        '  echo "[slurm] job $SLURM_JOB_ID: time limit or preemption signal: the ranks checkpoint and stop"',
        f"  touch {stop}",
        "}",
        "trap checkpoint_and_stop USR1",
        " ".join(launch) + " &",
        "pid=$!",
        "wait $pid; status=$?",
        'while kill -0 "$pid" 2>/dev/null; do wait "$pid"; status=$?; done  # a trap ends `wait` early',
        f"if [ -e {stop} ]; then",
        f"  rm -f {stop}",
        '  echo "[slurm] job $SLURM_JOB_ID: requeued (exit $status); the next start resumes from the checkpoint"',
        '  scontrol requeue "$SLURM_JOB_ID"',
        "fi",
        'exit "$status"',
    ]
    logs.mkdir(parents=True, exist_ok=True)
    script = logs / "train.sbatch"
    script.write_text("\n".join(lines) + "\n")
    return script


def cost_line(args: argparse.Namespace, limit_s: int) -> str:
    """Nodes x the time limit: what one start of the job may hold at most (a requeue may hold as much again)."""
    node_hours = args.nodes * limit_s / 3600
    cpus = f", {node_hours * args.agents_per_node * args.cpus_per_task:,.3g} CPU-hours" if args.cpus_per_task else ""
    gpus = f", {node_hours * args.gpus_per_node:,.3g} GPU-hours" if args.gpus_per_node else ""
    return (
        f"[slurm] cost: {args.nodes} node(s) x --time {format_time(limit_s)} = at most {node_hours:,.3g} "
        f"node-hours{cpus}{gpus} per start of the job (each requeue may hold as much again)"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        flags = trainer_flags(args)
        out = Path(flags[flags.index("--out") + 1])
        if args.dry_run:
            limit = parse_time(args.time, "--time")
        else:
            limit = check_time_limit(args.time, choose_partition(args.partition, "--partition"), "--time")
        script = write_script(args, flags, out)
    except ConfigError as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return USAGE_ERROR
    if args.dry_run:
        print(script.read_text(), end="")
        print(cost_line(args, limit))
        print(f"written: {script} (not submitted)")
        return 0
    try:
        confirm_submission(cost_line(args, limit), args.yes)
    except SubmissionDeclined as err:
        print(one_line(err), file=sys.stderr)
        return 1
    try:
        job = submit_script("", [str(script)])
    except ConfigError as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return USAGE_ERROR
    print(f"submitted job {job}: {script}")
    print(f"log: {out}/slurm/train-{job}.out   (queue: squeue -j {job}; requeue by hand: scontrol requeue {job})")
    if not args.wait:
        return 0
    state = wait_for_job(job)
    print(f"job {job}: {state}")
    return 0 if state == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
