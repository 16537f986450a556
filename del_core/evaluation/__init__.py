"""Evaluation: zero-shot benchmarks of the DEL paper (``recipes/evaluate.py``) and held-out metrics.

Benchmarks: benchmarks (loading into one record type) -> prompts -> generation (vLLM or HF) ->
extract (answer from text; segments: where it is written, hedges: when there is none) and
program_output (the program to run, the answer it printed) -> sandbox (running generated programs)
-> scoring (comparison and metrics) -> report (the summary file and the console table); ``protocol``
ties them together, ``config`` (EvalConfig) and ``runner`` are the command line's options and steps.

Held-out problems (training and the study): ``generation.generate_greedy`` (the one greedy
generation path), ``greedy_answers`` (greedy answers scored by the one answer reader) and
``teacher_forced`` (the one module of teacher-forced metrics: CE, digit accuracy and entropy, number
and answer accuracy of the reference answers, token by token).
"""
