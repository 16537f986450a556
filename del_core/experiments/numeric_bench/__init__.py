"""The from-scratch numeric benchmark, a user of :mod:`del_core.experiments`: small random-initialised
models trained on seeded arithmetic with every loss, the same data, steps and seeds, and paired
confidence intervals.

    config          NumericBenchConfig, load_numeric_bench_config (recipes/configs/numeric-bench*.yaml)
    tasks           the seeded problem generator and its disjoint train / validation / test / OOD splits
    char_tokenizer  a character-level tokenizer (``tokenizers``) with one token per digit; encodes problems
    run_unit        one unit: build the model, train it with the plain loop
                    (:mod:`del_core.plain_loop`), score it, write its done marker
    score_unit      greedy answers -> exact match, MAE, log-MAE, per-place digit accuracy; teacher-forced
                    metrics from :mod:`del_core.evaluation.heldout.teacher_forced`
    protocol        lambda chosen on validation per loss, then the test seeds: the grid, resumable
    report          the markdown table, summary.json and the plot
    main            the command line of recipes/numeric_bench.py

The modules are imported on use (``run_unit`` imports the configuration).
"""
