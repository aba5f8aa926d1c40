"""Judging: the outcome of one cell of ``sdematrix run`` and of one model of ``exec``."""
