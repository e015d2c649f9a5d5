"""Pre-registered studies under a frozen gold reward: the design (``design``), the shared set-up (``shared_setup``),
the runner of cells (``runner``), the pilot's power step and pre-registration (``power``), the claims (``claims``),
the report (``report``, ``headline``, ``training``) and the command line (``cli``)."""
