"""Training the families from recorded episodes: the middle step of record -> train -> deploy.

    dataset   windows over episodes (observation history, action chunk, mask) and their collate
    stats     normalization statistics computed from those windows
    config    the training settings (optimizer, batch, steps, checkpoints), read from YAML
    progress  the progress line on stderr
    train     the loop: AdamW, seeded batches and noise, checkpoints, exact resume
    cli       `egomimic-train`

A trained checkpoint is the project's own layout (egomimic_policy.checkpoints), so
`make_policy(<path>)` runs it through the same preparation and rollout as any other.
"""
