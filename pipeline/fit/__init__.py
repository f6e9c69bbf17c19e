"""Offline fitting and evaluation: what `groundstream calibrate` and `eval` run, never a worker.

This package may import every room of the runtime core (`pipeline.*`) but `pipeline.stages`;
the core never imports it, so
`import pipeline` loads no fitting code, nor scikit-learn or SciPy. Files:

* `calibrate.py` — the SGI / DGI cut-points and the DGI reference direction μ̂ from
  labelled examples (`fit_thresholds`, `fit_thresholds_from_scores`,
  `fit_reference_direction`, `strong_pass_cut`).
* `grounding_model.py` — the P(grounded) logistic model (scikit-learn's) and its cuts, with
  cross-validated figures and its fitted domain (`fit_grounding`, `fit_logistic`,
  `cross_validate`), and the cuts alone on given probabilities (`fit_cuts`,
  `operating_point`: what `calibrate --from-decisions` refits on reviewers' verdicts).
* `familiarity_model.py` — the familiarity test every fitted model carries: principal components
  of the answers' embeddings and the cut holding a share of them familiar out of fold
  (`fit_familiarity`).
* `judge_share.py` — the band of P(grounded) a route's judge is asked about, fitted for
  a share of the answers (`fit_judge_share`, `fit_bands`), and the frontier of shares it
  was chosen from (`calibrate --judge-share`).
* `metrics.py` — AUROC, ROC, Youden's cut, length-matched AUROC, calibration tables, the
  Wilson interval.
* `folds.py` — the cross-validation split every fit shares (`group_folds`: scikit-learn's
  `GroupKFold` by context).

The textbook statistics are scikit-learn's (and the Wilson interval is checked against
SciPy's); what is written here is the project's own reasoning: the cut searches under an
error bound, the judge band, the regimes.
"""

from pipeline.fit.calibrate import FitResult, fit_reference_direction, fit_thresholds
from pipeline.fit.grounding_model import GroundingFit, fit_grounding

__all__ = [
    "FitResult",
    "GroundingFit",
    "fit_grounding",
    "fit_reference_direction",
    "fit_thresholds",
]
