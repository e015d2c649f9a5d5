"""One "machine" of a team (tests/test_team_registry.py): a process with its own HOME, cache and machine folder,
pointed at the team's registry URL. It releases the rows it is told to and prints one JSON line: what happened.

    python -m tests.helpers.team_machine OFFSET N [--near] [--rerelease] [--pause-inside FILE]

``--near`` edits every row a little (near-copies of rows OFFSET..OFFSET+N); ``--rerelease`` composes with earlier
releases of the rows (as ``label_rerelease``); ``--pause-inside FILE`` writes FILE once
the release's units are inside the registry's open transaction and then waits (for a test to kill the process)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    offset, n = int(argv[0]), int(argv[1])
    from squarechipo.privacy import LabelPipeline
    from squarechipo.privacy.release.release_dataset import release_dataset
    from tests.helpers.rows import distinct_pairs

    rows = distinct_pairs(n, offset=offset)
    if "--near" in argv:
        rows = rows.map(lambda row: {"chosen": row["chosen"] + " Then review it."})
    if "--pause-inside" in argv:
        import squarechipo.privacy.release.registry as registry

        signal, enter = Path(argv[argv.index("--pause-inside") + 1]), registry._enter

        def paused(db, *args):
            enter(db, *args)  # every row of the release inserted, the transaction still open
            signal.write_text("inside")
            time.sleep(600)

        registry._enter = paused
    folder = Path.cwd() / f"release_{offset}"
    try:
        released = release_dataset(rows, LabelPipeline(epsilon=0.5), folder, rerelease="--rerelease" in argv)
        print(json.dumps({"released": len(released), "folder": str(folder)}))
    except (ValueError, RuntimeError) as refused:
        print(json.dumps({"refused": str(refused)}))


if __name__ == "__main__":
    main(sys.argv[1:])
