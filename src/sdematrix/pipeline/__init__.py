"""The two runs: ``sdematrix run`` and ``sdematrix exec`` (plan -> run -> judge -> write)."""
