"""A run's own environment variables (`matrix.env`, `training.env`): how the launcher, the run
path, the trainer's header and the runs table spell one mapping of them.

The launcher starts the trainer under `env NAME=value ...` (each word quoted, so a value is never
shell syntax) and names the variables with `--env-names`; the trainer records what it saw of them
in its header (`env`), so the runs table says what the processes had, not only what was asked.

Standard library only, Python 3.8: the trainers import it inside the course's containers.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional

# A POSIX shell variable name: what `env NAME=value` can set and a process can read back.
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# The runs table's value for a run started with no variables of its own (an empty cell would
# read back as missing).
NO_ENV = "none"
# Characters a run path word keeps as they are; every other byte becomes +HH. No '%' (SLURM
# reads %j, %3t, ... in the log paths the slurm plugin builds from wildcards), no '/' or '~' (the
# run path's separators), nothing a shell reads.
_PATH_SAFE = re.compile(r"[A-Za-z0-9_.,:@=-]")


def env_text(env) -> str:
    """'NAME=value,NAME2=value2' sorted by name, or NO_ENV: the runs table's cell. Text passes as
    it is (a runs.csv or manifest read back)."""
    if isinstance(env, str):
        return env or NO_ENV
    if not env:
        return NO_ENV
    return ",".join(f"{name}={value_text(value)}" for name, value in sorted(env.items()))


def value_text(value) -> str:
    """A config value as the process sees it: YAML's 4 is "4"."""
    return str(value)


def path_word(env: Mapping) -> str:
    """env_text, every byte outside a safe set written +HH (UTF-8): `X=$(touch x)` becomes
    `X=+24+28touch+20x+29`, a path word no shell, SLURM or Snakemake wildcard reads as syntax."""
    return "".join(
        char if _PATH_SAFE.match(char) else "".join(f"+{byte:02X}" for byte in char.encode("utf-8"))
        for char in env_text(env)
    )


def assignments(env: Mapping) -> list:
    """`NAME=value` words for `env`, sorted by name (one command per mapping)."""
    return [f"{name}={value_text(value)}" for name, value in sorted(env.items())]


def names_word(env: Mapping) -> str:
    """The --env-names value: the names, comma-separated."""
    return ",".join(sorted(env))


def seen(names: Optional[str], environ: Mapping) -> dict:
    """What this process has of the variables `--env-names` lists (None where unset): the
    header's `env`."""
    return {name: environ.get(name) for name in (names or "").split(",") if name}
