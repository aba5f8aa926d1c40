"""The QEMU backend: the program runs under ``qemu-x86_64 -cpu <Model>``."""
