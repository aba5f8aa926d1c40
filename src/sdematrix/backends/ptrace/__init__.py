"""The ptrace backend: the program runs natively under ``vc-tracer``."""
