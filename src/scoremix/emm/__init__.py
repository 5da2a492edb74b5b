"""After the fit: estimated marginal means, contrasts and joint tests (emmeans's rules).

Layer 5: uses the engines of :mod:`scoremix.lme` only.  Modules, one concept each:
:mod:`~scoremix.emm.grid` (reference grid), :mod:`~scoremix.emm.basis` (what a fit must
provide, df methods), :mod:`~scoremix.emm.links` (link scales), :mod:`~scoremix.emm.means`
(marginal means and weights), :mod:`~scoremix.emm.contrast`, :mod:`~scoremix.emm.adjust`
(multiplicity), :mod:`~scoremix.emm.joint` (F tests of the model terms),
:mod:`~scoremix.emm.eer_contrast` (model-EER differences through the predictive layer),
:mod:`~scoremix.emm.dcf_contrast` (model min/act DCF differences, parametric or posterior).
"""

from scoremix.emm.contrast import ContrastResult, contrast
from scoremix.emm.dcf_contrast import dcf_contrast
from scoremix.emm.eer_contrast import eer_contrast
from scoremix.emm.errors import EmmError
from scoremix.emm.grid import RefGrid, ref_grid
from scoremix.emm.joint import joint_tests
from scoremix.emm.links import Link
from scoremix.emm.means import EmmGrid, emmeans, regrid

__all__ = ["ContrastResult", "EmmError", "EmmGrid", "Link", "RefGrid", "contrast", "dcf_contrast", "eer_contrast",
           "emmeans", "joint_tests", "ref_grid", "regrid"]
