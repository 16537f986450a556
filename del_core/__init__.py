"""del_core: Digit Entropy Loss (DEL) and the numeric-loss baselines it is compared with.

from del_core import DigitVocab, build_loss
vocab = DigitVocab.from_tokenizer(tokenizer)
loss_fn = build_loss("del", vocab, weight=0.128)
out = loss_fn(logits, labels)          # out.loss, out.ce, out.aux, out.metrics
"""

from .losses import LOSS_NAMES, LossOutput, NumericLoss, build_loss
from .spans import IGNORE_INDEX, NumberSpans, number_spans
from .vocab import DigitVocab, MultiDigitVocabularyError

# The package's one version: pyproject.toml, the image's label and the documentation read it here.
__version__ = "0.3.0"

__all__ = [
    "IGNORE_INDEX",
    "LOSS_NAMES",
    "DigitVocab",
    "LossOutput",
    "MultiDigitVocabularyError",
    "NumberSpans",
    "NumericLoss",
    "build_loss",
    "number_spans",
]
