"""The from-scratch numeric benchmark, a user of :mod:`del_core.experiments`: small random-initialised
models trained on seeded arithmetic with every loss, the same data, steps and seeds, and paired
confidence intervals.

    config    NumericBenchConfig, load_numeric_bench_config (recipes/configs/numeric-bench*.yaml)
    protocol  lambda chosen on validation per loss, then the test seeds: the grid, resumable
    report    the markdown table, summary.json and the plot
    main      the command line of recipes/numeric_bench.py

Its data, train-unit and score-unit are :mod:`del_core.arithmetic` (tasks, tokenizer, runs, scoring).
This package's modules are imported on use: ``del_core.arithmetic.runs`` imports the configuration.
"""
