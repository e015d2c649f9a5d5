"""The one release path: raw labels in, released rows out, drawn once. ``release_dataset`` is the one release call
(in memory, or once per folder); ``transaction`` owns every step of a release (admit → draw → stage → register → seal
→ rename) and ``folder`` its steps on disk; ``rows`` is the draw itself (the measurement on the rows, the column
policy); ``budget`` is the privacy budget (its rule, its check and its setting); ``registry`` is the record of
releases (a machine's file, or a team's server); ``saved`` saves and loads releases with their ledger and marker."""
