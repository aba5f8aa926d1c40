"""Helpers for the hardening tests (guard pages, fuzzing, sanitizers, valgrind).

Nothing here is collected by pytest: the modules hold references, the guard-page
sweep that runs in a child process, and small build helpers.
"""
