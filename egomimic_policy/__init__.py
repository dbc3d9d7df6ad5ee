"""Policies: families, checkpoints, rollout chunking, policy server, episodes, training."""
