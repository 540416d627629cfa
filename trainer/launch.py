"""torchrun, with its failure report cut to what the ranks said: `python -m trainer.launch` takes torchrun's flags.

    python -m trainer.launch --nproc_per_node=2 trainer/fsdp_train.py --shards ... --out ...

It is torchrun's own launcher (`torch.distributed.run`: the same elastic agent, rendezvous and
flags); only the end differs. When a rank fails, stock torchrun raises ChildFailedError out of its
main, so a one-line configuration error arrives wrapped in a ~40-line traceback and failure table;
here the launcher exits with the root-cause rank's exit code and adds one line only when that rank
did not say why itself (a crash or a signal, exit code other than 2). `OMP_NUM_THREADS` defaults to
1 as torchrun's does, without torchrun's banner about it.
"""

from __future__ import annotations

import logging
import os
import sys

from common.cli import USAGE_ERROR
from common.lifetime import LAUNCHER_PID


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    os.environ[LAUNCHER_PID] = str(os.getpid())  # the ranks check that this process is their parent
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # its "failed (exitcode: N) local_rank: ..." log line: the exit below says the same in one line
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    if args.nproc_per_node != "1" and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"  # torchrun's default, set here so it prints no banner
    try:
        run(args)
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        if failure.exitcode != USAGE_ERROR:
            print(f"error: {err.name} failed on rank {rank} (exit code {failure.exitcode})", file=sys.stderr)
        return failure.exitcode if failure.exitcode > 0 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
