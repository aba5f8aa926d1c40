"""What the user's files say: the matrix file, CPU models, exec expectations, their schemas."""
