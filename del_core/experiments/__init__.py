"""The experiments core: a grid of (loss, lambda, seed) units run into a resumable output root,
one record per finished unit, every loss compared with MLE (paired, with 95% intervals), and the
markdown and PNG report helpers.

    grid         Unit (loss, lambda, seed, phase) and the seed-major grid of units
    output_root  the fingerprinted output root (resuming with other settings is refused) and the
                 atomic per-unit done markers
    results      UnitResult, the one record of a finished unit
    comparison   a loss against the baseline, paired over seeds (and over problems)
    report_parts cell formatters, markdown tables and the figure helpers of every report
    spawned      one step of a unit (training, evaluation) as a library call in a spawned process

Its two users, each with its own data, train-unit and score-unit:

    study          fine-tuning a pretrained model with each loss (recipes/study.py)
    numeric_bench  small models trained from scratch on seeded arithmetic (recipes/numeric_bench.py)

The users are not imported here (the benchmark's runs import its configuration).
"""
