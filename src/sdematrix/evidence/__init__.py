"""What a run executed and whether the model has it: decoding, mixes, symbols, chip checks."""
