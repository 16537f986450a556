"""Release 0.1's package of the numeric benchmark, now :mod:`del_core.experiments.numeric_bench`.
Each old module path (config, protocol, report, runs, scoring, tasks, tokenizer) still imports for
this release, with a FutureWarning naming the new one, and goes in the next one."""
