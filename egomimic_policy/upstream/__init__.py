"""Upstream EgoVerse policies (Fold, MoE) rebuilt with upstream's module and parameter names.

The lab's checkpoints are trained by upstream's code; these modules reproduce its structures
(names, shapes, math) so that `load_state_dict(strict=True)` takes a real checkpoint as it is.
`checkpoint` reads the file without executing it; `vision`, `encoders`, `denoisers` and
`samplers` are the stages; `pipeline` builds them from the checkpoint's own config tree.
"""
