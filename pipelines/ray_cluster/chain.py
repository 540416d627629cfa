"""The chain's tokenizer and mixture steps as Ray work (``--executor ray --train``): a thin layer, no new logic.

- **Tokenizer training is one process by nature** (HF tokenizers' BPE trainer counts and merges in one
  process, on all its cores): it runs as *one* Ray task that reserves the largest node's CPUs, so it
  runs on the cluster, next to the data, instead of on the driver's machine.
- **Mixture building** is ``mixtures.build.build_mixture`` itself, with its tokenization and
  shard-writing tasks handed to Ray through ``mixtures.pool.task_runner``; the planning between them
  (copies, shuffle, manifest) stays on the driver, which has every task's result. The one-epoch target
  needs no counting pass of its own: the tokenization tasks return each part's token count.

Why plain Ray tasks and not datatrove's executor: see ``pipelines/ray_cluster/tasks.py``. The same functions run
as locally, in the same order, so the tokenizer, the shards and the manifest are identical to a local run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.ray_cluster.tasks import RayTaskRunner, connect, node_resources, run_one, task_resources

if TYPE_CHECKING:
    from mixtures.manifest import Manifest


@dataclass(frozen=True)
class RayOptions:
    """The cluster and what a task reserves: ``--ray-address``, ``--ray-cpus-per-task``, ``--ray-memory-per-task``."""

    address: str | None = None
    cpus_per_task: int = 1
    mem_per_task_gb: float | None = None


class RayChain:
    """Connects once; each method is the local step's function run as Ray work."""

    def __init__(self, options: RayOptions):
        self.options = options
        connect(options.address)
        self.tasks = task_resources(options.cpus_per_task, options.mem_per_task_gb)
        self.node = node_resources(options.mem_per_task_gb)

    def train_tokenizer(self, inputs: Sequence[str], out_dir: Path, **kwargs: Any) -> Any:
        from tokenizer.train import train_tokenizer

        return run_one(
            train_tokenizer, list(inputs), out_dir, progress=False, stage="tokenizer", resources=self.node, **kwargs
        )

    def build_mixture(self, spec: dict[str, Any], out_dir: Path) -> Manifest:
        from mixtures.build import build_mixture
        from mixtures.pool import task_runner

        with task_runner(RayTaskRunner(self.tasks)):
            return build_mixture(spec, out_dir, overwrite=True, progress=False)
