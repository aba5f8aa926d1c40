"""Test doubles: a fake ``sde64`` and a fake probe (executables) and a small matrix."""
