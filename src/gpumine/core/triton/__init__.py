"""GPU kernels written in Triton, each with the same contract as a torch twin (see each module)."""
