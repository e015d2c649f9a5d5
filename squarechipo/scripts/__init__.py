"""The scripts of the ``squarechipo`` command, in TRL's shape: each module has ``main`` and ``make_parser``.

Training scripts (``train``, ``sft``, ``reward_model``, ``lp2st``, ``self_play``, ``select_policy``,
``gold_judge``) take ``main(script_args, training_args, model_args)`` (or their one config) and a ``TrlParser``
from ``make_parser(prog)``, as ``trl/scripts/dpo.py`` does; ``squarechipo train --config x.yaml`` launches them
through Accelerate. Evaluation scripts (``judge``, ``judge_accuracy``, ``aggregate``) take ``main(argv)``.
``recipes/*.py`` and ``eval/*.py`` in a checkout are thin wrappers around these modules.
"""
