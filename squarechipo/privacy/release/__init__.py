"""The one release path: raw labels in, released rows out, drawn once. ``transaction`` owns every step of a release
(admit → draw → stage → register → rename) and ``release_dataset``; ``rows`` is the draw itself (the measurement on
the rows, the column policy); ``registry`` is this machine's record of releases; ``store`` saves and loads releases
with their ledger and marker, and ``release_once`` makes one per folder."""
