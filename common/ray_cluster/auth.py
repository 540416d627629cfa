"""Ray token authentication (Ray 2.52+, on by default for new local clusters in 2.60): find the token, turn it on.

Why this module: with Ray 2.60, ``ray.init()`` without an address starts a local cluster with token auth
and writes a token to ``~/.ray/auth_token``; from then on every ``ray start --head`` on that machine
finds the token and turns auth on too. But a client that connects to an *explicit* address
(``--ray-address HOST:PORT``, ``ray status --address HOST:PORT``) never turns token mode on by itself:
without ``RAY_AUTH_MODE=token`` it sends no token and fails with ``InvalidAuthToken``, even with the
token file right there. A token-mode client also works against a cluster without auth, so when a token
is available and ``RAY_AUTH_MODE`` is unset, turning token mode on is safe: that is what
``enable_token_mode`` does for the driver (workers get the mode from their raylet), and
``enable_for_this_process`` also refreshes Ray's cached config, as Ray does itself when it turns auth on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

MODE_VAR = "RAY_AUTH_MODE"
TOKEN_VAR = "RAY_AUTH_TOKEN"
TOKEN_PATH_VAR = "RAY_AUTH_TOKEN_PATH"
DEFAULT_TOKEN_PATH = Path.home() / ".ray" / "auth_token"


def token_source(env: Mapping[str, str] | None = None) -> str | None:
    """Where Ray would read the token from, in Ray's order (``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH``
    names, ``~/.ray/auth_token``), or None when there is none."""
    env = os.environ if env is None else env
    if env.get(TOKEN_VAR, "").strip():
        return TOKEN_VAR
    path = Path(env[TOKEN_PATH_VAR]).expanduser() if env.get(TOKEN_PATH_VAR) else DEFAULT_TOKEN_PATH
    try:
        return str(path) if path.read_text().strip() else None
    except OSError:
        return None


def enable_token_mode(env: dict[str, str] | None = None) -> bool:
    """Set ``RAY_AUTH_MODE=token`` in ``env`` (default: this process) when a token exists and no mode is set.

    An explicit ``RAY_AUTH_MODE`` (``token`` or ``disabled``) is respected. Returns whether token mode is on.
    """
    env = os.environ if env is None else env  # type: ignore[assignment]
    if env.get(MODE_VAR):
        return env[MODE_VAR].lower() == "token"
    if token_source(env) is not None:
        env[MODE_VAR] = "token"
    return env.get(MODE_VAR) == "token"


def enable_for_this_process() -> bool:
    """``enable_token_mode`` for ``os.environ``, then make an already imported Ray see it.

    Ray reads ``RAY_AUTH_MODE`` into its cached config when ``ray._raylet`` is imported; Ray's own
    ``_enable_token_auth`` re-initializes that config after setting the variable, and so does this.
    """
    was_set = bool(os.environ.get(MODE_VAR))
    on = enable_token_mode()
    if on and not was_set and "ray._raylet" in sys.modules:
        from ray._raylet import Config

        Config.initialize("")
    return on
