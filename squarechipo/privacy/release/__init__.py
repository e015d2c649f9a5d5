"""The one release path: raw labels in, released rows out, drawn once. ``store.release_dataset`` is the one release
call (in memory, or once per folder); ``transaction`` owns every step of a release (admit → draw → stage → register
→ seal → rename); ``rows`` is the draw itself (the measurement on the rows, the column policy); ``registry`` is the
record of releases (a machine's file, or a team's server); ``store`` saves and loads releases with their ledger and
marker."""
