"""A recipe's measured costs per page (``recipes/costs.json``) and the arithmetic that scales them to a dump.

The unit is the WARC *response record* (a captured page; Common Crawl publishes its crawls' page counts in
them): every figure is measured per response by ``bench.curate_profile`` (a real ``pipelines.run`` on real
pages, its CPU seconds from the kernel) or taken from a finished run's own stats (``from_run``). The CPU
model is ``run_fixed + task_fixed x tasks + per_response x responses``: a run pays its interpreter and
imports once, each curate task its models and block lists (datatrove deep-copies the pipeline per task),
each page its share of every stage. A recipe that dedups with BFF adds its one decision task
(``dedup_bff``): a fixed part and a cost per n-gram of the run's own estimate (curated text bytes / 4, the
figure that also sizes its filter); that task reads every document in input order, so its CPU is its wall time.
"""

from __future__ import annotations

import json
import math
import resource
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from common.bounded_input import loads_json, read_bounded
from common.config import ConfigError

if TYPE_CHECKING:
    from dedup.config import DedupConfig

COSTS_TABLE = Path(__file__).parent / "recipes" / "costs.json"
STORAGE_FOLDERS = ("curated", "removed", "minhash", "deduped")
CPU_FILE = "cpu.json"  # in a run directory: CPU seconds of its stages and of its whole processes (local executor)
READ_BLOCK_BYTES = 32 * 2**20  # one ranged GET per block of a WARC read from a store
PART_BYTES = 64 * 2**20  # one PUT per part of an object written to a store


def process_cpu_seconds() -> float:
    """User + system CPU of this process and of its children that ended (pool workers, extraction sandboxes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuLedger:
    """``root/cpu.json``: CPU seconds per key (a stage, the whole process); a resumed run adds what each
    invocation spent to what the earlier ones recorded (a killed one's work is lost with it, so the figure is
    what the finished work cost at least). ``--calibrate`` reads it.

    The file is read once, when the first figure is added, and kept here: the run lock makes this process
    its only writer, so a later stage writes the sums without reading them back (on a store a GET saved per
    stage, one round trip the run waited for). One ledger per invocation: a new run reads the file again.
    On a store the reads and writes go on in one background thread, in order, while the run lists its next
    stage's completions (one round trip a stage fewer to wait for); ``written`` waits for them."""

    def __init__(self, root: Path) -> None:
        self.path = root / CPU_FILE
        self._spent: dict[str, float] | None = None
        self._writer: ThreadPoolExecutor | None = None  # on a store: the one thread that reads and writes the file
        self._pending: list[Future] = []

    def add(self, key: str, seconds: float) -> None:
        from common.storage import is_remote

        if not is_remote(self.path):
            self._add(key, seconds)
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="cpu-ledger")
        self._pending.append(self._writer.submit(self._add, key, seconds))

    def written(self, quiet: bool = False) -> None:
        """Wait until the figures added so far are in the file; a failed write raises (not with ``quiet``: the
        run failed already). The run calls it before it forks task processes (none with a request on its way)."""
        pending, self._pending = self._pending, []
        for future in pending:
            if quiet:
                wait([future])
            else:
                future.result()

    def _add(self, key: str, seconds: float) -> None:
        from common.atomic import atomic_write_text
        from common.storage import read_or_none

        if self._spent is None:
            recorded = read_or_none(self.path)
            self._spent = json.loads(recorded) if recorded is not None else {}
        self._spent[key] = round(self._spent.get(key, 0.0) + seconds, 3)
        atomic_write_text(self.path, json.dumps(self._spent, indent=2))


