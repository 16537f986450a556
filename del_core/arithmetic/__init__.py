"""A from-scratch numeric-learning benchmark: small random-initialised models trained on seeded
arithmetic with every loss, the same data, steps and seeds, and paired confidence intervals.

    tasks.py      the seeded problem generator and its disjoint train / validation / test / OOD splits
    tokenizer.py  a character-level tokenizer (``tokenizers``) with one token per digit
    runs.py       one run: build the model, train with one loss, evaluate, write its result file
    scoring.py    greedy answers -> exact match, MAE, log-MAE, per-place digit accuracy
                  (paired t intervals: :mod:`del_core.evaluation.confidence`)

The benchmark's configuration, protocol (the grid, resumable) and report are
:mod:`del_core.experiments.numeric_bench`.
"""
