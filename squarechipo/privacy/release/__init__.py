"""The one release path: raw labels in, released rows out, drawn once. ``dataset`` draws a release of rows and owns
the release transaction (admit → draw → stage → register → rename); ``registry`` is this machine's record of
releases; ``store`` saves and loads releases with their ledger and marker."""