@dataclass(frozen=True)
class RecipeCosts:
    """Per-response figures of one recipe, and where they were measured."""

    recipe: str
    run_fixed_cpu_s: float  # interpreter, imports, the dedup stages' fixed work: once per run
    task_fixed_cpu_s: float  # models, block lists: once per curate task
    cpu_s_per_response: dict[str, float]  # per stage group: curate, dedup
    kept_per_response: float  # documents left after the recipe's last stage
    curated_per_response: float  # documents left by the curate stage (into dedup)
    tokens_per_kept_doc: float  # whitespace-separated words, the run report's convention
    bytes_per_response: dict[str, float]  # per run folder (STORAGE_FOLDERS)
    warc_bytes_per_response: float  # compressed WARC bytes read
    objects_per_task: float  # files a curate task and its share of the dedup stages write
    pairs_per_curated_doc: float  # MinHash duplicate pairs (sizes the cluster stage)
    peak_rss_mb: float  # largest resident set of a task
    measured: dict = field(default_factory=dict)  # how: command, responses, WARC files, date
    # BFF (dedup.method bff; 0 for the others): its one decision task, out of run_fixed and cpu_s_per_response
    bff_fixed_cpu_s: float = 0.0  # the dedup_bff stage on one page: its task's start, its summary
    bff_cpu_s_per_ngram: float = 0.0  # per n-gram of the run's estimate (dedup.bff_stage.estimate_ngrams)
    bff_ngrams_per_curated_doc: float = 0.0  # that estimate per curated document: the filter's size follows

    def __post_init__(self) -> None:
        """A hand-edited table's figures are finite numbers >= 0: a NaN, a string or a list was a traceback deep
        in the arithmetic, a negative CPU or memory a plan printed with exit 0."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("recipe", "measured"):
                if not isinstance(value, str if f.name == "recipe" else dict):
                    raise ConfigError(f"{f.name} is a {type(value).__name__}")
            elif str(f.type).startswith("dict"):
                if not isinstance(value, dict):
                    raise ConfigError(f"{f.name} must be an object of figures, got a {type(value).__name__}")
                for key, figure in value.items():
                    _check_figure(f"{f.name}.{key}", figure)
            else:
                _check_figure(f.name, value)

    def cpu_per_response(self) -> float:
        return sum(self.cpu_s_per_response.values())


def _check_figure(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ConfigError(f"{name} must be a number >= 0, got {value!r}")


def load_costs(recipe: str, table: Path = COSTS_TABLE) -> RecipeCosts:
    """The table's entry for ``recipe``; a recipe nobody measured is a ConfigError naming the command."""
    try:
        entries = loads_json(read_bounded(table), table)  # a FIFO or a 3 GiB file as --costs: refused, not read
    except FileNotFoundError:
        raise ConfigError(f"cost table not found: {table}") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"cost table {table} unreadable: {err}") from None
    if not isinstance(entries, dict):
        raise ConfigError(f"cost table {table} unreadable: expected a JSON object of recipes")
    if recipe not in entries:
        known = ", ".join(sorted(entries)) or "none"
        raise ConfigError(
            f"recipe {recipe!r} has no measured costs in {table} (measured: {known}); "
            f"measure it: python -m bench.curate_profile --recipe RECIPE.yaml --write"
        )
    try:
        return RecipeCosts(**entries[recipe])
    except (TypeError, ValueError) as err:  # a hand-edited entry: a missing or unknown field, a bad figure
        raise ConfigError(f"cost table {table}, recipe {recipe!r}: {err}") from None


def write_costs(costs: RecipeCosts, table: Path = COSTS_TABLE) -> None:
    """Add or replace one recipe's entry (the other recipes' stay as measured)."""
    from common.atomic import atomic_write_text

    entries = json.loads(table.read_text()) if table.exists() else {}
    entries[costs.recipe] = asdict(costs)
    atomic_write_text(table, json.dumps(dict(sorted(entries.items())), indent=2) + "\n")


@dataclass(frozen=True)
class Workload:
    """What is to be curated: WARC files and their response records (counted, or a crawl's published figure)."""

    name: str
    warcs: int
    responses: float
    how: str


@dataclass(frozen=True)
class Cluster:
    """CPUs to rent, memory per CPU, price per CPU-hour; ``node_cpus`` bounds the memory one task may take."""

    cpus: int
    mem_per_cpu_gb: float
    price_per_cpu_hour: float
    node_cpus: int = 16

    def check(self) -> None:
        for name, value in (("--cpus", self.cpus), ("--node-cpus", self.node_cpus)):
            if value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        if not self.mem_per_cpu_gb > 0 or not math.isfinite(self.mem_per_cpu_gb):
            raise ConfigError(f"--mem-per-cpu must be a positive number of GB, got {self.mem_per_cpu_gb}")
        if not self.price_per_cpu_hour >= 0 or not math.isfinite(self.price_per_cpu_hour):
            raise ConfigError(f"--price must be >= 0 per CPU-hour, got {self.price_per_cpu_hour}")


@dataclass(frozen=True)
class StagePlan:
    name: str
    tasks: int
    cpu_s: float
    wall_s: float
    memory_mb_per_task: float
    arithmetic: list[str]


