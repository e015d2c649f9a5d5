"""What a release says about itself: the ledger (``ledger``: releases, ε, sealed), its binding to the rows it
released (``binding``: every reader's check), and what the losses do with it (``debiasing``)."""
