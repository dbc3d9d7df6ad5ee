"""Policies: families, checkpoints, rollout chunking, policy server, synthetic sim episodes, training."""