@dataclass(frozen=True)
class Plan:
    workload: Workload
    cluster: Cluster
    costs: RecipeCosts
    stages: list[StagePlan]
    kept_documents: float
    kept_tokens: float
    storage_bytes: dict[str, float]
    requests: dict[str, float]
    arithmetic: list[str]

    @property
    def cpu_s(self) -> float:
        return sum(s.cpu_s for s in self.stages) + self.costs.run_fixed_cpu_s

    @property
    def wall_s(self) -> float:
        return sum(s.wall_s for s in self.stages)

    @property
    def cost(self) -> float:
        return self.cpu_s / 3600 * self.cluster.price_per_cpu_hour


def stage_group(stage: str) -> str:
    """The planner's group of a run's stage: ``curate``, ``bff`` (BFF's decision task) or ``dedup`` (the rest)."""
    return "curate" if stage == "curate" else "bff" if stage == "dedup_bff" else "dedup"


def cpus_per_task(memory_mb: float, cluster: Cluster, stage: str) -> int:
    """CPUs whose memory one task occupies; a task larger than a node is an impossible plan (ConfigError)."""
    need = max(1, math.ceil(memory_mb / 1024 / cluster.mem_per_cpu_gb))
    if need > cluster.node_cpus:
        node_gb = cluster.node_cpus * cluster.mem_per_cpu_gb
        raise ConfigError(
            f"a {stage} task needs {memory_mb / 1024:.2f} GB but a node holds {node_gb:g} GB "
            f"({cluster.node_cpus} CPUs x {cluster.mem_per_cpu_gb:g} GB): raise --mem-per-cpu or --node-cpus"
        )
    return need


