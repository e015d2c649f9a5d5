"""Privacy audits: empirical ε lower bounds that test the claims (``python -m squarechipo.audit``)."""
