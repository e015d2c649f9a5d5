"""LLM-as-judge win rate of a policy against a baseline (Zhou et al. 2025 (Square-χPO), App. E).

A thin wrapper kept at the path the project promises (``python eval/judge.py ...``): the script is
:mod:`squarechipo.scripts.judge`, with the same options.
"""

from squarechipo.scripts.judge import main

if __name__ == "__main__":
    main()
