"""Test modules shipped with sdematrix (added to a pytest run by the plugin)."""
