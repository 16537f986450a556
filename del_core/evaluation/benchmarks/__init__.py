"""Benchmarks: the zero-shot evaluation of the DEL paper on its seven math benchmarks
(``recipes/evaluate.py``).

  files.py          the seven benchmark files read into :class:`~del_core.evaluation.question.Record`
                    (:func:`load_benchmark`, :func:`data_dir_from`, :func:`parse_benchmark_list`)
  prompts.py        the prompts: program of thought, chain of thought, multiple choice
  zero_shot.py      the protocol: records + a generator -> scored rows (:func:`evaluate`: a program
                    first, run in the sandbox, then chain of thought for what is left unanswered)
  scored_rows.py    an output -> its answer (read as text, or the printed answer of its program) ->
                    a scored row; shared by the protocol and re-scoring
  rescoring.py      re-scoring saved outputs without a model (``score_only``: :func:`rescore`,
                    :func:`score_outputs`)
  summary_table.py  the console table of a summary
  config.py         the command line's options (:class:`EvalConfig`, :func:`load_eval_config`)
  runner.py         what ``recipes/evaluate.py`` does (:func:`run`): evaluate a model, or re-score;
                    bad input is one :class:`EvaluationError`

Answers are read and graded by :mod:`del_core.evaluation.answers`, programs run in
:mod:`del_core.evaluation.sandbox`, outputs come from :mod:`del_core.evaluation.generation`.
"""

from .config import EvalConfig, load_eval_config, options_help
from .files import BenchmarkError, data_dir_from, load_benchmark, parse_benchmark_list
from .rescoring import PredictionsError, rescore, score_outputs
from .runner import EvaluationError, run
from .zero_shot import GenerationLengths, evaluate

__all__ = [
    "BenchmarkError",
    "EvalConfig",
    "EvaluationError",
    "GenerationLengths",
    "PredictionsError",
    "data_dir_from",
    "evaluate",
    "load_benchmark",
    "load_eval_config",
    "options_help",
    "parse_benchmark_list",
    "rescore",
    "run",
    "score_outputs",
]
