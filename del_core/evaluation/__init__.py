"""Evaluation: the zero-shot benchmarks of the DEL paper (``recipes/evaluate.py``), the held-out
metrics of training and the experiments, and the check of the benchmark grader. One package per
concern:

  question.py    :class:`~del_core.evaluation.question.Record`, the one record every part passes
                 (question, gold, kind, options), the benchmarks' names, the option letters
  answers/       reading the answer an output wrote and grading it against the gold
                 (extract, program_output, segments, hedges, unknowns, numbers, math_equivalence,
                 scoring: is_correct and the summary metrics)
  sandbox/       running generated programs in a separate, limited process
  generation.py  greedy generation (vLLM or Hugging Face), the one path of the benchmarks and the
                 held-out answers (:func:`~del_core.evaluation.generation.generate_greedy`)
  benchmarks/    the benchmark files, the prompts, the zero-shot protocol, re-scoring saved outputs,
                 the options and the runner of ``recipes/evaluate.py``
  heldout/       held-out metrics: teacher-forced (CE, digit accuracy and entropy, answer accuracy)
                 and greedy answers scored by the answer reader
  grader_check/  differential grading of the answer reader on a generated, labelled corpus
                 (``recipes/grade_corpus.py``)

Imports run downward only: question <- answers <- benchmarks, heldout, grader_check; sandbox and
generation import nothing else of evaluation (tests/del_core/evaluation/test_evaluation_layers.py).
Confidence intervals are :mod:`del_core.confidence`.
"""
