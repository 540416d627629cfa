"""User-supplied names that become one path component (a dump, a recipe, an ablation dataset).

Such a name is joined under an output folder (``OUT/<dump>/``, ``RUN/refilter/<recipe name>/``,
``OUT/mixtures/<dataset>/``), so ``..``, an absolute path, a ``/`` or an empty name would put the
output elsewhere (the audit saw ``--dump ../..`` write a whole run outside ``--out`` and a recipe
named ``..`` overwrite the run's own ``curated/``), and control characters would reach the terminal.
A safe name is refused in one line before anything is written, never rewritten.
"""

from __future__ import annotations

import re

from common.config import ConfigError

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
SAFE_NAME_RULE = "1 to 128 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"


class UnsafeName(ConfigError):
    """A name that cannot be one path component; the message is one line, the value escaped."""


def checked_name(value: object, what: str) -> str:
    """`value` when it is a safe path component, else UnsafeName naming `what` (``--dump``, ``recipe name``)."""
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
        shown = ascii(value) if isinstance(value, str) else f"of type {type(value).__name__}"
        raise UnsafeName(f"{what} {shown[:200]} is not a safe name ({SAFE_NAME_RULE})")
    return value