def stage_wall(cpu_s: float, tasks: int, memory_mb: float, cluster: Cluster, stage: str) -> tuple[float, str]:
    """Equal tasks in waves over the slots the CPUs and their memory allow."""
    slots = max(1, min(tasks, cluster.cpus // cpus_per_task(memory_mb, cluster, stage)))
    waves = math.ceil(tasks / slots)
    wall = waves * cpu_s / tasks
    return wall, f"{stage} wall = ceil({tasks:,} tasks / {slots:,} slots) = {waves:,} waves x {cpu_s / tasks:,.1f} s"


def bff_stage(costs: RecipeCosts, config: DedupConfig, curated: float, cluster: Cluster) -> StagePlan:
    """BFF's decision task: one, over every curated document in input order (the filter keeps the first copy),
    so its CPU is its wall time; its memory the run's peak plus the filter its n-gram estimate sizes."""
    from dedup.bff import FilterSize

    if not costs.bff_ngrams_per_curated_doc:
        raise ConfigError(
            f"recipe {costs.recipe!r} dedups with BFF but its costs have no BFF figures; measure it: "
            f"python -m bench.curate_profile --recipe RECIPE.yaml --write"
        )
    ngrams = curated * costs.bff_ngrams_per_curated_doc
    size = FilterSize.for_rate(config.bff_expected_ngrams or max(1, round(ngrams)), config.bff_fp_rate)
    cpu = costs.bff_fixed_cpu_s + ngrams * costs.bff_cpu_s_per_ngram
    memory = costs.peak_rss_mb + size.size_bytes / 2**20
    held = cpus_per_task(memory, cluster, "bff")  # a filter larger than a node: an impossible plan
    return StagePlan("bff", 1, cpu, cpu, memory, [
        f"bff n-grams = {curated:,.0f} curated documents x {costs.bff_ngrams_per_curated_doc:,.1f} (text bytes / 4, "
        f"the run's estimate) = {ngrams:,.0f}",
        f"bff CPU = {costs.bff_fixed_cpu_s:.2f} s + {ngrams:,.0f} n-grams x {costs.bff_cpu_s_per_ngram * 1e6:.4f} us "
        f"= {cpu:,.0f} s",
        "bff wall = its CPU: one task reads every document in input order (the first copy stays), serially",
        f"bff memory = {costs.peak_rss_mb:,.0f} MB (the profile run's peak) + the filter: {size.describe()}; "
        f"it holds the memory of {held:,} CPUs for its wall time ({held * cpu / 3600:,.1f} CPU-hours rented, "
        f"not in the cost, which counts CPU used)",
    ])  # fmt: skip


def plan(
    workload: Workload,
    costs: RecipeCosts,
    cluster: Cluster,
    cluster_memory_mb: int = 4096,
    dedup_removes: float | None = None,
    dedup: DedupConfig | None = None,
) -> Plan:
    """Tasks, CPU, wall time, memory per stage, documents, tokens, storage, store requests and cost.
    ``dedup_removes``: the share of curated documents the dedup stages remove across the whole source (a
    profile of a few WARCs sees only the duplicates inside them); None keeps the profile's. ``dedup``: the
    recipe's dedup configuration (None: FineWeb's MinHash); with ``method: bff`` a ``bff`` stage is added."""
    from dedup.config import DedupConfig
    from dedup.star import plan_clusters

    cluster.check()
    bff = dedup is not None and dedup.method == "bff"
    n, warcs, per = workload.responses, workload.warcs, costs.cpu_s_per_response
    curate_cpu = warcs * costs.task_fixed_cpu_s + n * per["curate"]
    curate_wall, curate_why = stage_wall(curate_cpu, warcs, costs.peak_rss_mb, cluster, "curate")
    curated = n * costs.curated_per_response
    if dedup_removes is None:
        kept, pairs = n * costs.kept_per_response, int(curated * costs.pairs_per_curated_doc)
        kept_why = f"kept documents = {n:,.0f} x {costs.kept_per_response:.4f} = {kept:,.0f}"
    else:
        if not 0 <= dedup_removes < 1:
            raise ConfigError(f"--dedup-removes must be a fraction in [0, 1), got {dedup_removes}")
        kept, pairs = curated * (1 - dedup_removes), int(curated * dedup_removes)
        kept_why = f"kept documents = {curated:,.0f} curated x (1 - {dedup_removes:g}) = {kept:,.0f}"
    try:
        clusters = plan_clusters(pairs, DedupConfig(cluster_memory_mb=cluster_memory_mb))
    except ValueError as err:
        raise ConfigError(f"--cluster-memory: {err}") from None
    dedup_cpu = n * per.get("dedup", 0.0)
    dedup_memory = costs.peak_rss_mb if bff else max(costs.peak_rss_mb, clusters.memory_mb_per_task)
    dedup_wall, dedup_why = stage_wall(dedup_cpu or 1e-9, warcs, dedup_memory, cluster, "dedup")
    stages = [
        StagePlan("curate", warcs, curate_cpu, curate_wall, costs.peak_rss_mb, [
            f"curate CPU = {warcs:,} tasks x {costs.task_fixed_cpu_s:.2f} s + {n:,.0f} responses x "
            f"{per['curate'] * 1000:.3f} ms = {curate_cpu:,.0f} s", curate_why,
        ]),
        StagePlan("dedup", warcs, dedup_cpu, dedup_wall, dedup_memory, [
            f"dedup CPU = {n:,.0f} responses x {per.get('dedup', 0.0) * 1000:.3f} ms = {dedup_cpu:,.0f} s",
            dedup_why, "the URL / exact passes and the filter applying BFF's decisions" if bff else clusters.describe(),
        ]),
    ]
    if dedup is not None and bff:
        stages.append(bff_stage(costs, dedup, curated, cluster))
    storage = {folder: n * costs.bytes_per_response.get(folder, 0.0) for folder in STORAGE_FOLDERS}
    warc_bytes = n * costs.warc_bytes_per_response
    writes = warcs * costs.objects_per_task + sum(storage.values()) / PART_BYTES
    requests = {"get": warc_bytes / READ_BLOCK_BYTES + warcs, "put": writes}
    arithmetic = [
        f"responses = {workload.how}",
        f"curated documents = {n:,.0f} x {costs.curated_per_response:.4f} = {curated:,.0f}",
        f"{kept_why}; tokens = kept x {costs.tokens_per_kept_doc:,.0f} words",
        f"CPU = run {costs.run_fixed_cpu_s:.1f} s + curate + dedup" + (" + bff" if bff else ""),
        f"store GETs = {warc_bytes / 2**40:,.2f} TiB of WARC / 32 MiB blocks + one open per WARC; PUTs = "
        f"{warcs:,} tasks x {costs.objects_per_task:.1f} objects + written bytes / 64 MiB parts",
    ]
    return Plan(workload, cluster, costs, stages, kept, kept * costs.tokens_per_kept_doc, storage, requests, arithmetic)
