"""``loss.weight=auto``: lambda from the ratio of the digit term to CE at the start of training.

The digit terms differ in scale by orders of magnitude between models. DEL's term is a BCE on raw
logits: at a randomly initialised model (logits near 0) each class costs ~log 2 and the term is
about half the CE (0.52 x CE, the from-scratch benchmark); a pretrained LM's raw logits are large and
positive, so every wrong digit class costs about its logit and the term is ~29x the CE
(SmolLM2-135M-Instruct on the main job's problems). The paper's lambda 0.128 then makes the DEL part
3.8x the CE on the first step: its gradient, ~50x the CE's, is what the clipping keeps, and the
fine-tune learns less (docs/lambda.md). A lambda that works on one model is not a lambda for another.

The rule: lambda = ratio x CE / T on the first step's global batch, where T is the loss's digit
term at weight 1 (the mean over digit positions); the weighted term then starts at ``ratio`` x CE.
``DEFAULT_AUTO_RATIO`` is the ratio of the lambda the from-scratch benchmark chose on validation
for DEL (0.032 x 0.52 = 0.017, rounded to 0.02); docs/lambda.md has the measurements.
"""

from __future__ import annotations

import math

DEFAULT_AUTO_RATIO = 0.02


def auto_weight(ce: float, unit_term: float, ratio: float = DEFAULT_AUTO_RATIO) -> float:
    """lambda = ``ratio`` x ``ce`` / ``unit_term`` (the CE and the weight-1 digit term, both means
    over the same global batch). ValueError when the batch gives no finite positive values (no
    digit position in it, or a diverged model)."""
    if not ratio > 0:
        raise ValueError(f"auto weight: the ratio must be > 0, got {ratio}")
    if not (math.isfinite(ce) and math.isfinite(unit_term)) or ce <= 0 or unit_term <= 0:
        raise ValueError(
            f"auto weight: the first batch gives CE {ce} and digit term {unit_term}; both must be finite and "
            "> 0 (a batch without digit positions cannot set lambda: set loss.weight to a number)"
        )
    return ratio * ce / unit_term
