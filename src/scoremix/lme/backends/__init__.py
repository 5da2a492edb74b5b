"""Backends that fit a :class:`scoremix.lme.spec.ModelSpec`."""
