"""Pipeline parallel with torch.distributed.pipelining: layers split into stages over the `pp` mesh dim.

The gradient-accumulation micro-batches are the pipeline's micro-batches.
"""

from __future__ import annotations

from typing import Literal

PPSchedule = Literal["1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "GPipe"]
