"""Where a model came from: the sealed privacy record every saved model carries (``record``), the weight sketches
that recognise copies (``sketch``), and the lineage guard built on both (``lineage``)."""
