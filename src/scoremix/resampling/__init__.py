"""Layer 3: resampling — cluster and two-way bootstrap weights, weighted counting of a
population of trials, replicates, studentised / expanded / percentile intervals.

Used by metrics' intervals, the predictive layer, the model tables and the fairness
measures; imports only :mod:`scoremix.trials` and :mod:`scoremix.metrics` (layers 1–2).
"""
