"""The Intel SDE backend: the program runs under ``sde64 -<chip>``."""
