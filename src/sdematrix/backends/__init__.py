"""Backends: one module each behind the :class:`~sdematrix.backends.base.Backend` protocol."""
