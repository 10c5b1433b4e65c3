"""Tables the failure path wrote, marked so that the next invocation does not take them for the rules'.

After a failed sweep Snakemake's `onerror` writes runs.csv (a failed row per missing run) and the
tables, figures and findings made from it, outside Snakemake's bookkeeping. When the next
invocation has nothing to train (the failed configuration excluded, the same folder run with
another config whose runs are all done), Snakemake finds those files newer than their inputs and
keeps them: the failed rows would stay in every table and be archived. The marker is an input of
the tidy rule (workflow/rules/tidy.smk) and always newer than the tables the failure path wrote,
so Snakemake reruns tidy, and every stage after it, from the current matrix's runs.
"""

import json
import os
import time
from pathlib import Path

from scalesweep.contract import atomic


def mark(marker, written) -> None:
    """Record that the failure path writes (or wrote) the files `written`, and make the marker
    newer than every one of them. Called before the files are written, so a marker that cannot be
    written stops the failure path before it writes anything; and again after, to move its time
    past theirs. OSError naming the marker."""
    marker = Path(marker)
    marker.parent.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        with atomic.replaced_whole(marker) as temporary:
            temporary.write_text(json.dumps({"written_by": "the failure path (onerror)",
                                             "files": sorted(map(str, written))}, indent=1) + "\n")
    newest = max((Path(p).stat().st_mtime_ns for p in written if Path(p).exists()), default=0)
    now = max(time.time_ns(), newest + 1_000_000)
    os.utime(marker, ns=(now, now))


def marker_input(marker) -> list:
    """The tidy rule's input: the marker where a failure path has written one."""
    return [str(marker)] if Path(marker).exists() else []
