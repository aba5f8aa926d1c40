"""The ``sdematrix`` command line: argument parsing, the shared options, the small commands."""
