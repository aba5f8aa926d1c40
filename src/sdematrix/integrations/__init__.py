"""sdematrix inside other tools: the pytest plugin, Docker, GitHub job matrices."""
