"""Evaluation: generate responses, judge them pairwise (both orders), report win rates."""
